//! The replay as terminal tables: where it stopped, the steps it went through (with `--until`),
//! then the same findings as the report.

use std::io::{self, Write};

use crate::load::LoadedTrace;
use crate::render::findings;
use crate::render::units::{bytes, count, duration};

use super::ReplayReport;

/// Writes the replay.
pub fn render(
    out: &mut impl Write,
    r: &ReplayReport,
    trace: &LoadedTrace,
    top: usize,
) -> io::Result<()> {
    writeln!(out, "vramtrace replay: {}", r.trace)?;
    writeln!(out, "  process   pid {}, host {}", r.pid, trace.header.host)?;
    // Where reading began, and what rotation removed: the replay holds only what is on disk.
    if let Some(segments) = &r.segments {
        writeln!(out, "  segments  {segments}")?;
    }
    let at = &r.at;
    // Events are numbered from 1: a moment before the first (step 0 of a trace whose first
    // event begins step 1) is said so, not "after event 0".
    let moment = match at.event {
        0 => "before the first event".to_string(),
        n => format!(
            "after event {n} (seq {}, {} after the first event)",
            at.seq,
            duration(at.since_first_ns)
        ),
    };
    // A step is replayed to the moment it begins: what it allocates shows at the next one (a
    // report's "rise at step 61" is live at step 62).
    let begins = match at.point.starts_with("step ") {
        true => " as it begins",
        false => "",
    };
    writeln!(
        out,
        "  at        {}{begins}: {moment}, {} begun",
        at.point,
        count(at.step, "step")
    )?;
    writeln!(
        out,
        "  read      {} ({}) in {}",
        count(trace.records, "record"),
        count(trace.bytes_read, "byte"),
        count(r.passes.into(), "pass")
    )?;
    let s = &r.live;
    writeln!(
        out,
        "  live      {} device in {}, {} orphaned, {} host, {} reserved VA",
        bytes(s.device_memory.bytes),
        count(s.device_memory.count, "object"),
        bytes(s.orphaned.bytes),
        bytes(s.host_memory.bytes),
        bytes(s.reserved_va.bytes)
    )?;
    if !r.snapshots.is_empty() {
        let mut t = findings_table(&[
            "point", "event", "step", "holder", "objects", "bytes", "change",
        ]);
        let mut previous: std::collections::BTreeMap<String, u64> = Default::default();
        for snap in &r.snapshots {
            for h in &snap.holders {
                let name = h.holder.name();
                let change = previous
                    .insert(name.clone(), h.bytes)
                    .map_or("-".to_string(), |p| {
                        crate::render::units::signed_bytes(h.bytes as f64 - p as f64)
                    });
                t.add_row(vec![
                    snap.moment.point.clone(),
                    snap.moment.event.to_string(),
                    snap.moment.step.to_string(),
                    name,
                    h.count.to_string(),
                    bytes(h.bytes),
                    change,
                ]);
            }
        }
        writeln!(out, "\nStepping through")?;
        writeln!(out, "{t}")?;
    }
    // A moment before the end was read whole: what comes after it does not change the answers;
    // read to the end, what is missing does.
    findings::render(out, &r.analysis, top, &r.when, &r.gaps)
}

fn findings_table(headers: &[&str]) -> comfy_table::Table {
    crate::render::tables::table(headers, &[1, 2, 4, 5, 6])
}
