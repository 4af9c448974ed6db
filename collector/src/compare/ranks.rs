//! Many traces of one job (one per rank or process): a row per trace with what it holds, and
//! how far it is from the median of all, so that the rank that differs is named first.
//!
//! A trace's distance is its largest relative deviation from the median over live memory at the
//! end, the peak, growth, orphaned memory and failures: `|value − median| / max(|median|, floor)`,
//! where the floor (1 MiB for memory, 64 KiB per unit for growth, 1 for failures) keeps a rank
//! that differs from zero by a few bytes from looking infinitely odd. A trace's growth is its
//! devices' sustained growth, the number `diff` and the report's headline give; its first cause
//! ([`RankCause`]) is named beside it with its own rate (PyTorch's tensors, where their view
//! names the line that keeps the memory).
//!
//! A trace is odd ([`RankRow::odd`]) when its distance is at least [`ODD_DISTANCE`] or it has a
//! finding that fewer than half of the other traces have: those are the traces worth reading.

use std::cmp::Ordering;

use serde::Serialize;

use super::metrics::median_f64;
use super::profile::{GrowthUnit, RunTotals};
use crate::analysis::LineMeaning;

/// A distance from which a trace is odd: one of its numbers is off the median by half of it.
pub const ODD_DISTANCE: f64 = 0.5;

/// The first cause of steady growth of a trace's diagnosis.
#[derive(Clone, Debug, PartialEq)]
pub struct RankCause {
    /// Where, as the report says it (`train.py:42 in step (PyTorch tensors)`).
    pub site: String,
    /// Bytes per unit ([`RankInput::unit`]).
    pub rate: f64,
    /// Whether its line keeps the memory, or is where a framework's allocator asked the driver
    /// for it (what keeps it may be another line).
    pub line_means: LineMeaning,
}

/// One trace of a job, as the rank table needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct RankInput {
    pub path: String,
    pub rank: Option<i32>,
    pub host: String,
    pub pid: u32,
    pub unit: GrowthUnit,
    /// Where its steps came from (`marks`, `pattern`, `none`): a guessed step may be several
    /// of another trace's marked ones.
    pub step_source: &'static str,
    pub totals: RunTotals,
    pub first_cause: Option<RankCause>,
    /// Its findings worth attention (alerts and warnings), each named by its class and place.
    pub findings: Vec<String>,
    /// What keeps the trace from holding its whole run (`is cut short (…)`), one phrase each:
    /// its numbers are those of what could be read.
    pub gaps: Vec<String>,
    /// The program it ran (its script, or its executable), by file name.
    pub program: Option<String>,
}

/// One row of the rank table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankRow {
    pub path: String,
    pub rank: Option<i32>,
    pub host: String,
    pub pid: u32,
    pub live_bytes: u64,
    pub peak_bytes: u64,
    /// Bytes per `growth_unit`: the devices' sustained growth in all (what `diff` and the
    /// report's headline call the device's growth); the first cause's own rate is apart.
    pub growth: f64,
    pub growth_unit: GrowthUnit,
    /// Where its steps came from (`marks`, `pattern`, `none`): a rate per guessed step is
    /// `pattern`'s.
    pub step_source: &'static str,
    /// The first cause of steady growth, as the report names it, and its own rate per
    /// `growth_unit` (on its holder: a device, or host memory); `null` without one.
    pub growth_at: Option<String>,
    pub cause_growth: Option<f64>,
    /// What the first cause's line is to its memory (`keeps`, `asked`); `null` without one.
    pub cause_line_means: Option<LineMeaning>,
    pub orphans: u64,
    pub orphan_bytes: u64,
    pub failures: u64,
    /// The largest relative deviation from the median (0: like the median in every number).
    pub distance: f64,
    /// The number that deviates most, its value here and its median over all traces.
    pub differs_in: Option<&'static str>,
    pub value: f64,
    pub median: f64,
    /// Findings (alerts and warnings) that fewer than half of the other traces have.
    pub own_findings: Vec<String>,
    /// What keeps the trace from holding its whole run, one phrase each (empty: whole).
    pub gaps: Vec<String>,
    /// The program it ran (its script, or its executable), by file name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    /// Whether the trace differs from the others or cannot be compared whole: a distance of at
    /// least [`ODD_DISTANCE`], a finding of its own, or a gap.
    pub odd: bool,
}

impl RankRow {
    /// What its growth is per: `step`, `guessed step` (steps found from the allocation
    /// pattern: one may be several of the program's) or `second`.
    pub fn per(&self) -> &'static str {
        match (self.growth_unit, self.step_source) {
            (GrowthUnit::Step, "pattern") => "guessed step",
            (unit, _) => unit.name(),
        }
    }
}

/// The least denominators of a distance: bytes (live, peak, orphaned), bytes per unit of
/// growth, and failed calls.
pub const MEMORY_FLOOR: f64 = (1u64 << 20) as f64;
pub const GROWTH_FLOOR: f64 = 64.0 * 1024.0;
pub const FAILURES_FLOOR: f64 = 1.0;

/// The numbers compared: name, value, and the floor of the denominator.
fn measures(r: &RankInput, growth: bool) -> Vec<(&'static str, f64, f64)> {
    let t = &r.totals.metrics;
    let mut m = vec![
        ("live_bytes", t.live_bytes as f64, MEMORY_FLOOR),
        ("peak_bytes", t.peak_bytes as f64, MEMORY_FLOOR),
        ("orphan_bytes", t.orphan_bytes as f64, MEMORY_FLOOR),
        ("failures", t.failures as f64, FAILURES_FLOOR),
    ];
    if growth {
        m.insert(2, ("growth", t.growth, GROWTH_FLOOR));
    }
    m
}

/// The findings of `traces[i]` that fewer than half of the other traces have.
fn own_findings(traces: &[RankInput], i: usize) -> Vec<String> {
    let others = traces.len() - 1;
    let mut own: Vec<String> = (traces[i].findings.iter())
        .filter(|f| {
            let with = (traces.iter().enumerate())
                .filter(|&(j, t)| j != i && t.findings.contains(f))
                .count();
            2 * with < others
        })
        .cloned()
        .collect();
    own.dedup();
    own
}

/// The rows of `traces`, the one farthest from the median first (then by rank, then pid).
pub fn rank_rows(traces: &[RankInput]) -> Vec<RankRow> {
    // Growth compares only when every trace measured it in the same unit, its steps counted
    // alike (a step guessed from the allocation pattern may span several marked ones).
    let growth =
        (traces.windows(2)).all(|w| w[0].unit == w[1].unit && w[0].step_source == w[1].step_source);
    let names: Vec<&'static str> = traces
        .first()
        .map(|t| measures(t, growth).iter().map(|m| m.0).collect())
        .unwrap_or_default();
    let medians: Vec<f64> = (0..names.len())
        .map(|i| median_f64(traces.iter().map(|t| measures(t, growth)[i].1).collect()))
        .collect();
    let mut rows: Vec<RankRow> = (traces.iter().enumerate())
        .map(|(n, t)| {
            let mut worst: Option<(&'static str, f64, f64, f64)> = None;
            for (i, (name, value, floor)) in measures(t, growth).into_iter().enumerate() {
                let median = medians[i];
                let d = (value - median).abs() / median.abs().max(floor);
                if d > 0.0 && worst.is_none_or(|w| d > w.1) {
                    worst = Some((name, d, value, median));
                }
            }
            let x = &t.totals.metrics;
            let distance = worst.map_or(0.0, |w| w.1);
            let own_findings = own_findings(traces, n);
            RankRow {
                path: t.path.clone(),
                rank: t.rank,
                host: t.host.clone(),
                pid: t.pid,
                live_bytes: x.live_bytes,
                peak_bytes: x.peak_bytes,
                growth: x.growth,
                growth_unit: t.unit,
                step_source: t.step_source,
                growth_at: t.first_cause.as_ref().map(|c| c.site.clone()),
                cause_growth: t.first_cause.as_ref().map(|c| c.rate),
                cause_line_means: t.first_cause.as_ref().map(|c| c.line_means),
                orphans: x.orphans,
                orphan_bytes: x.orphan_bytes,
                failures: x.failures,
                distance,
                differs_in: worst.map(|w| w.0),
                value: worst.map_or(0.0, |w| w.2),
                median: worst.map_or(0.0, |w| w.3),
                odd: distance >= ODD_DISTANCE || !own_findings.is_empty() || !t.gaps.is_empty(),
                own_findings,
                gaps: t.gaps.clone(),
                program: t.program.clone(),
            }
        })
        .collect();
    // At equal distances (two ranks are always equally far from their median), a trace with a
    // finding the others lack comes first: it is the one that differs.
    rows.sort_by(|a, b| {
        b.distance
            .partial_cmp(&a.distance)
            .unwrap_or(Ordering::Equal)
            .then(a.own_findings.is_empty().cmp(&b.own_findings.is_empty()))
            .then(a.rank.cmp(&b.rank))
            .then(a.pid.cmp(&b.pid))
            .then(a.path.cmp(&b.path))
    });
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::SiteMetrics;

    const MIB: f64 = MEMORY_FLOOR;

    fn trace(rank: i32, live_mib: u64) -> RankInput {
        RankInput {
            path: format!("r{rank}.vtrace"),
            rank: Some(rank),
            host: "h".into(),
            pid: 100 + rank as u32,
            unit: GrowthUnit::Step,
            step_source: "marks",
            totals: RunTotals {
                metrics: SiteMetrics {
                    live_bytes: live_mib << 20,
                    peak_bytes: 64 << 20,
                    ..SiteMetrics::default()
                },
                ..RunTotals::default()
            },
            first_cause: None,
            findings: Vec::new(),
            gaps: Vec::new(),
            program: None,
        }
    }

    #[test]
    fn the_rank_farthest_from_the_median_comes_first() {
        let traces: Vec<RankInput> = (0..8)
            .map(|r| trace(r, if r == 5 { 100 } else { 20 }))
            .collect();
        let rows = rank_rows(&traces);
        assert_eq!(rows[0].rank, Some(5));
        assert_eq!(rows[0].differs_in, Some("live_bytes"));
        assert_eq!((rows[0].value, rows[0].median), (100.0 * MIB, 20.0 * MIB));
        assert_eq!(rows[0].distance, 4.0);
        let rest: Vec<Option<i32>> = rows[1..].iter().map(|r| r.rank).collect();
        assert_eq!(rest, [0, 1, 2, 3, 4, 6, 7].map(Some));
        assert!(rows[1..]
            .iter()
            .all(|r| r.distance == 0.0 && r.differs_in.is_none() && !r.odd));
        assert!(rows[0].odd);
    }

    #[test]
    fn a_finding_the_others_lack_makes_a_rank_odd() {
        let mut traces: Vec<RankInput> = (0..4).map(|r| trace(r, 20)).collect();
        for t in &mut traces {
            t.findings.push("orphan at comm.py:3".into());
        }
        traces[2]
            .findings
            .push("steady growth at train.py:48".into());
        // The rank's growth is its devices' in all; its first cause keeps its own rate.
        traces[2].first_cause = Some(RankCause {
            site: "train.py:48 in <module> (PyTorch tensors)".into(),
            rate: 8.0 * MIB,
            line_means: LineMeaning::Keeps,
        });
        traces[2].totals.metrics.growth = 11.0 * MIB;
        let rows = rank_rows(&traces);
        assert_eq!(rows[0].rank, Some(2));
        assert_eq!(rows[0].own_findings, ["steady growth at train.py:48"]);
        assert_eq!(
            (rows[0].growth, rows[0].cause_growth, rows[0].differs_in),
            (11.0 * MIB, Some(8.0 * MIB), Some("growth"))
        );
        assert_eq!(
            rows[0].growth_at.as_deref(),
            Some("train.py:48 in <module> (PyTorch tensors)")
        );
        assert!(rows[0].odd);
        assert!(rows[1..]
            .iter()
            .all(|r| !r.odd && r.own_findings.is_empty()));
    }

    // Two ranks are always equally far from their median: the one with a finding the other
    // lacks comes first, whatever its number.
    #[test]
    fn at_equal_distances_the_rank_with_its_own_finding_comes_first() {
        let mut traces = vec![trace(0, 20), trace(1, 100)];
        traces[1]
            .findings
            .push("steady growth at train.py:111".into());
        let rows = rank_rows(&traces);
        assert_eq!(rows[0].distance, rows[1].distance);
        assert_eq!((rows[0].rank, rows[1].rank), (Some(1), Some(0)));
    }
}
