//! Growth: live bytes sampled once per step (or per time window when the trace has no steps),
//! a least-squares line through them per holder and per call site, and a verdict: steady growth
//! (a leak that will run the device out of memory), a one-off peak, flat, or shrinking.
//!
//! Samples are taken at step boundaries, so memory allocated and freed inside a step never shows:
//! only what a step leaves behind does. A holder alerts when it grows steadily by more than the
//! threshold per step: by default 0.1% of device memory. How much memory a device has comes from
//! `GrowthConfig::device_memory`, else from the tracer's `cuMemGetInfo` samples; without either,
//! the device's highest live point is taken as a lower bound, which makes the threshold stricter,
//! never looser. Sustained growth is
//! the sum of the steadily growing sites' slopes, so a one-off peak at another site does not
//! mask it.

use serde::Serialize;

use super::fit::Fit;
use super::site::{name, SiteName};
use crate::live::{Holder, LiveState, SampleAxis};

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
}

impl Default for GrowthConfig {
    fn default() -> Self {
        GrowthConfig {
            device_memory: None,
            alert_fraction: 0.001,
            min_r2: 0.9,
            min_samples: 4,
        }
    }
}

/// The course of a series.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    /// Grows along a line (fit at least `min_r2`) and ends higher than it began.
    Steady,
    /// Rose above both its start and its end, and came back down: a one-off peak.
    Peak,
    /// Falls along a line.
    Shrinking,
    /// Neither: constant, or too few samples, or irregular without a peak.
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

/// One series with its line and verdict.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Course {
    /// The line through the samples; `None` with fewer than two.
    pub fit: Option<Fit>,
    pub samples: usize,
    /// Bytes at the first and last sample, and the highest sample.
    pub first_bytes: u64,
    pub last_bytes: u64,
    pub max_bytes: u64,
    pub shape: Shape,
}

impl Course {
    /// The course of `points` under `config`.
    pub fn of(points: &[(u64, u64)], config: &GrowthConfig) -> Course {
        let fit = Fit::of(points);
        let first = points.first().map_or(0, |p| p.1);
        let last = points.last().map_or(0, |p| p.1);
        let max = points.iter().map(|p| p.1).max().unwrap_or(0);
        let shape = match fit {
            _ if points.len() < config.min_samples => Shape::Flat,
            Some(f) if f.slope > 0.0 && f.r2 >= config.min_r2 && last > first => Shape::Steady,
            Some(f) if f.slope < 0.0 && f.r2 >= config.min_r2 && last < first => Shape::Shrinking,
            _ if max > first && max > last => Shape::Peak,
            _ => Shape::Flat,
        };
        Course {
            fit,
            samples: points.len(),
            first_bytes: first,
            last_bytes: last,
            max_bytes: max,
            shape,
        }
    }

    /// Bytes per sample unit of the line, 0 without one.
    pub fn slope(&self) -> f64 {
        self.fit.map_or(0.0, |f| f.slope)
    }
}

/// One holder's growth.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HolderGrowth {
    #[serde(flatten)]
    pub holder: Holder,
    #[serde(flatten)]
    pub course: Course,
    /// Growth per step above which steady growth alerts (device holders only).
    pub threshold: Option<f64>,
    /// Sustained growth: the slopes of the call sites growing steadily on this holder, added up
    /// (one-off peaks elsewhere do not hide it, as they can hide it in the holder's own line).
    pub steady_growth: f64,
    /// Sustained growth above the threshold.
    pub alert: bool,
}

/// One call site's growth on one holder.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SiteGrowth {
    #[serde(flatten)]
    pub site: SiteName,
    #[serde(flatten)]
    pub holder: Holder,
    #[serde(flatten)]
    pub course: Course,
    /// Steady growth above its holder's threshold on its own.
    pub alert: bool,
}

/// Growth of everything live.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Growth {
    /// `steps` (one sample per step) or `time` (one per window).
    pub axis: SampleAxis,
    /// Steps or windows seen; one sample per `stride` of them is kept.
    pub ticks: u64,
    pub stride: u64,
    /// For the time axis: nanoseconds between kept samples.
    pub window_ns: Option<u64>,
    /// The device memory thresholds are computed from, and where it came from: `given` or
    /// `sampled` (the total the driver reported to the tracer's `cuMemGetInfo` samples), or
    /// `observed-peak` (the highest live point of the device, a lower bound).
    pub device_memory: Option<u64>,
    pub device_memory_source: &'static str,
    pub alert_fraction: f64,
    /// Whether any holder alerts.
    pub alert: bool,
    /// Every holder.
    pub holders: Vec<HolderGrowth>,
    /// Sites growing steadily, fastest first.
    pub steady: Vec<SiteGrowth>,
    /// Sites with a one-off peak, highest first.
    pub peaks: Vec<SiteGrowth>,
    /// Sites shrinking steadily, fastest first.
    pub shrinking: Vec<SiteGrowth>,
}

/// The axis a state's growth is read on: steps when at least two were sampled, else time.
pub fn axis_of(state: &LiveState) -> SampleAxis {
    if state.samples(SampleAxis::Steps).0 >= 2 {
        SampleAxis::Steps
    } else {
        SampleAxis::Time
    }
}

/// Samples of a series in axis units: time samples become window indices.
pub(crate) fn in_units(points: Vec<(u64, u64)>, window_ns: Option<u64>) -> Vec<(u64, u64)> {
    match window_ns {
        Some(w) if w > 0 => points.into_iter().map(|(x, y)| (x / w, y)).collect(),
        _ => points,
    }
}

/// The device memory thresholds come from for `holder`, and its source.
fn memory_of(state: &LiveState, config: &GrowthConfig, device: i32) -> (u64, &'static str) {
    // The driver's own total, from the tracer's cuMemGetInfo samples.
    let sampled = state
        .device_accounts()
        .find(|a| a.device == device && a.total > 0)
        .map(|a| a.total);
    match (config.device_memory, sampled) {
        (Some(m), _) => (m, "given"),
        (None, Some(total)) => (total, "sampled"),
        (None, None) => {
            let peak = state
                .holders()
                .iter()
                .find(|h| h.holder == Holder::Device { device })
                .map_or(0, |h| h.peak.bytes);
            (peak, "observed-peak")
        }
    }
}

/// The growth of `state`.
pub fn growth(state: &LiveState, config: &GrowthConfig) -> Growth {
    let axis = axis_of(state);
    let (ticks, stride) = state.samples(axis);
    let window_ns = (axis == SampleAxis::Time).then(|| state.sample_width_ns());
    let mut source = if config.device_memory.is_some() {
        "given"
    } else if state.device_accounts().any(|a| a.total > 0) {
        "sampled"
    } else {
        "observed-peak"
    };
    let mut device_memory = config.device_memory;
    let mut holders: Vec<HolderGrowth> = state
        .holders()
        .iter()
        .map(|h| {
            let points = in_units(state.holder_series(h.holder, axis), window_ns);
            let course = Course::of(&points, config);
            let threshold = match h.holder {
                Holder::Device { device } => {
                    let (memory, from) = memory_of(state, config, device);
                    source = from;
                    device_memory = Some(device_memory.unwrap_or(0).max(memory));
                    Some(memory as f64 * config.alert_fraction)
                }
                Holder::Host => None,
            };
            HolderGrowth {
                holder: h.holder,
                course,
                threshold,
                steady_growth: 0.0,
                alert: false,
            }
        })
        .collect();
    let threshold_of = |holder: Holder| {
        holders
            .iter()
            .find(|h| h.holder == holder)
            .and_then(|h| h.threshold)
    };
    let (mut steady, mut peaks, mut shrinking) = (Vec::new(), Vec::new(), Vec::new());
    for (site, holder, points) in state.site_series(axis) {
        let course = Course::of(&in_units(points, window_ns), config);
        let list = match course.shape {
            Shape::Steady => &mut steady,
            Shape::Peak => &mut peaks,
            Shape::Shrinking => &mut shrinking,
            Shape::Flat => continue,
        };
        let alert = course.shape == Shape::Steady
            && threshold_of(holder).is_some_and(|t| course.slope() > t);
        list.push(SiteGrowth {
            site: name(state, site),
            holder,
            course,
            alert,
        });
    }
    for h in &mut holders {
        h.steady_growth = steady
            .iter()
            .filter(|s| s.holder == h.holder)
            .map(|s| s.course.slope())
            .sum();
        h.alert = h.threshold.is_some_and(|t| h.steady_growth > t);
    }
    let by_slope =
        |a: &SiteGrowth, b: &SiteGrowth| b.course.slope().abs().total_cmp(&a.course.slope().abs());
    steady.sort_by(by_slope);
    shrinking.sort_by(by_slope);
    peaks.sort_by_key(|s| std::cmp::Reverse(s.course.max_bytes));
    Growth {
        axis,
        ticks,
        stride,
        window_ns,
        device_memory,
        device_memory_source: source,
        alert_fraction: config.alert_fraction,
        alert: holders.iter().any(|h| h.alert),
        holders,
        steady,
        peaks,
        shrinking,
    }
}
