//! The tables of the course over time: `steps`, one row per step begun (by a step mark, or by
//! the repeating allocation that stands for one in a trace without marks), and `samples`, one
//! row per reading of the driver's used memory (`cuMemGetInfo`, as the tracer samples it)
//! beside the device memory the trace held then.

use anyhow::Result;
use vramtrace_collector::event::Event;
use vramtrace_collector::live::{Holder, LiveState};

use super::allocations::bits;
use super::table::{table, TableFile};

table! {
    /// The columns of `steps` (docs/data.md).
    Steps {
        pid: "required int64" => Dictionary;
        step: "required int64" => Delta;
        begin_seq: "required int64" => Delta;
        begin_time_ns: "required int64" => Delta;
        device_bytes: "required int64" => Plain;
        device_objects: "required int64" => Plain;
    }
}

table! {
    /// The columns of `samples` (docs/data.md).
    Samples {
        pid: "required int64" => Dictionary;
        device: "required int32" => Dictionary;
        seq: "required int64" => Delta;
        time_ns: "required int64" => Delta;
        step: "required int64" => Delta;
        used_bytes: "required int64" => Plain;
        total_bytes: "required int64" => Dictionary;
        traced_bytes: "required int64" => Plain;
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
    rows.pid.int(pid);
    rows.step.int(bits(state.steps()));
    rows.begin_seq.int(bits(e.seq));
    rows.begin_time_ns.int(bits(e.time_ns));
    rows.device_bytes.int(bits(bytes));
    rows.device_objects.int(bits(objects));
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
    rows.pid.int(pid);
    rows.device.int(e.device);
    rows.seq.int(bits(e.seq));
    rows.time_ns.int(bits(e.time_ns));
    rows.step.int(bits(state.steps()));
    rows.used_bytes.int(bits(total.saturating_sub(free)));
    rows.total_bytes.int(bits(total));
    rows.traced_bytes.int(bits(state.device_bytes(e.device)));
    t.row_done()
}
