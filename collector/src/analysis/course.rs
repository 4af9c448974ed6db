//! The course of one series of live bytes (per step, or per time window): its phases and a
//! verdict: sustained growth, a one-off peak, shrinking, or flat.
//!
//! A training run has three phases, and only the middle one says whether memory leaks:
//!
//! - **Warm-up**: caches, optimizer state and workspaces grow during the first steps, then stop.
//! - **Steady state**: the loop proper. Memory a leak holds grows here, step after step, or in a
//!   staircase (a communicator every few steps; a caching allocator's segments, which come in
//!   steps).
//! - **Teardown**: after the last step, the program (or its exit) frees what it held. On the step
//!   axis it is never sampled (the last sample is the last step boundary); on the time axis it
//!   is the final drop, cut off with [`teardown_start`], so frees at exit never cancel growth
//!   during training.
//!
//! Growth is judged on its *rises*. The growth that is still going on is the chain of rises that
//! ends at the last one, going back while the gaps between rises stay within twice their usual
//! spacing (at least [`MIN_GAP_LIMIT`] samples). It is sustained when it has at least
//! [`MIN_RISES`] rises and the series has not been flat since for longer than such a gap and a
//! quarter of the growth's span ([`STOPPED_SHARE`]): a warm-up stops early and stays flat, while
//! a leak that ran through most of the run and stopped near its end (an evaluation, the last
//! steps) is still growth.
//! Leading rises of the chain far larger than its usual rise (more than [`WARM_UP_FACTOR`] times
//! the median) are warm-up, not part of it; a chain whose largest rise holds [`ONE_STEP_SHARE`]
//! of its growth is one step with small rises around it, not growth. The rate is the net change from the chain's first
//! rise to its last over the steps between them: exact for a leak of a fixed size every step,
//! for a staircase (whole periods), and for a leak that starts late (the flat part before is not
//! averaged in). The least-squares line through the growth (from the sample before its first
//! rise to the end) is kept as evidence, and must fit (R² at least `min_r2`) unless the series
//! only ever rises there; either way the growth must end above every level of the steady state
//! before it (a bounded, noisy series that fell and rose back, or a cache emptied and filled
//! again to the level it held, is not growth).

use serde::Serialize;

use super::fit::Fit;

/// Settings of the growth verdicts.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct GrowthConfig {
    /// Bytes of memory per device, when known.
    pub device_memory: Option<u64>,
    /// Growth per step, as a share of device memory, above which steady growth alerts.
    pub alert_fraction: f64,
    /// Least fit quality (R²) of steady growth or shrinking.
    pub min_r2: f64,
    /// Least samples for a verdict other than flat.
    pub min_samples: usize,
    /// Steady growth alerts when at its rate the device is full within this many steps...
    pub horizon_steps: u64,
    /// ...or within this many nanoseconds.
    pub horizon_ns: u64,
}

impl Default for GrowthConfig {
    fn default() -> Self {
        GrowthConfig {
            device_memory: None,
            alert_fraction: 0.001,
            min_r2: 0.9,
            min_samples: 4,
            horizon_steps: 10_000,
            horizon_ns: 24 * 3600 * 1_000_000_000,
        }
    }
}

/// Rises a sustained growth needs.
pub(crate) const MIN_RISES: usize = 3;
/// Growth has stopped when the series has been flat since its last rise for longer than this
/// share of the growth's span, and than a gap between its rises.
const STOPPED_SHARE: f64 = 4.0;

/// The smallest gap (in samples) between rises of one growth, whatever its usual spacing.
pub(crate) const MIN_GAP_LIMIT: usize = 4;
/// A leading rise this many times the median rise of its growth is warm-up.
pub(crate) const WARM_UP_FACTOR: u64 = 4;
/// A growth whose largest rise holds this share of all its rises is one step, not a growth.
pub(crate) const ONE_STEP_SHARE: f64 = 0.9;

/// The course of a series.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    /// Grows in the steady state and goes on growing to its end.
    Steady,
    /// Rose above both its start and its end, and came back down: a one-off peak.
    Peak,
    /// Falls along a line.
    Shrinking,
    /// Neither: constant, growth that stopped (warm-up), too few samples, or irregular.
    Flat,
}

impl Shape {
    /// Short name used in reports (the same as its JSON spelling).
    pub const fn name(self) -> &'static str {
        match self {
            Shape::Steady => "steady",
            Shape::Peak => "peak",
            Shape::Shrinking => "shrinking",
            Shape::Flat => "flat",
        }
    }
}

/// Where a series' phases begin, as sample x values (steps, or time windows).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Phases {
    /// The first sample of the steady state: the warm-up is before it (equal to the first
    /// sample when there was none).
    pub steady_from: u64,
    /// The sample before the first rise of the sustained growth (steady series only); later
    /// than `steady_from` for a leak that starts late.
    pub growth_from: Option<u64>,
    /// The first sample of the teardown (time axis only: the final drop cut off).
    pub teardown_from: Option<u64>,
    /// The first sample after the device ran out of memory, cut off: a device that is full
    /// cannot grow, and the flat course after says nothing of what filled it.
    pub full_from: Option<u64>,
    /// For a series that does not grow steadily: its largest rise after the warm-up, `(sample,
    /// bytes)`, when it rose again at all (a one-off batch or evaluation, whose memory a caching
    /// allocator keeps); for XLA's pool, taken when JAX starts, its largest rise at all.
    pub late_rise: Option<(u64, u64)>,
    /// Rises after the warm-up as large as the largest, or nearly ([`LIKE_SHARE`]): 1 for a
    /// one-off, more for an evaluation every so many steps (0 without a late rise).
    pub late_rises: u64,
}

/// The share of the largest late rise from which another rise is one like it.
const LIKE_SHARE: f64 = 0.9;

/// One series with its phases and verdict.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Course {
    /// The line through the growth (steady series), else through the steady state; `None` with
    /// fewer than two samples.
    pub fit: Option<Fit>,
    /// Samples judged (the teardown cut off).
    pub samples: usize,
    /// Bytes at the first and last sample judged, and the highest of them.
    pub first_bytes: u64,
    pub last_bytes: u64,
    pub max_bytes: u64,
    pub phases: Phases,
    /// Bytes per step (or per window) of the sustained growth: the net change from its first
    /// rise to its last over the samples between them; 0 unless steady.
    pub rate: f64,
    /// Rises of the sustained growth.
    pub rises: usize,
    pub shape: Shape,
}

impl Course {
    /// The course of `points` (the whole series: no teardown is cut) under `config`.
    pub fn of(points: &[(u64, u64)], config: &GrowthConfig) -> Course {
        judge(points, Bounds::default(), config)
    }

    /// The course of `points` within `bounds`.
    pub fn within(points: &[(u64, u64)], bounds: Bounds, config: &GrowthConfig) -> Course {
        judge(points, bounds, config)
    }

    /// Bytes per sample unit of sustained growth; the line's slope for a shrinking series; 0
    /// otherwise.
    pub fn slope(&self) -> f64 {
        match self.shape {
            Shape::Steady => self.rate,
            Shape::Shrinking => self.fit.map_or(0.0, |f| f.slope),
            _ => 0.0,
        }
    }
}

/// What is known of a series' phases before judging it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bounds {
    /// The index of the first sample of the teardown, cut off.
    pub teardown: Option<usize>,
    /// The last sample (x) of the warm-up, when the series is part of a holder whose warm-up is
    /// known: a place that first allocates after it was not warming up.
    pub warm_up_until: Option<u64>,
    /// Samples are time windows: a program may start for longer than it trains, so the warm-up
    /// lasts until the series reaches its usual level rather than until its first rises stop.
    pub time: bool,
    /// The index of the first sample after the device ran out of memory, cut off.
    pub full: Option<usize>,
}

/// The index where the teardown of a time series begins: the final drop, that is the trailing
/// run of samples that never rise, from the last sample of its starting level on; `None` when
/// the series does not end lower than that level.
pub(crate) fn teardown_start(points: &[(u64, u64)]) -> Option<usize> {
    let n = points.len();
    let mut start = n.checked_sub(1)?;
    while start > 0 && points[start - 1].1 >= points[start].1 {
        start -= 1;
    }
    // Keep the plateau the drop starts from: it is still the steady state.
    let level = points[start].1;
    while start + 1 < n && points[start + 1].1 == level {
        start += 1;
    }
    (start + 1 < n && points[n - 1].1 < level).then_some(start + 1)
}

/// The sustained growth of `y` (indices into it): the first and last rise of the chain, and its
/// number of rises; `None` when growth stopped or never was.
fn sustained(y: &[u64]) -> Option<(usize, usize, usize)> {
    let rises: Vec<usize> = (1..y.len()).filter(|&i| y[i] > y[i - 1]).collect();
    let &last = rises.last()?;
    let gaps: Vec<usize> = rises.windows(2).map(|w| w[1] - w[0]).collect();
    // The usual spacing: the median of the latest gaps.
    let mut recent: Vec<usize> = gaps.iter().rev().take(8).copied().collect();
    recent.sort_unstable();
    let usual = recent.get(recent.len() / 2).copied().unwrap_or(1);
    let limit = (2 * usual).max(MIN_GAP_LIMIT);
    let mut first = rises.len() - 1;
    while first > 0 && rises[first] - rises[first - 1] <= limit {
        first -= 1;
    }
    // Growth stopped when the series has been flat since for longer than a gap and than a
    // quarter of the growth's span: a warm-up stops early and stays flat; a leak that ran through
    // most of the run and stopped near its end (an evaluation, the last steps) is still growth.
    let flat = y.len() - 1 - last;
    if flat > limit && STOPPED_SHARE * flat as f64 > (last - rises[first]) as f64 {
        return None;
    }
    let chain = &rises[first..];
    let amount = |i: usize| y[i] - y[i - 1];
    let mut amounts: Vec<u64> = chain.iter().map(|&i| amount(i)).collect();
    amounts.sort_unstable();
    let median = amounts[amounts.len() / 2];
    let warm_up = chain
        .iter()
        .take_while(|&&i| amount(i) > median.saturating_mul(WARM_UP_FACTOR))
        .count();
    let chain = &chain[warm_up..];
    // One rise that holds nearly all of the chain's growth is a step, whatever rose around it
    // (a pinned buffer of 32 MiB beside three of a few bytes): growth is steady when it comes
    // in more than one piece.
    let (sum, largest) = chain.iter().fold((0u64, 0u64), |(s, m), &i| {
        (s.saturating_add(amount(i)), m.max(amount(i)))
    });
    let one_step = largest as f64 >= ONE_STEP_SHARE * sum as f64;
    (chain.len() >= MIN_RISES && !one_step).then(|| (chain[0], chain[chain.len() - 1], chain.len()))
}

fn judge(points: &[(u64, u64)], bounds: Bounds, config: &GrowthConfig) -> Course {
    let teardown = bounds.teardown;
    let end = (teardown.into_iter().chain(bounds.full))
        .min()
        .unwrap_or(points.len())
        .min(points.len());
    let p = &points[..end];
    let y: Vec<u64> = p.iter().map(|q| q.1).collect();
    let first = y.first().copied().unwrap_or(0);
    let last = y.last().copied().unwrap_or(0);
    let max = y.iter().copied().max().unwrap_or(0);
    let x0 = p.first().map_or(0, |q| q.0);
    let mut phases = Phases {
        steady_from: x0,
        growth_from: None,
        teardown_from: teardown.and_then(|t| points.get(t)).map(|q| q.0),
        full_from: bounds.full.and_then(|t| points.get(t)).map(|q| q.0),
        late_rise: None,
        late_rises: 0,
    };
    let mut course = Course {
        fit: Fit::of(p),
        samples: p.len(),
        first_bytes: first,
        last_bytes: last,
        max_bytes: max,
        phases,
        rate: 0.0,
        rises: 0,
        shape: Shape::Flat,
    };
    if p.len() < config.min_samples {
        return course;
    }
    if let Some((a, b, rises)) = sustained(&y) {
        let from = a - 1;
        let growth = &p[from..];
        let fit = Fit::of(growth);
        let steady = steady_start(&y, from);
        // Rises count only when they take the series above every level of the steady state
        // before them: a bounded series (temporaries of several threads) that fell and rose
        // back for a few samples is noise, and a cache that was emptied and fills again to
        // the level it held, along a line or not, is no leak.
        let above = y[steady..from].iter().all(|&v| v < last);
        let only_rises = y[from..].windows(2).all(|w| w[1] >= w[0]);
        let fits = above && (fit.is_some_and(|f| f.r2 >= config.min_r2) || only_rises);
        let rate = (y[b] as f64 - y[a] as f64) / (p[b].0 - p[a].0) as f64;
        if fits && rate > 0.0 && last > y[from] {
            phases.growth_from = Some(p[from].0);
            phases.steady_from = p[steady].0;
            course.fit = fit;
            course.rate = rate;
            course.rises = rises;
            course.phases = phases;
            course.shape = Shape::Steady;
            return course;
        }
    }
    // Not growing: the steady state begins when the first rises stop.
    let from = match bounds.warm_up_until {
        Some(x) => p.iter().rposition(|q| q.0 <= x).unwrap_or(0),
        None if bounds.time => warm_up_end(&y, settled(&y)),
        None => warm_up_end(&y, 0),
    };
    phases.steady_from = p[from].0;
    phases.late_rise = (from + 1..y.len())
        .filter(|&i| y[i] > y[i - 1])
        .max_by_key(|&i| (y[i] - y[i - 1], std::cmp::Reverse(i)))
        .map(|i| (p[i].0, y[i] - y[i - 1]));
    if let Some((_, largest)) = phases.late_rise {
        phases.late_rises = (from + 1..y.len())
            .filter(|&i| y[i] > y[i - 1] && (y[i] - y[i - 1]) as f64 >= LIKE_SHARE * largest as f64)
            .count() as u64;
    }
    let steady = &p[from..];
    let fit = Fit::of(steady);
    course.phases = phases;
    course.fit = fit.or(course.fit);
    let (s_first, s_last) = (steady[0].1, steady[steady.len() - 1].1);
    course.shape = match fit {
        Some(f) if f.slope < 0.0 && f.r2 >= config.min_r2 && s_last < s_first => Shape::Shrinking,
        _ if max > first && max > last => Shape::Peak,
        _ => Shape::Flat,
    };
    course
}

/// Where the steady state of a growing series begins (an index): the first sample at 90% of
/// the level its growth started from (the warm-up rose to it).
fn steady_start(y: &[u64], from: usize) -> usize {
    let level = y[from] - y[from] / 10;
    y[..=from].iter().position(|&v| v >= level).unwrap_or(from)
}

/// Where a series that does not grow settles: the first sample at 90% of the median of its
/// second half.
fn settled(y: &[u64]) -> usize {
    let mut half: Vec<u64> = y[y.len() / 2..].to_vec();
    half.sort_unstable();
    let median = half[half.len() / 2];
    let level = median - median / 10;
    y.iter().position(|&v| v >= level).unwrap_or(0)
}

/// Where the warm-up of a series that does not grow ends: the last of the rises from `start`
/// on, each within [`MIN_GAP_LIMIT`] samples of the one before (the first within as many of
/// `start`).
fn warm_up_end(y: &[u64], start: usize) -> usize {
    let mut end = start;
    for i in start + 1..y.len() {
        if y[i] > y[i - 1] {
            if i - end > MIN_GAP_LIMIT {
                break;
            }
            end = i;
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn course(y: &[u64]) -> Course {
        let points: Vec<(u64, u64)> = y.iter().enumerate().map(|(i, &v)| (i as u64, v)).collect();
        Course::of(&points, &GrowthConfig::default())
    }

    #[test]
    fn warm_up_then_flat_is_not_growth() {
        let mut y = vec![0, 500 * MIB, 800 * MIB, 820 * MIB];
        y.extend([820 * MIB; 96]);
        let c = course(&y);
        assert_eq!(
            (c.shape, c.rate, c.phases.steady_from),
            (Shape::Flat, 0.0, 3)
        );
        assert_eq!(c.phases.late_rise, None);
        // A one-off rise that stays (an evaluation's cached segments) is not growth either.
        y[60..].iter_mut().for_each(|v| *v += 512 * MIB);
        let c = course(&y);
        assert_eq!(c.shape, Shape::Flat);
        assert_eq!(c.phases.late_rise, Some((60, 512 * MIB)));
    }

    // A healthy rank of the GPU run over gloo, without the Python hooks (time windows): pinned
    // host buffers of 8 B, then 40 B, 1 KiB and one of 32 MiB, and nothing more. Three rises,
    // every one up, but one holds all but a few bytes of it: a step, not a growth.
    #[test]
    fn one_large_rise_among_tiny_ones_is_not_growth() {
        let mut y = vec![0, 8, 8, 40];
        y.extend([40; 18]);
        y.extend([40 + 1024 + 32 * MIB; 20]);
        assert_eq!(course(&y).shape, Shape::Flat);
        // Segments of 2, 2 and 20 MiB (the largest 83 % of the growth) are a staircase.
        let mut y = vec![0, 2 * MIB, 2 * MIB, 4 * MIB, 4 * MIB, 24 * MIB];
        y.extend([24 * MIB; 2]);
        assert_eq!(course(&y).shape, Shape::Steady);
    }

    #[test]
    fn a_leak_after_warm_up_grows_at_its_own_rate() {
        let mut y = vec![0, 1024 * MIB, 1500 * MIB];
        y.extend((1..=97).map(|k| 1500 * MIB + k * 64 * MIB));
        let c = course(&y);
        assert_eq!(c.shape, Shape::Steady);
        assert_eq!(c.rate, (64 * MIB) as f64);
        assert_eq!((c.phases.growth_from, c.phases.steady_from), (Some(2), 2));
    }

    #[test]
    fn a_staircase_is_growth_at_its_mean_rate() {
        // A 20 MiB communicator every 5 steps, and one every 20.
        for period in [5u64, 20] {
            let y: Vec<u64> = (0..100)
                .map(|k| 100 * MIB + (k / period) * 20 * MIB)
                .collect();
            let c = course(&y);
            assert_eq!(c.shape, Shape::Steady, "every {period}");
            assert_eq!(c.rate, (20 * MIB / period) as f64, "every {period}");
        }
    }

    #[test]
    fn a_late_leak_is_measured_where_it_grows() {
        let mut y = vec![0, 300 * MIB];
        y.extend([300 * MIB; 58]);
        y.extend((1..=40).map(|k| 300 * MIB + k * MIB / 2));
        let c = course(&y);
        assert_eq!(c.shape, Shape::Steady);
        assert_eq!(c.rate, (MIB / 2) as f64);
        assert_eq!((c.phases.steady_from, c.phases.growth_from), (1, Some(59)));
    }

    #[test]
    fn a_leak_that_stops_near_the_end_is_still_growth() {
        // Flat for 10 steps, 1 MiB a step for 80, then flat for the last 10: the leak ran
        // through most of the run.
        let mut y = vec![0u64; 10];
        y.extend((1..=80).map(|k| k * MIB));
        y.extend([80 * MIB; 10]);
        let c = course(&y);
        assert_eq!((c.shape, c.rate), (Shape::Steady, MIB as f64));
        // Flat for longer than a quarter of its span: it stopped.
        y.extend([80 * MIB; 11]);
        assert_eq!(course(&y).shape, Shape::Flat);
    }

    #[test]
    fn growth_that_stopped_long_ago_is_warm_up() {
        // Rises every step for 10 steps, then flat for 90.
        let mut y: Vec<u64> = (0..10).map(|k| k * MIB).collect();
        y.extend([10 * MIB; 90]);
        assert_eq!(course(&y).shape, Shape::Flat);
    }

    #[test]
    fn the_final_drop_is_the_teardown() {
        let mut points: Vec<(u64, u64)> = (0..50).map(|k| (k, k * MIB)).collect();
        points.extend([(50, 49 * MIB), (51, 30 * MIB), (52, 0)]);
        // The plateau at 49 MiB (samples 49 and 50) is still the steady state.
        assert_eq!(teardown_start(&points), Some(51));
        let bounds = Bounds {
            teardown: Some(51),
            warm_up_until: None,
            time: true,
            full: None,
        };
        let c = Course::within(&points, bounds, &GrowthConfig::default());
        assert_eq!(
            (c.shape, c.rate, c.samples),
            (Shape::Steady, MIB as f64, 51)
        );
        assert_eq!(c.phases.teardown_from, Some(51));
        // Flat then freed: the plateau stays; nothing freed: no teardown.
        let flat = [(0, 5), (1, 5), (2, 5), (3, 0)];
        assert_eq!(teardown_start(&flat), Some(3));
        assert_eq!(teardown_start(&[(0, 5), (1, 5)]), None);
        assert_eq!(teardown_start(&[(0, 1), (1, 5)]), None);
    }

    #[test]
    fn a_one_off_peak_and_noise_are_not_growth() {
        let mut y = vec![0u64; 10];
        y.extend([32 * MIB; 5]);
        y.extend([0; 10]);
        assert_eq!(course(&y).shape, Shape::Peak);
        // Temporaries caught at random phases of a step: up and down, no trend.
        let y: Vec<u64> = (0..60u64)
            .map(|k| 100 * MIB + (k * 7919 % 13) * MIB)
            .collect();
        assert_ne!(course(&y).shape, Shape::Steady);
    }

    // The temporaries of four threads at a step's boundary (a healthy stand-in run that alerted
    // once in six): bounded noise, then a fall and three rises back to a level the run had
    // already held. The rises fit no line; they are noise unless they top every level before.
    #[test]
    fn rising_back_within_the_noise_is_not_growth() {
        let mut y: Vec<u64> = [50, 54, 47, 56, 49, 53, 45, 52, 48, 55].repeat(4);
        // Six samples falling (longer than any gap between rises), then three rises.
        y.extend([50, 45, 40, 35, 30, 25, 20, 21, 30, 50]);
        y.iter_mut().for_each(|v| *v *= MIB);
        assert_eq!(course(&y).shape, Shape::Peak);
        // The same rises taking the series above all it held before: growth.
        *y.last_mut().unwrap() = 60 * MIB;
        let c = course(&y);
        assert_eq!((c.shape, c.rises), (Shape::Steady, 3));
    }

    // A cache that held 40 MiB, was emptied to 10 and fills again a MiB a step, along a line,
    // to the level it held: no leak (a trial's healthy program alerted on it, 3 runs in 3).
    // One MiB more than it ever held is growth.
    #[test]
    fn a_cache_filling_again_to_its_level_is_not_growth() {
        let mut y = vec![40 * MIB; 30];
        y.extend((10..=40).map(|m| m * MIB));
        assert_ne!(course(&y).shape, Shape::Steady);
        y.push(41 * MIB);
        assert_eq!(course(&y).shape, Shape::Steady);
    }
}
