//! Python lines that share a native stack. A native call site is what the live state keeps
//! numbers for, but one native stack often serves many lines of a Python program (every
//! `torch.empty` of a program reaches the caching allocator the same way, every `ctypes` call the
//! same way), and a leak is one of those lines. Such a site is split by line: what each line
//! holds at the end, its orphans, allocations and failures are counted exactly per call from the
//! live objects and the tally; its peak and growth, which the live state keeps per native site
//! only, are estimated from the objects it still holds at the end (a lower bound of its share of
//! the peak, and the rate at which it made what it still holds — its leak rate — counted, as the
//! growth analysis counts growth, only when it is steady).
use rustc_hash::FxHashMap;

use super::profile::{GrowthUnit, SiteMetrics};
use super::tally::CallCounts;
use crate::analysis::course::Course;
use crate::analysis::{Analysis, GrowthConfig, Shape};
use crate::live::{Holder, LiveState};
use crate::symbols::CallRef;

/// What one call's objects still live at the end hold.
#[derive(Clone, Debug, Default)]
pub(super) struct CallLive {
    count: u64,
    bytes: u64,
    host_bytes: u64,
    orphans: u64,
    orphan_bytes: u64,
    /// Device bytes of those made before their device peaked.
    before_peak: u64,
    /// `(step, time_ns, device bytes)` of each object made.
    made: Vec<(u64, u64, u64)>,
}

/// The live objects of `state` per call.
pub(super) fn live_by_call(state: &LiveState, analysis: &Analysis) -> FxHashMap<CallRef, CallLive> {
    let peak_seq = |device: i32| {
        (analysis.peaks.holders.iter())
            .find(|h| h.holder == Holder::Device { device })
            .map_or(0, |h| h.peak.seq)
    };
    let mut calls: FxHashMap<CallRef, CallLive> = FxHashMap::default();
    for o in state.live_objects() {
        let c = calls.entry(CallRef::from(&*o.origin)).or_default();
        let device = o.device_bytes();
        c.count += 1;
        c.bytes += device;
        c.host_bytes += o.host_bytes();
        if o.flags.is_orphan() {
            c.orphans += 1;
            c.orphan_bytes += device;
        }
        if device > 0 {
            if o.origin.seq <= peak_seq(o.device) {
                c.before_peak += device;
            }
            c.made.push((o.origin.step, o.origin.time_ns, device));
        }
    }
    calls
}

/// The numbers of the calls of one line of a shared site.
pub(super) fn line_metrics(
    calls: &[(CallRef, CallCounts)],
    live: &FxHashMap<CallRef, CallLive>,
    span: Span,
) -> SiteMetrics {
    let mut m = SiteMetrics::default();
    let mut made = Vec::new();
    for (call, counts) in calls {
        m.allocations += counts.allocations;
        m.allocated_bytes += counts.allocated_bytes;
        m.failures += counts.failures;
        m.out_of_memory += counts.out_of_memory;
        if let Some(l) = live.get(call) {
            m.live_count += l.count;
            m.live_bytes += l.bytes;
            m.host_bytes += l.host_bytes;
            m.orphans += l.orphans;
            m.orphan_bytes += l.orphan_bytes;
            m.peak_bytes += l.before_peak;
            made.extend_from_slice(&l.made);
        }
    }
    m.growth = leak_rate(&made, span);
    m
}

/// What a leak rate is measured over: the steps of the run, or its time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Span {
    /// Step boundaries 0 ..= the steps begun.
    Steps(u64),
    /// The first and last event's times, nanoseconds.
    Time(u64, u64),
}

impl Span {
    /// The span of a run read into `state`, in `unit`.
    pub(super) fn of(state: &LiveState, unit: GrowthUnit) -> Self {
        match unit {
            GrowthUnit::Step => Span::Steps(state.steps()),
            GrowthUnit::Second => Span::Time(state.first_time_ns(), state.last_time_ns()),
        }
    }
}

/// Points of a time span: as many as the growth analysis keeps of a series of time windows.
const TIME_POINTS: u64 = 64;
/// Step boundaries sampled at most: as many as the growth analysis keeps of a step series.
const STEP_POINTS: u64 = 256;

/// The slope of the bytes still live, added up by when they were made, when it grows steadily
/// (as [`Course`] judges growth): per step, sampled at step boundaries (every one, or
/// [`STEP_POINTS`] evenly spaced); or per second, sampled at [`TIME_POINTS`] even points of the
/// run.
fn leak_rate(made: &[(u64, u64, u64)], span: Span) -> f64 {
    if made.is_empty() {
        return 0.0;
    }
    // (when it was made, bytes), in order.
    let (mut when, xs): (Vec<(u64, u64)>, Vec<u64>) = match span {
        Span::Steps(steps) => {
            let n = steps.min(STEP_POINTS - 1);
            let xs = (0..=n).map(|k| k * steps / n.max(1)).collect();
            (made.iter().map(|m| (m.0, m.2)).collect(), xs)
        }
        Span::Time(first, last) => {
            let width = last.saturating_sub(first).max(1);
            let xs = (1..=TIME_POINTS).map(|k| width * k / TIME_POINTS).collect();
            let when = (made.iter())
                .map(|m| (m.1.saturating_sub(first), m.2))
                .collect();
            (when, xs)
        }
    };
    when.sort_unstable();
    let (mut held, mut next) = (0u64, 0usize);
    let points: Vec<(u64, u64)> = xs
        .into_iter()
        .map(|x| {
            while next < when.len() && when[next].0 <= x {
                held += when[next].1;
                next += 1;
            }
            (x, held)
        })
        .collect();
    let course = Course::of(&points, &GrowthConfig::default());
    if course.shape != Shape::Steady {
        return 0.0;
    }
    match span {
        Span::Steps(_) => course.slope(),
        Span::Time(..) => course.slope() * 1e9,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_keeping_one_mib_a_step_leaks_one_mib_a_step() {
        let mib = 1u64 << 20;
        let made: Vec<(u64, u64, u64)> = (1..=20).map(|s| (s, s * 1000, mib)).collect();
        assert_eq!(leak_rate(&made, Span::Steps(20)), mib as f64);
        // Made once, before the first step: no rate.
        assert_eq!(leak_rate(&[(0, 5, 8 * mib)], Span::Steps(20)), 0.0);
        assert_eq!(leak_rate(&[], Span::Steps(20)), 0.0);
        // 1 MiB every 10 ms over 640 ms: 100 MiB per second.
        let timed: Vec<(u64, u64, u64)> = (0..64).map(|i| (0, i * 10_000_000, mib)).collect();
        let per_second = leak_rate(&timed, Span::Time(0, 640_000_000));
        assert!(
            (per_second - 100.0 * mib as f64).abs() < mib as f64,
            "{per_second}"
        );
        // Made at the start of the run only: warm-up, not growth.
        let early: Vec<(u64, u64, u64)> = (0..6).map(|i| (0, i * 1_000, 16 * mib)).collect();
        assert_eq!(leak_rate(&early, Span::Time(0, 640_000_000)), 0.0);
    }
}
