//! The rank table: one row per trace of a job (rank, host, pid, live at the end, peak, growth,
//! orphans, failures), the trace farthest from the median first and named in a headline.
//! Printed by `report` of several traces and by `diff --rank`.

use std::io::{self, Write};

use vramtrace_collector::compare::profile::growth_unit;
use vramtrace_collector::compare::{RankInput, RankRow, RunTotals};

use crate::inputs::Run;
use crate::tables::{emit, table};
use crate::units::{bytes, signed_bytes};

/// What the rank table needs of a run.
pub fn rank_input(run: &Run) -> RankInput {
    let t = &run.trace;
    RankInput {
        path: t.path.display().to_string(),
        rank: t.header.rank,
        host: t.header.host.clone(),
        pid: t.header.pid,
        unit: growth_unit(&run.analysis.growth),
        totals: RunTotals::of(&t.state, &run.analysis, &run.tally),
    }
}

/// `rank 3`, or `pid 4242` for a trace without a rank.
pub fn who(rank: Option<i32>, pid: u32) -> String {
    match rank {
        Some(r) => format!("rank {r}"),
        None => format!("pid {pid}"),
    }
}

/// A number of the rank table in words.
fn amount(metric: &str, value: f64, unit: &str) -> String {
    match metric {
        "failures" => format!("{value:.0}"),
        "growth" => format!("{} per {unit}", signed_bytes(value)),
        _ => bytes(value.max(0.0) as u64),
    }
}

fn metric_name(metric: &str) -> &str {
    match metric {
        "live_bytes" => "live at end",
        "peak_bytes" => "peak",
        "orphan_bytes" => "orphaned memory",
        "growth" => "growth",
        "failures" => "failed calls",
        other => other,
    }
}

/// The headline: which trace differs most from the others, and in what.
pub fn headline(rows: &[RankRow]) -> String {
    match rows.first() {
        Some(r) if r.distance > 0.0 => {
            let metric = r.differs_in.unwrap_or("live_bytes");
            let unit = r.growth_unit.name();
            format!(
                "{} differs most: {} {} against a median of {}",
                who(r.rank, r.pid),
                metric_name(metric),
                amount(metric, r.value, unit),
                amount(metric, r.median, unit)
            )
        }
        _ => format!("all {} traces alike", rows.len()),
    }
}

/// Writes the rank table under its headline.
pub fn render(out: &mut impl Write, rows: &[RankRow]) -> io::Result<()> {
    let headers = [
        "#",
        "rank",
        "host",
        "pid",
        "live at end",
        "peak",
        "growth",
        "orphans",
        "failures",
        "distance",
        "trace",
    ];
    let mut t = table(&headers, &[0, 1, 3, 4, 5, 6, 7, 8, 9]);
    for (i, r) in rows.iter().enumerate() {
        t.add_row(vec![
            (i + 1).to_string(),
            r.rank.map_or("-".to_string(), |x| x.to_string()),
            r.host.clone(),
            r.pid.to_string(),
            bytes(r.live_bytes),
            bytes(r.peak_bytes),
            format!("{}/{}", signed_bytes(r.growth), r.growth_unit.name()),
            bytes(r.orphan_bytes),
            r.failures.to_string(),
            format!("{:.2}", r.distance),
            r.path.clone(),
        ]);
    }
    let title = format!("Ranks ({} traces): {}", rows.len(), headline(rows));
    emit(out, &title, &t)
}
