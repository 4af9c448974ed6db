//! The `failures` table: one row per failed call, with what it asked for, the device memory
//! live when it failed, and where it came from. An out-of-memory row next to the
//! `allocations` rows live at its `seq` says what held the device.

use anyhow::Result;
use vramtrace_collector::live::{Failure, LiveState};

use super::allocations::bits;
use super::names::Names;
use super::table::{table, TableFile};

table! {
    /// The columns of `failures` (docs/data.md).
    Failures {
        pid: "required int64" => Dictionary;
        seq: "required int64" => Delta;
        time_ns: "required int64" => Delta;
        step: "required int64" => Dictionary;
        api: "required binary" " (STRING);" => Dictionary;
        result: "required int32" => Dictionary;
        out_of_memory: "required boolean" => Plain;
        request_bytes: "required int64" => Dictionary;
        device: "required int32" => Dictionary;
        live_device_bytes: "required int64" => Dictionary;
        thread: "required int64" => Dictionary;
        site: "required int64" => Dictionary;
        label: "required binary" " (STRING);" => Dictionary;
        module: "optional binary" " (STRING);" => Dictionary;
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
    rows.pid.int(pid);
    rows.seq.int(bits(f.seq));
    rows.time_ns.int(bits(f.time_ns));
    rows.step.int(bits(f.origin.step));
    rows.api.text(f.api.name());
    rows.result.int(f.result);
    rows.out_of_memory.boolean(f.out_of_memory);
    rows.request_bytes.int(bits(f.request_bytes));
    rows.device.int(f.device);
    rows.live_device_bytes.int(bits(f.live_device_bytes));
    rows.thread.int(i64::from(f.origin.thread));
    rows.site.int(i64::from(f.origin.site));
    rows.label.text(names.site(state, f.origin.site));
    rows.module.opt_text(names.module(state, f.origin.module));
    t.row_done()
}
