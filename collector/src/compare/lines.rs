//! Python lines that share a native stack. A native call site is what the live state keeps
//! numbers for, but one native stack often serves many lines of a Python program (every
//! `torch.empty` of a program reaches the caching allocator the same way, every `ctypes` call the
//! same way), and a leak is one of those lines. Such a site is split by line: what each line
//! holds at the end, its orphans, allocations and failures are counted exactly per call from the
//! live objects and the tally; its peak and growth are the live state's own, which keeps its
//! series per native site and Python line (`profile::ledger_numbers`), and where it has none for
//! the line, estimated here from the objects it still holds at the end (a lower bound of its
//! share of the peak, and the rate at which it made what it still holds — its leak rate —
//! counted, as the growth analysis counts growth, only when it is steady).
use rustc_hash::FxHashMap;

use super::metrics::SiteMetrics;
use super::tally::CallCounts;
use crate::analysis::{Analysis, Growth, Shape};
use crate::live::{Holder, LiveState, SampleAxis};
use crate::symbols::CallRef;

/// Turns the growth analysis's slopes (per step, or per time window) into bytes per
/// [`GrowthUnit`](super::GrowthUnit).
pub fn unit_converter(g: &Growth) -> impl Fn(f64) -> f64 {
    let window = match (g.axis, g.window_ns) {
        (SampleAxis::Time, Some(w)) if w > 0 => Some(w as f64),
        _ => None,
    };
    move |slope| window.map_or(slope, |w| slope * 1e9 / w)
}

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
    /// Each object made: when, and its device bytes on which device.
    made: Vec<Made>,
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
            c.made.push(Made {
                step: o.origin.step,
                time_ns: o.origin.time_ns,
                device: o.device,
                bytes: device,
            });
        }
    }
    calls
}

/// An object still live at the end: when it was made, and its device bytes.
#[derive(Clone, Copy, Debug)]
pub(super) struct Made {
    step: u64,
    time_ns: u64,
    device: i32,
    bytes: u64,
}

/// The numbers of the calls of one line of a shared site.
pub(super) fn line_metrics(
    calls: &[(CallRef, CallCounts)],
    live: &FxHashMap<CallRef, CallLive>,
    span: Span,
    growth: &Growth,
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
    let Some(device) = main_device(&made) else {
        return m;
    };
    let course = growth.judge(Holder::Device { device }, held_by_when(&made, span));
    if course.shape == Shape::Steady {
        let per_unit = unit_converter(growth);
        m.growth = per_unit(course.rate);
        if growth.confident(&course) {
            m.confident_growth = m.growth;
        }
    }
    m
}

/// The device most of `made`'s bytes are on.
fn main_device(made: &[Made]) -> Option<i32> {
    let mut by_device: Vec<(i32, u64)> = Vec::new();
    for m in made {
        match by_device.iter_mut().find(|d| d.0 == m.device) {
            Some(d) => d.1 += m.bytes,
            None => by_device.push((m.device, m.bytes)),
        }
    }
    by_device
        .into_iter()
        .max_by_key(|&(device, bytes)| (bytes, -device))
        .map(|d| d.0)
}

/// What a leak rate is measured over: the steps of the run, or its time windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Span {
    /// Step boundaries 0 ..= the steps begun.
    Steps(u64),
    /// The first and last event's times, and the width of the analysis' time windows,
    /// nanoseconds.
    Time { first: u64, last: u64, window: u64 },
}

impl Span {
    /// The span of a run read into `state`, on the axis of its `analysis`.
    pub(super) fn of(state: &LiveState, analysis: &Analysis) -> Self {
        let g = &analysis.growth;
        match (g.axis, g.window_ns) {
            (SampleAxis::Time, Some(window)) if window > 0 => Span::Time {
                first: state.first_time_ns(),
                last: state.last_time_ns(),
                window,
            },
            _ => Span::Steps(state.steps()),
        }
    }
}

/// Sample points at most: as many as the growth analysis keeps of a step series.
const MAX_POINTS: u64 = 256;

/// The bytes still live at the end, added up by when they were made, at the points the growth
/// analysis samples (`(x, bytes)` on its axis: step boundaries, every one or [`MAX_POINTS`]
/// evenly spaced; or the ends of its time windows, in nanoseconds since the first event).
fn held_by_when(made: &[Made], span: Span) -> Vec<(u64, u64)> {
    // (when it was made, bytes), in order, and the points sampled.
    let (mut when, xs): (Vec<(u64, u64)>, Vec<u64>) = match span {
        Span::Steps(steps) => {
            let n = steps.min(MAX_POINTS - 1);
            let xs = (0..=n).map(|k| k * steps / n.max(1)).collect();
            (made.iter().map(|m| (m.step, m.bytes)).collect(), xs)
        }
        Span::Time {
            first,
            last,
            window,
        } => {
            let windows = last.saturating_sub(first).div_ceil(window).max(1);
            let n = windows.min(MAX_POINTS);
            let xs = (1..=n).map(|k| k * windows / n * window).collect();
            let when = (made.iter())
                .map(|m| (m.time_ns.saturating_sub(first), m.bytes))
                .collect();
            (when, xs)
        }
    };
    when.sort_unstable();
    let (mut held, mut next) = (0u64, 0usize);
    xs.into_iter()
        .map(|x| {
            while next < when.len() && when[next].0 <= x {
                held += when[next].1;
                next += 1;
            }
            (x, held)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::course::Course;
    use crate::analysis::GrowthConfig;

    /// The rate as the growth analysis would judge it: time samples in windows, then per
    /// second.
    fn rate(made: &[Made], span: Span) -> f64 {
        let window = match span {
            Span::Steps(_) => 1,
            Span::Time { window, .. } => window,
        };
        let points: Vec<(u64, u64)> = (held_by_when(made, span).into_iter())
            .map(|(x, y)| (x / window, y))
            .collect();
        let course = Course::of(&points, &GrowthConfig::default());
        match span {
            Span::Steps(_) => course.slope(),
            Span::Time { .. } => course.slope() * 1e9 / window as f64,
        }
    }

    fn made(step: u64, time_ns: u64, bytes: u64) -> Made {
        Made {
            step,
            time_ns,
            device: 0,
            bytes,
        }
    }

    #[test]
    fn a_line_keeping_one_mib_a_step_leaks_one_mib_a_step() {
        let mib = 1u64 << 20;
        let kept: Vec<Made> = (1..=20).map(|s| made(s, s * 1000, mib)).collect();
        assert_eq!(rate(&kept, Span::Steps(20)), mib as f64);
        // Made once, before the first step: no rate.
        assert_eq!(rate(&[made(0, 5, 8 * mib)], Span::Steps(20)), 0.0);
        assert_eq!(main_device(&[]), None);
        // 1 MiB every 10 ms over 640 ms, in windows of 10 ms: 100 MiB per second.
        let timed: Vec<Made> = (0..64).map(|i| made(0, i * 10_000_000, mib)).collect();
        let span = Span::Time {
            first: 0,
            last: 640_000_000,
            window: 10_000_000,
        };
        let per_second = rate(&timed, span);
        assert!(
            (per_second - 100.0 * mib as f64).abs() < mib as f64,
            "{per_second}"
        );
        // Made at the start of the run only: warm-up, not growth.
        let early: Vec<Made> = (0..6).map(|i| made(0, i * 1_000, 16 * mib)).collect();
        assert_eq!(rate(&early, span), 0.0);
    }
}
