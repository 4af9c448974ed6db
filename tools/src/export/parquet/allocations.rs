//! The `allocations` table: one row per object the trace made (pointer allocations, physical
//! handles, mappings, reservations, pinned and registered host memory, arrays, IPC mappings,
//! NCCL buffers, registrations and windows), with where and when it was made and, once it
//! ended, when and by what call. A leak is `free_seq IS NULL`; growth is a `GROUP BY` of the
//! rows still live.
//!
//! Rows come in the order objects ended (as the replay's endings say, event by event), then the
//! objects still live at the end of the trace in the order the live set lists them.
//!
//! The table is as long as half the trace: each word column's dictionary is keyed by the id the
//! row already has (site, API, category, module, flag), so a row costs table lookups, and a
//! site's label is worked out once.

use anyhow::Result;
use vramtrace_collector::live::{Accounting, Category, Ended, LiveObject, LiveState};

use super::names::Names;
use super::table::{table, TableFile};

table! {
    /// The columns of `allocations` (docs/data.md).
    Allocations {
        pid: "required int64" => Dictionary;
        category: "required binary" " (STRING);" => Dictionary;
        accounting: "required binary" " (STRING);" => Dictionary;
        api: "required binary" " (STRING);" => Dictionary;
        device: "required int32" => Dictionary;
        address: "required int64" => Plain;
        bytes: "required int64" => Dictionary;
        handle: "optional int64" => Plain;
        pool: "optional int64" => Dictionary;
        communicator: "optional int64" => Plain;
        thread: "required int64" => Dictionary;
        alloc_seq: "required int64" => Delta;
        alloc_time_ns: "required int64" => Delta;
        alloc_step: "required int64" => Delta;
        free_seq: "optional int64" => Delta;
        free_time_ns: "optional int64" => Delta;
        free_step: "optional int64" => Delta;
        free_api: "optional binary" " (STRING);" => Dictionary;
        site: "required int64" => Dictionary;
        label: "required binary" " (STRING);" => Dictionary;
        module: "optional binary" " (STRING);" => Dictionary;
        flags: "required group" " (LIST) { repeated group list { optional binary element (STRING); } }"
            => Dictionary;
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
    made(&mut t.rows, pid, &e.object);
    let c = &mut t.rows;
    c.free_seq.int(bits(e.seq));
    match e.by {
        Some(by) => {
            c.free_time_ns.int(bits(by.time_ns));
            c.free_step.int(bits(by.step));
            c.free_api.word(by.api as u64, || by.api.name());
        }
        None => {
            c.free_time_ns.null();
            c.free_step.null();
            c.free_api.null();
        }
    }
    named(t, state, names, &e.object, false)
}

/// A row for an object live at the end of the trace.
pub fn live(
    t: &mut TableFile<Allocations>,
    state: &LiveState,
    names: &mut Names,
    pid: i64,
    o: &LiveObject<'_>,
) -> Result<()> {
    made(&mut t.rows, pid, o);
    let c = &mut t.rows;
    c.free_seq.null();
    c.free_time_ns.null();
    c.free_step.null();
    c.free_api.null();
    // Made before events the tracer lost: its free may be among them, and the report leaves it
    // out of the live set it judges (`lost events … left out above`); the row says so.
    let uncertain = state.lost_after(o.origin.seq);
    named(t, state, names, o, uncertain)
}

/// The flag of a live row whose free may be among the events the tracer lost.
pub const FREE_MAYBE_LOST: &str = "free-maybe-lost";

/// The columns up to the end columns.
#[inline]
fn made(c: &mut Allocations, pid: i64, o: &LiveObject<'_>) {
    let origin = &o.origin;
    c.pid.int(pid);
    c.category.word(o.category as u64, || o.category.name());
    let accounting = o.category.accounting();
    c.accounting
        .word(accounting as u64, || accounting_name(accounting));
    c.api.word(origin.api as u64, || origin.api.name());
    c.device.int(i64::from(o.device));
    c.address.int(bits(o.address));
    c.bytes.int(bits(o.bytes));
    c.handle.opt_int(o.handle.map(bits));
    let pooled = o.category == Category::Async;
    c.pool.opt_int(pooled.then_some(bits(origin.pool)));
    c.communicator.opt_int(origin.communicator.map(bits));
    c.thread.int(i64::from(origin.thread));
    c.alloc_seq.int(bits(origin.seq));
    c.alloc_time_ns.int(bits(origin.time_ns));
    c.alloc_step.int(bits(origin.step));
}

/// The columns after the end columns, the row flagged [`FREE_MAYBE_LOST`] where `uncertain`;
/// ends the row.
#[inline]
fn named(
    t: &mut TableFile<Allocations>,
    state: &LiveState,
    names: &mut Names,
    o: &LiveObject<'_>,
    uncertain: bool,
) -> Result<()> {
    let c = &mut t.rows;
    let site = o.origin.site;
    c.site.int(i64::from(site));
    c.label
        .word(u64::from(site), || names.site(state, site).to_string());
    // A module the trace does not name is a null, as in every table.
    let module = o.origin.module;
    match (module, names.module(state, module)) {
        (Some(id), Some(name)) => c.module.word(u64::from(id), || name),
        _ => c.module.null(),
    }
    // The flag of this export's own is keyed past every flag of the live set's.
    let lost = uncertain.then_some((u64::MAX, FREE_MAYBE_LOST));
    c.flags
        .words((o.flags.iter().map(|f| (f as u64, f.name()))).chain(lost));
    t.row_done()
}

/// A 64-bit address, handle or id with its bits unchanged (user-space addresses stay
/// positive).
pub fn bits(v: u64) -> i64 {
    v as i64
}

fn accounting_name(a: Accounting) -> &'static str {
    match a {
        Accounting::Device => "device",
        Accounting::Host => "host",
        Accounting::VirtualAddress => "virtual-address",
        Accounting::None => "none",
    }
}
