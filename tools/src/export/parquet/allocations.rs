//! The `allocations` table: one row per object the trace made (pointer allocations, physical
//! handles, mappings, reservations, pinned and registered host memory, arrays, IPC mappings,
//! NCCL buffers, registrations and windows), with where and when it was made and, once it
//! ended, when and by what call. A leak is `free_seq IS NULL`; growth is a `GROUP BY` of the
//! rows still live.
//!
//! Rows come in the order objects ended (as the replay's endings say, event by event), then the
//! objects still live at the end of the trace in the order the live set lists them.

use arrow_array::builder::{Int32Builder, Int64Builder, ListBuilder, StringBuilder};
use vramtrace_collector::live::{Ended, LiveObject, LiveState};

use super::names::Names;
use super::table::{table, TableFile};
use anyhow::Result;

table! {
    /// The columns of `allocations` (docs/data.md).
    Allocations {
        pid: Int64Builder = Int64Builder::new(), false;
        category: StringBuilder = StringBuilder::new(), false;
        accounting: StringBuilder = StringBuilder::new(), false;
        api: StringBuilder = StringBuilder::new(), false;
        device: Int32Builder = Int32Builder::new(), false;
        address: Int64Builder = Int64Builder::new(), false;
        bytes: Int64Builder = Int64Builder::new(), false;
        handle: Int64Builder = Int64Builder::new(), true;
        pool: Int64Builder = Int64Builder::new(), true;
        communicator: Int64Builder = Int64Builder::new(), true;
        thread: Int64Builder = Int64Builder::new(), false;
        alloc_seq: Int64Builder = Int64Builder::new(), false;
        alloc_time_ns: Int64Builder = Int64Builder::new(), false;
        alloc_step: Int64Builder = Int64Builder::new(), false;
        free_seq: Int64Builder = Int64Builder::new(), true;
        free_time_ns: Int64Builder = Int64Builder::new(), true;
        free_step: Int64Builder = Int64Builder::new(), true;
        free_api: StringBuilder = StringBuilder::new(), true;
        site: Int64Builder = Int64Builder::new(), false;
        label: StringBuilder = StringBuilder::new(), false;
        module: StringBuilder = StringBuilder::new(), true;
        flags: ListBuilder<StringBuilder> = ListBuilder::new(StringBuilder::new()), false;
    }
}

/// A 64-bit address, handle or id with its bits unchanged (user-space addresses stay
/// positive).
pub fn bits(v: u64) -> i64 {
    v as i64
}

/// Appends the columns of `o` up to the end columns.
fn made(t: &mut Allocations, pid: i64, o: &LiveObject<'_>) {
    let origin = &o.origin;
    t.pid.append_value(pid);
    t.category.append_value(o.category.name());
    t.accounting.append_value(accounting_name(o));
    t.api.append_value(origin.api.name());
    t.device.append_value(o.device);
    t.address.append_value(bits(o.address));
    t.bytes.append_value(bits(o.bytes));
    t.handle.append_option(o.handle.map(bits));
    let pooled = o.category == vramtrace_collector::live::Category::Async;
    t.pool.append_option(pooled.then_some(bits(origin.pool)));
    t.communicator.append_option(origin.communicator.map(bits));
    t.thread.append_value(i64::from(origin.thread));
    t.alloc_seq.append_value(bits(origin.seq));
    t.alloc_time_ns.append_value(bits(origin.time_ns));
    t.alloc_step.append_value(bits(origin.step));
}

/// Appends the columns after the end columns, and ends the row.
fn named(
    t: &mut TableFile<Allocations>,
    state: &LiveState,
    names: &mut Names,
    o: &LiveObject<'_>,
) -> Result<()> {
    let rows = &mut t.rows;
    rows.site.append_value(i64::from(o.origin.site));
    rows.label.append_value(names.site(state, o.origin.site));
    rows.module
        .append_option(names.module(state, o.origin.module));
    let flags = rows.flags.values();
    for f in o.flags.iter() {
        flags.append_value(f.name());
    }
    rows.flags.append(true);
    t.row_done()
}

fn accounting_name(o: &LiveObject<'_>) -> &'static str {
    use vramtrace_collector::live::Accounting;
    match o.category.accounting() {
        Accounting::Device => "device",
        Accounting::Host => "host",
        Accounting::VirtualAddress => "virtual-address",
        Accounting::None => "none",
    }
}

/// A row for an object that ended.
pub fn ended(
    t: &mut TableFile<Allocations>,
    state: &LiveState,
    names: &mut Names,
    pid: i64,
    e: &Ended,
) -> Result<()> {
    let rows = &mut t.rows;
    made(rows, pid, &e.object);
    rows.free_seq.append_value(bits(e.seq));
    match e.by {
        Some(by) => {
            rows.free_time_ns.append_value(bits(by.time_ns));
            rows.free_step.append_value(bits(by.step));
            rows.free_api.append_value(by.api.name());
        }
        None => {
            rows.free_time_ns.append_null();
            rows.free_step.append_null();
            rows.free_api.append_null();
        }
    }
    named(t, state, names, &e.object)
}

/// A row for an object live at the end of the trace.
pub fn live(
    t: &mut TableFile<Allocations>,
    state: &LiveState,
    names: &mut Names,
    pid: i64,
    o: &LiveObject<'_>,
) -> Result<()> {
    let rows = &mut t.rows;
    made(rows, pid, o);
    rows.free_seq.append_null();
    rows.free_time_ns.append_null();
    rows.free_step.append_null();
    rows.free_api.append_null();
    named(t, state, names, o)
}
