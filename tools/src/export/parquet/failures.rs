//! The `failures` table: one row per failed call, with what it asked for, the device memory
//! live when it failed, and where it came from. An out-of-memory row next to the
//! `allocations` rows live at its `seq` says what held the device.

use anyhow::Result;
use arrow_array::builder::{BooleanBuilder, Int32Builder, Int64Builder, StringBuilder};
use vramtrace_collector::live::{Failure, LiveState};

use super::allocations::bits;
use super::names::Names;
use super::table::{table, TableFile};

table! {
    /// The columns of `failures` (docs/data.md).
    Failures {
        pid: Int64Builder = Int64Builder::new(), false;
        seq: Int64Builder = Int64Builder::new(), false;
        time_ns: Int64Builder = Int64Builder::new(), false;
        step: Int64Builder = Int64Builder::new(), false;
        api: StringBuilder = StringBuilder::new(), false;
        result: Int32Builder = Int32Builder::new(), false;
        out_of_memory: BooleanBuilder = BooleanBuilder::new(), false;
        request_bytes: Int64Builder = Int64Builder::new(), false;
        device: Int32Builder = Int32Builder::new(), false;
        live_device_bytes: Int64Builder = Int64Builder::new(), false;
        thread: Int64Builder = Int64Builder::new(), false;
        site: Int64Builder = Int64Builder::new(), false;
        label: StringBuilder = StringBuilder::new(), false;
        module: StringBuilder = StringBuilder::new(), true;
    }
}

/// A row for failure `f` of `state`.
pub fn write(
    t: &mut TableFile<Failures>,
    state: &LiveState,
    names: &mut Names,
    pid: i64,
    f: &Failure,
) -> Result<()> {
    let rows = &mut t.rows;
    rows.pid.append_value(pid);
    rows.seq.append_value(bits(f.seq));
    rows.time_ns.append_value(bits(f.time_ns));
    rows.step.append_value(bits(f.origin.step));
    rows.api.append_value(f.api.name());
    rows.result.append_value(f.result);
    rows.out_of_memory.append_value(f.out_of_memory);
    rows.request_bytes.append_value(bits(f.request_bytes));
    rows.device.append_value(f.device);
    rows.live_device_bytes
        .append_value(bits(f.live_device_bytes));
    rows.thread.append_value(i64::from(f.origin.thread));
    rows.site.append_value(i64::from(f.origin.site));
    rows.label.append_value(names.site(state, f.origin.site));
    rows.module
        .append_option(names.module(state, f.origin.module));
    t.row_done()
}
