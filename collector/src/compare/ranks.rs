//! Many traces of one job (one per rank or process): a row per trace with what it holds, and
//! how far it is from the median of all, so that the rank that differs is named first.
//!
//! A trace's distance is its largest relative deviation from the median over live memory at the
//! end, the peak, growth, orphaned memory and failures: `|value − median| / max(|median|, floor)`,
//! where the floor (1 MiB for memory, 64 KiB per unit for growth, 1 for failures) keeps a rank
//! that differs from zero by a few bytes from looking infinitely odd.

use std::cmp::Ordering;

use serde::Serialize;

use super::median::median_f64;
use super::profile::{GrowthUnit, RunTotals};

/// One trace of a job, as the rank table needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct RankInput {
    pub path: String,
    pub rank: Option<i32>,
    pub host: String,
    pub pid: u32,
    pub unit: GrowthUnit,
    pub totals: RunTotals,
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
    /// Sustained growth, bytes per `growth_unit`.
    pub growth: f64,
    pub growth_unit: GrowthUnit,
    pub orphans: u64,
    pub orphan_bytes: u64,
    pub failures: u64,
    /// The largest relative deviation from the median (0: like the median in every number).
    pub distance: f64,
    /// The number that deviates most, its value here and its median over all traces.
    pub differs_in: Option<&'static str>,
    pub value: f64,
    pub median: f64,
}

const MIB: f64 = (1u64 << 20) as f64;

/// The numbers compared: name, value, and the floor of the denominator.
fn measures(r: &RankInput, growth: bool) -> Vec<(&'static str, f64, f64)> {
    let t = &r.totals;
    let mut m = vec![
        ("live_bytes", t.live_bytes as f64, MIB),
        ("peak_bytes", t.peak_bytes as f64, MIB),
        ("orphan_bytes", t.orphan_bytes as f64, MIB),
        ("failures", t.failures as f64, 1.0),
    ];
    if growth {
        m.insert(2, ("growth", t.growth, 64.0 * 1024.0));
    }
    m
}

/// The rows of `traces`, the one farthest from the median first (then by rank, then pid).
pub fn rank_rows(traces: &[RankInput]) -> Vec<RankRow> {
    // Growth compares only when every trace measured it in the same unit.
    let growth = traces.windows(2).all(|w| w[0].unit == w[1].unit);
    let names: Vec<&'static str> = traces
        .first()
        .map(|t| measures(t, growth).iter().map(|m| m.0).collect())
        .unwrap_or_default();
    let medians: Vec<f64> = (0..names.len())
        .map(|i| median_f64(traces.iter().map(|t| measures(t, growth)[i].1).collect()))
        .collect();
    let mut rows: Vec<RankRow> = traces
        .iter()
        .map(|t| {
            let mut worst: Option<(&'static str, f64, f64, f64)> = None;
            for (i, (name, value, floor)) in measures(t, growth).into_iter().enumerate() {
                let median = medians[i];
                let d = (value - median).abs() / median.abs().max(floor);
                if d > 0.0 && worst.is_none_or(|w| d > w.1) {
                    worst = Some((name, d, value, median));
                }
            }
            let x = &t.totals;
            RankRow {
                path: t.path.clone(),
                rank: t.rank,
                host: t.host.clone(),
                pid: t.pid,
                live_bytes: x.live_bytes,
                peak_bytes: x.peak_bytes,
                growth: x.growth,
                growth_unit: t.unit,
                orphans: x.orphans,
                orphan_bytes: x.orphan_bytes,
                failures: x.failures,
                distance: worst.map_or(0.0, |w| w.1),
                differs_in: worst.map(|w| w.0),
                value: worst.map_or(0.0, |w| w.2),
                median: worst.map_or(0.0, |w| w.3),
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        b.distance
            .partial_cmp(&a.distance)
            .unwrap_or(Ordering::Equal)
            .then(a.rank.cmp(&b.rank))
            .then(a.pid.cmp(&b.pid))
            .then(a.path.cmp(&b.path))
    });
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(rank: i32, live_mib: u64) -> RankInput {
        RankInput {
            path: format!("r{rank}.vtrace"),
            rank: Some(rank),
            host: "h".into(),
            pid: 100 + rank as u32,
            unit: GrowthUnit::Step,
            totals: RunTotals {
                live_bytes: live_mib << 20,
                peak_bytes: 64 << 20,
                ..RunTotals::default()
            },
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
            .all(|r| r.distance == 0.0 && r.differs_in.is_none()));
    }
}
