//! The tables of the course over time: `steps`, one row per step begun (by a step mark, or by
//! the repeating allocation that stands for one in a trace without marks), and `samples`, one
//! row per reading of the driver's used memory (`cuMemGetInfo`, as the tracer samples it)
//! beside the device memory the trace held then.

use anyhow::Result;
use arrow_array::builder::{Int32Builder, Int64Builder};
use vramtrace_collector::event::Event;
use vramtrace_collector::live::{Holder, LiveState};

use super::allocations::bits;
use super::table::{table, TableFile};

table! {
    /// The columns of `steps` (docs/data.md).
    Steps {
        pid: Int64Builder = Int64Builder::new(), false;
        step: Int64Builder = Int64Builder::new(), false;
        begin_seq: Int64Builder = Int64Builder::new(), false;
        begin_time_ns: Int64Builder = Int64Builder::new(), false;
        device_bytes: Int64Builder = Int64Builder::new(), false;
        device_objects: Int64Builder = Int64Builder::new(), false;
    }
}

table! {
    /// The columns of `samples` (docs/data.md).
    Samples {
        pid: Int64Builder = Int64Builder::new(), false;
        device: Int32Builder = Int32Builder::new(), false;
        seq: Int64Builder = Int64Builder::new(), false;
        time_ns: Int64Builder = Int64Builder::new(), false;
        step: Int64Builder = Int64Builder::new(), false;
        used_bytes: Int64Builder = Int64Builder::new(), false;
        total_bytes: Int64Builder = Int64Builder::new(), false;
        traced_bytes: Int64Builder = Int64Builder::new(), false;
    }
}

/// A row for the step event `e` began (applied to `state`): device memory live right after it.
pub fn step(t: &mut TableFile<Steps>, state: &LiveState, pid: i64, e: &Event) -> Result<()> {
    let (mut bytes, mut objects) = (0, 0);
    for h in state.holders() {
        if matches!(h.holder, Holder::Device { .. }) {
            bytes += h.bytes;
            objects += h.count;
        }
    }
    let rows = &mut t.rows;
    rows.pid.append_value(pid);
    rows.step.append_value(bits(state.steps()));
    rows.begin_seq.append_value(bits(e.seq));
    rows.begin_time_ns.append_value(bits(e.time_ns));
    rows.device_bytes.append_value(bits(bytes));
    rows.device_objects.append_value(bits(objects));
    t.row_done()
}

/// A row for the driver's reading `e` (free and total bytes of its device), applied to `state`.
pub fn sample(
    t: &mut TableFile<Samples>,
    state: &LiveState,
    pid: i64,
    e: &Event,
    free: u64,
    total: u64,
) -> Result<()> {
    let rows = &mut t.rows;
    rows.pid.append_value(pid);
    rows.device.append_value(e.device);
    rows.seq.append_value(bits(e.seq));
    rows.time_ns.append_value(bits(e.time_ns));
    rows.step.append_value(bits(state.steps()));
    rows.used_bytes
        .append_value(bits(total.saturating_sub(free)));
    rows.total_bytes.append_value(bits(total));
    rows.traced_bytes
        .append_value(bits(state.device_bytes(e.device)));
    t.row_done()
}
