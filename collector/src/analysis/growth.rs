//! Growth: live bytes sampled once per step (or per time window when the trace has no steps),
//! per holder and per place (the program's Python line, else the native call site), judged on
//! the steady state only ([`course`](super::course)): sustained growth (a leak that will run the
//! device out of memory), a one-off peak, flat (warm-up included), or shrinking.
//!
//! Samples are taken at step boundaries, so memory allocated and freed inside a step never shows:
//! only what a step leaves behind does. Call sites are merged by place: a line of a script
//! reaches the allocator through many native paths, and the line is what the user can change.
//! Another view of memory (a framework allocator's per-tensor records) can add its own rows,
//! already by line ([`LineSeries`]).
//!
//! A holder alerts when its sustained growth (the rates of its steadily growing places, added
//! up, so a one-off peak elsewhere does not hide it) exceeds the threshold per step, by default
//! 0.1% of device memory, or when at that rate the device is full within the horizon (by
//! default 10,000 steps or 24 hours). How much memory a device has comes from
//! `GrowthConfig::device_memory`, else from the tracer's `cuMemGetInfo` samples; without either,
//! the device's highest live point is taken as a lower bound, which makes the threshold stricter,
//! never looser.

use std::collections::BTreeMap;

use serde::Serialize;

use super::course::{teardown_start, Bounds, Course, GrowthConfig, Shape};
use super::owner::OwnerKind;
use super::site::{name, one_place_per_line, place, Place, SiteName, SourceLine};
use crate::live::{Holder, LiveState, SampleAxis, SiteId};

/// What a row is to the cause it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// The row that names the cause.
    Cause,
    /// The framework's allocator reserving memory for the cause's arrays (driver view).
    Segments,
    /// The same line of the same owner, through another path or view.
    SameLine,
    /// Host memory growing with the cause's device memory.
    Host,
    /// NCCL's buffers for the same communicators, made at another place (a collective's).
    Communicators,
}

impl Role {
    /// How a report introduces a row of this role.
    pub const fn name(self) -> &'static str {
        match self {
            Role::Cause => "cause",
            Role::Segments => "segments",
            Role::SameLine => "same line",
            Role::Host => "host",
            Role::Communicators => "communicators",
        }
    }
}

/// When a holder is full at its sustained rate.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Projection {
    /// Bytes left at the end of the steady state: the device's memory less what the trace held
    /// live then and what the driver held beyond the trace at its first `cuMemGetInfo` sample
    /// (the context, other processes).
    pub headroom: u64,
    /// Steps until full (steps axis).
    pub steps_to_full: Option<f64>,
    /// Seconds until full, from the mean step duration or the time axis.
    pub seconds_to_full: Option<f64>,
    /// Whether that is within the horizon.
    pub within_horizon: bool,
    /// The step the device ran out of memory in, its course judged up to it: full already
    /// (steps and seconds to full 0), whatever room the last sample before it showed.
    pub out_of_memory_at_step: Option<u64>,
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
    /// Sustained growth: the rates of the places growing steadily on this holder in the driver's
    /// view, added up.
    pub steady_growth: f64,
    /// At that rate, when the device is full (devices with sustained growth only).
    pub projection: Option<Projection>,
    /// Bytes freed after the steady state: live at its last sample less live at the end.
    pub teardown_freed: u64,
    /// Sustained growth above the threshold, or full within the horizon.
    pub alert: bool,
    /// Bytes left at the end of its steady state, when the device's size is known: what any
    /// rate's projection counts down from ([`Growth::headroom`]).
    #[serde(skip)]
    room: Option<u64>,
}

/// One place's growth on one holder.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SiteGrowth {
    /// The place's largest call site (all of its sites share its Python line and module).
    #[serde(flatten)]
    pub site: SiteName,
    #[serde(flatten)]
    pub holder: Holder,
    #[serde(flatten)]
    pub course: Course,
    /// Call sites merged into this row.
    pub sites: usize,
    /// Bytes the place holds at the end of the trace (after the teardown).
    pub now_bytes: u64,
    /// The view of memory the series comes from: `driver` (the calls the tracer saw), or the
    /// name another source gave its rows.
    pub view: &'static str,
    /// Sustained growth above its holder's threshold on its own, or full within the horizon.
    pub alert: bool,
    /// For steady growth: the finding of the diagnosis this row is part of, and what it is
    /// there (the cause, or evidence of it); set by [`analyze_with`](super::analyze_with).
    pub finding: Option<FindingRef>,
    /// As [`LineSeries::history_from`]: the first sample of a view whose history begins late.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history_from: Option<u64>,
    /// Steady growth judged on what the place still holds at the end, where reading began at a
    /// segment's snapshot and the samples read do not show it: the first step of the samples
    /// read (the course is the objects live at the end, summed by the step each was made in,
    /// over the whole run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_from: Option<u64>,
}

/// A place whose steady growth lost frees would make ([`Growth::lost_frees`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LostFrees {
    #[serde(flatten)]
    pub growth: SiteGrowth,
    /// Objects its call sites made (or were restored with from a snapshot), and of them those
    /// live at the end.
    pub made: u64,
    pub kept: u64,
}

/// A row's place in the diagnosis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct FindingRef {
    /// The finding's number in the diagnosis, from 1.
    pub number: usize,
    pub role: Role,
}

/// Live bytes of one place over the run from another view of memory than the driver's (say, a
/// framework allocator's per-tensor records), on the same axis as the trace's samples.
#[derive(Clone, Debug, PartialEq)]
pub struct LineSeries {
    /// The place, named as a site (its Python stack names the line).
    pub site: SiteName,
    pub holder: Holder,
    /// The view's name, e.g. `allocator`.
    pub view: &'static str,
    /// `(x, bytes)` on the axis the trace is sampled on.
    pub points: Vec<(u64, u64)>,
    /// The first sample the view's history holds whole, where the trace's samples begin before
    /// it (PyTorch's recorder keeps only its latest actions): growth before it is not seen.
    pub history_from: Option<u64>,
    /// What the view holds at the end, where it knows more than its last sample (the recorder's
    /// tensors at exit, after the last step's sample); `None`: the last sample's bytes.
    pub now_bytes: Option<u64>,
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
    /// For the steps axis: mean nanoseconds between step boundaries.
    pub step_ns: Option<u64>,
    /// The device memory thresholds are computed from, and where it came from: `given` or
    /// `sampled` (the total the driver reported to the tracer's `cuMemGetInfo` samples), or
    /// `observed-peak` (the highest live point of the device, a lower bound).
    pub device_memory: Option<u64>,
    pub device_memory_source: &'static str,
    pub alert_fraction: f64,
    pub horizon_steps: u64,
    pub horizon_ns: u64,
    /// Least samples for a verdict other than flat.
    pub min_samples: usize,
    /// Whether any holder alerts.
    pub alert: bool,
    /// Every holder.
    pub holders: Vec<HolderGrowth>,
    /// Places growing steadily, fastest first.
    pub steady: Vec<SiteGrowth>,
    /// Places that grew steadily as lost frees would make them grow, fastest first: events
    /// were lost, and each place freed all it made but no more than the losses could have
    /// taken. Left out of `steady`, its alerts and the holders' growth: a lost event never
    /// becomes a finding.
    pub lost_frees: Vec<LostFrees>,
    /// Places with a one-off peak, highest first.
    pub peaks: Vec<SiteGrowth>,
    /// Places shrinking steadily, fastest first.
    pub shrinking: Vec<SiteGrowth>,
    /// Places that rose once after the warm-up and stayed there (a one-off batch or evaluation
    /// whose memory an allocator keeps), largest rise first.
    pub one_off_rises: Vec<SiteGrowth>,
    /// The settings every series of the trace was judged with.
    #[serde(skip)]
    config: GrowthConfig,
    /// Samples added after a pattern's last step to every series of the driver's view, at its
    /// last value: the quiet after a pattern that stopped recurring long before the end.
    pub quiet: u64,
}

impl Growth {
    /// Judges a series of the driver's view of this trace (`(x, bytes)` on its axis: step
    /// numbers, or nanoseconds on the time axis) on `holder` exactly as the analysis judges its
    /// own rows: with its settings, the quiet after a pattern's last step, the holder's teardown
    /// cut off and its warm-up known. The comparisons judge their call sites and lines with it,
    /// so that a growth is the same growth in every output.
    pub fn judge(&self, holder: Holder, points: Vec<(u64, u64)>) -> Course {
        self.judge_in_view(DRIVER, holder, points)
    }

    /// [`Growth::judge`] for a call site's series, with `kept`, its objects still live at the
    /// end ([`kept_objects`]): where reading began at a segment's snapshot, growth the samples
    /// read do not show is judged on them, as the analysis judges its places.
    #[cfg(feature = "symbols")]
    pub(crate) fn judge_with_kept(
        &self,
        holder: Holder,
        points: Vec<(u64, u64)>,
        kept: Option<KeptAtSite>,
    ) -> Course {
        let course = self.judge(holder, points.clone());
        match kept {
            Some(kept) if course.shape != Shape::Steady => {
                kept_course(&points, kept, &self.config).map_or(course, |(_, c)| c)
            }
            _ => course,
        }
    }

    /// [`Growth::judge`] for a series of another view (`view`, as in [`LineSeries`]): its steps
    /// are its own, so no quiet is added after a pattern's.
    pub(crate) fn judge_in_view(
        &self,
        view: &str,
        holder: Holder,
        points: Vec<(u64, u64)>,
    ) -> Course {
        let quiet = if view == DRIVER { self.quiet } else { 0 };
        let points = with_quiet(in_units(points, self.window_ns), quiet);
        match self.holders.iter().find(|h| h.holder == holder) {
            Some(h) => judge_on(h, self.axis, &points, &self.config),
            None => Course::within(&points, Bounds::default(), &self.config),
        }
    }

    /// What projecting another growth on `holder` needs, as the analysis projects its own (the
    /// same bytes left, the same horizon); `None` when the device's size is not known.
    pub fn headroom(&self, holder: Holder) -> Option<Headroom> {
        let h = self.holders.iter().find(|h| h.holder == holder)?;
        Some(Headroom {
            room: h.room?,
            axis: self.axis,
            unit_ns: self.window_ns.or(self.step_ns),
            config: self.config,
        })
    }

    /// Whether a steady course is sure enough to act on without a threshold: grown over at
    /// least [`MIN_RISES`](super::course::MIN_RISES) rises along a line that fits (R² at least
    /// the settings' `min_r2`; a series that only ever rose is steady without it).
    #[cfg(feature = "symbols")]
    pub(crate) fn confident(&self, course: &Course) -> bool {
        course.shape == Shape::Steady
            && course.rises >= super::course::MIN_RISES
            && course.fit.is_some_and(|f| f.r2 >= self.config.min_r2)
    }
}

/// A holder's bytes left at the end of its steady state, with what a projection needs of its
/// trace (the axis, its unit's duration, the horizon).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Headroom {
    pub room: u64,
    axis: SampleAxis,
    unit_ns: Option<u64>,
    config: GrowthConfig,
}

impl Headroom {
    /// When the holder is full at `rate` bytes per sample unit (a step, or a time window).
    #[cfg(feature = "symbols")]
    pub(crate) fn project(&self, rate: f64) -> Projection {
        project(self.room, rate, self.axis, self.unit_ns, &self.config)
    }
}

/// The course of one series (in axis units) of holder `h`: the holder's teardown cut off, its
/// warm-up known.
/// The largest rise of a series, `(sample, bytes)`.
fn largest_rise(points: &[(u64, u64)]) -> Option<(u64, u64)> {
    (points.windows(2))
        .filter(|w| w[1].1 > w[0].1)
        .map(|w| (w[1].0, w[1].1 - w[0].1))
        .max_by_key(|&(x, b)| (b, std::cmp::Reverse(x)))
}

fn judge_on(
    h: &HolderGrowth,
    axis: SampleAxis,
    points: &[(u64, u64)],
    config: &GrowthConfig,
) -> Course {
    let bounds = Bounds {
        teardown: before(points, h.course.phases.teardown_from),
        warm_up_until: Some(h.course.phases.steady_from),
        time: axis == SampleAxis::Time,
        full: before(points, h.course.phases.full_from),
    };
    Course::within(points, bounds, config)
}

/// The share of a device's memory free at an out-of-memory failure from which the device was
/// not full: the request was too large for it, not the device filled.
const NOT_FULL_SHARE: f64 = 0.25;

/// Where `device`'s series `points` (on the steps axis) is cut for running out of memory: the
/// index of the first sample of the step its first out-of-memory failure came in, when enough
/// samples come before it to judge. A program that goes on after the failures (its allocations
/// refused) shows a flat course that says nothing of the growth that filled the device.
///
/// A device where a place still grows steadily after the failure was not full (a request
/// larger than what was free, or than any free piece of it, failed): its course is judged
/// whole, or the growth that goes on would be passed over. Nor was one whose known size left a
/// quarter of it free or more, less than the failed request asked for: a one-off too large.
fn full_at(
    state: &LiveState,
    device: i32,
    points: &[(u64, u64)],
    config: &GrowthConfig,
) -> Option<usize> {
    let oom = (state.failures().iter()).find(|f| f.out_of_memory && f.device == device)?;
    // A request larger than all the device had free, while a good share of it was free
    // ([`NOT_FULL_SHARE`]), failed alone, with room left for the rest: the device was not full.
    // A leak that filled it leaves next to nothing free, and its later allocations fail too.
    let (memory, from) = memory_of(state, config, device);
    let free = memory.saturating_sub(oom.live_device_bytes);
    let roomy = free as f64 >= NOT_FULL_SHARE * memory as f64;
    if from != "observed-peak" && oom.request_bytes > free && roomy {
        return None;
    }
    let at = points.iter().position(|p| p.0 >= oom.origin.step)?;
    let grows_after = (state.site_series(SampleAxis::Steps))
        .filter(|(_, holder, _)| *holder == Holder::Device { device })
        .any(|(_, _, series)| {
            let after: Vec<(u64, u64)> = (series.into_iter())
                .filter(|p| p.0 >= oom.origin.step)
                .collect();
            after.len() >= config.min_samples && {
                let c = Course::within(&after, Bounds::default(), config);
                c.shape == Shape::Steady && c.rate > 0.0
            }
        });
    (at >= config.min_samples && !grows_after).then_some(at)
}

/// The axis a state's growth is read on: steps when at least two were sampled, else time. A
/// reading begun at a segment's snapshot in a run with steps stays on steps when it sampled
/// any: the few milliseconds of the steps read, cut into time windows, would show the
/// snapshot's objects as a rise and judge the steps of a run by its moments.
pub(crate) fn axis_of(state: &LiveState) -> SampleAxis {
    let sampled = state.samples(SampleAxis::Steps).0;
    let restored = state.restored().is_some() && state.steps() > 0;
    if sampled >= 2 || (restored && sampled >= 1) {
        SampleAxis::Steps
    } else {
        SampleAxis::Time
    }
}

/// The most samples added for the quiet after a pattern's last step.
const MAX_QUIET_SAMPLES: u64 = 64;

/// A series on the steps of an allocation pattern, with the quiet after its last step added as
/// `quiet` samples that stay at its last value: an anchor that is itself a warm-up's growth
/// (a caching allocator adding a segment a few times) makes steps only while it grows, and the
/// rest of the run, without it, says the growth stopped.
fn with_quiet(mut points: Vec<(u64, u64)>, quiet: u64) -> Vec<(u64, u64)> {
    if let Some(&(x, y)) = points.last() {
        points.extend((1..=quiet).map(|k| (x + k, y)));
    }
    points
}

/// Samples of a series in axis units: time samples become window indices.
pub(crate) fn in_units(points: Vec<(u64, u64)>, window_ns: Option<u64>) -> Vec<(u64, u64)> {
    match window_ns {
        Some(w) if w > 0 => points.into_iter().map(|(x, y)| (x / w, y)).collect(),
        _ => points,
    }
}

/// The device memory thresholds come from for `device`, and its source.
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

/// The call sites of one place on one holder: their series, and each one's highest point.
#[derive(Default)]
struct Members {
    series: Vec<Vec<(u64, u64)>>,
    sites: Vec<(u64, SiteId)>,
}

/// Whether a place's steady growth is what lost frees would make: events were lost (`lost`, a
/// share of all), the place freed what it made but for `live` of `made`, and kept no more
/// than the share of its frees that the losses would have taken. A temporary whose frees the
/// tracer dropped grows so; a place that keeps what it makes keeps far more than the share
/// (never freeing, or freeing less than the losses would explain).
fn lost_frees(lost: f64, made: u64, live: u64) -> bool {
    lost > 0.0 && made > live && live as f64 <= lost * made as f64
}

/// The name of the driver's view: the calls the tracer saw.
pub const DRIVER: &str = "driver";

/// One series to judge: a place on a holder.
struct Row {
    site: SiteName,
    holder: Holder,
    view: &'static str,
    sites: usize,
    now_bytes: u64,
    points: Vec<(u64, u64)>,
    history_from: Option<u64>,
    /// Objects its call sites made, and those live (the driver's view; another's: none).
    made: u64,
    live: u64,
    /// In a reading begun at a segment's snapshot: what its sites still hold at the end, the
    /// driver's view only.
    kept: KeptAtSite,
}

/// A line reached on several paths of the program is a place per path, so that the path that
/// keeps memory is told from one whose temporaries come and go. Where the line grows steadily
/// on two paths or more, the line itself keeps what it makes (a helper that caches what it
/// returns, called from three lines): its paths are one place again, the line, their series
/// summed, named without a path ([`one_place_per_line`]).
fn one_place_where_every_path_grows(
    rows: Vec<Row>,
    judge: impl Fn(&Row) -> Option<Course>,
) -> Vec<Row> {
    type Line = (Holder, &'static str, Option<u32>, SourceLine);
    let line_of = |r: &Row| -> Option<Line> {
        r.site.via.as_ref()?;
        Some((r.holder, r.view, r.site.module, r.site.source.clone()?))
    };
    let lines: Vec<Option<Line>> = rows.iter().map(line_of).collect();
    let whole = one_place_per_line(rows.iter().zip(&lines).map(|(r, line)| {
        let grows = line.is_some() && judge(r).is_some_and(|c| c.shape == Shape::Steady);
        (line.clone(), grows)
    }));
    if whole.is_empty() {
        return rows;
    }
    let mut merged: BTreeMap<Line, Row> = BTreeMap::new();
    let mut out = Vec::with_capacity(rows.len());
    for (i, (r, line)) in rows.into_iter().zip(lines).enumerate() {
        let Some(line) = line.filter(|_| whole.contains(&i)) else {
            out.push(r);
            continue;
        };
        match merged.get_mut(&line) {
            Some(m) => {
                m.points = sum(&[std::mem::take(&mut m.points), r.points]);
                m.sites += r.sites;
                m.now_bytes += r.now_bytes;
                m.history_from = m.history_from.max(r.history_from);
                m.made += r.made;
                m.live += r.live;
                m.kept = std::mem::take(&mut m.kept).with(r.kept);
            }
            None => {
                merged.insert(
                    line,
                    Row {
                        site: r.site.without_path(),
                        ..r
                    },
                );
            }
        }
    }
    out.extend(merged.into_values());
    out
}

/// Points of a course over the whole run judged from the objects still live at its end.
const KEPT_POINTS: u64 = 256;

/// What a call site on a holder still holds at the end of a reading begun at a segment's
/// snapshot ([`kept_objects`]).
#[derive(Debug, Default)]
pub(crate) struct KeptAtSite {
    /// Its objects live at the end, each as (the step it was made in, its bytes).
    objects: Vec<(u64, u64)>,
    /// Objects it had live at the snapshot, and of them those still live at the end.
    restored: u64,
    survivors: u64,
}

impl KeptAtSite {
    /// This and `other` together (a place of several call sites).
    fn with(mut self, other: KeptAtSite) -> KeptAtSite {
        self.objects.extend(other.objects);
        self.restored += other.restored;
        self.survivors += other.survivors;
        self
    }
}

/// [`KeptAtSite`] by holder and call site.
pub(crate) type Kept = BTreeMap<(Holder, SiteId), KeptAtSite>;

/// The objects still live at the end of a reading on `axis` begun at a segment's snapshot, in
/// device memory ([`kept_course`]); none for any other reading.
pub(crate) fn kept_objects(state: &LiveState, axis: SampleAxis) -> Kept {
    let mut kept = Kept::new();
    let Some(restored) = state.restored().filter(|_| axis == SampleAxis::Steps) else {
        return kept;
    };
    for o in state.live_objects() {
        let bytes = o.device_bytes();
        // One a lost event may have freed is no evidence of what was kept.
        if bytes == 0 || state.lost_after(o.origin.seq) {
            continue;
        }
        let holder = Holder::Device { device: o.device };
        let k = kept.entry((holder, o.origin.site)).or_default();
        k.objects.push((o.origin.step, bytes));
        k.survivors += u64::from(o.origin.seq <= restored.last_seq);
    }
    for (holder, site, n) in state.site_restored() {
        if let Some(k) = kept.get_mut(&(holder, site)) {
            k.restored = n;
        }
    }
    kept
}

/// Of what a place had live at the snapshot, the share still live at the end below which what
/// it holds at the end is no course of the run: a ring of buffers, each made again in turn,
/// keeps only its latest, made step after step, and never grows.
const KEPT_SURVIVORS: f64 = 0.9;

/// The steady growth of a place in a reading begun at a segment's snapshot, which the samples
/// read (`points`, from the snapshot on) do not show: rotation deleted the steps before, and a
/// slow leak makes too few rises in what is left. What the place still holds at the end was
/// made step after step across the deleted part: `kept`, its objects live at the end, summed by
/// the step each was made in, is a course over the whole run — the least the place held at each
/// step, temporaries aside — judged as any series. `None` unless objects of the deleted steps
/// are among them and that course is steady. Returns the first step read, and the course.
pub(crate) fn kept_course(
    points: &[(u64, u64)],
    kept: KeptAtSite,
    config: &GrowthConfig,
) -> Option<(u64, Course)> {
    let first = points.first()?.0;
    // What it held at the snapshot went on being held: a leak frees nothing it made.
    if (kept.survivors as f64) < KEPT_SURVIVORS * kept.restored as f64 {
        return None;
    }
    let mut kept = kept.objects;
    if !kept.iter().any(|&(step, _)| step < first) {
        return None;
    }
    kept.sort_unstable();
    let last = points.last()?.0.max(kept.last()?.0);
    let mut held = 0;
    let mut next = kept.iter().peekable();
    let course: Vec<(u64, u64)> = (0..KEPT_POINTS)
        .map(|k| {
            let x = last * k / (KEPT_POINTS - 1);
            while let Some(&&(step, bytes)) = next.peek() {
                if step > x {
                    break;
                }
                held += bytes;
                next.next();
            }
            (x, held)
        })
        .collect();
    let judged = Course::within(&course, Bounds::default(), config);
    (judged.shape == Shape::Steady && judged.rate > 0.0).then_some((first, judged))
}

/// Series summed point by point; a series has no points before it began (it held nothing).
fn sum(parts: &[Vec<(u64, u64)>]) -> Vec<(u64, u64)> {
    if let [one] = parts {
        return one.clone();
    }
    let mut total: BTreeMap<u64, u64> = BTreeMap::new();
    for part in parts {
        for &(x, y) in part {
            *total.entry(x).or_default() += y;
        }
    }
    total.into_iter().collect()
}

/// The part of `points` before `teardown_x`.
fn before(points: &[(u64, u64)], teardown_x: Option<u64>) -> Option<usize> {
    let x = teardown_x?;
    Some(points.iter().position(|p| p.0 >= x).unwrap_or(points.len()))
}

/// When a holder with `headroom` bytes left is full at `rate` per sample unit.
fn project(
    headroom: u64,
    rate: f64,
    axis: SampleAxis,
    unit_ns: Option<u64>,
    c: &GrowthConfig,
) -> Projection {
    let units = headroom as f64 / rate;
    let seconds = unit_ns.map(|ns| units * ns as f64 / 1e9);
    let steps = (axis == SampleAxis::Steps).then_some(units);
    let within = steps.is_some_and(|s| s <= c.horizon_steps as f64)
        || seconds.is_some_and(|s| s * 1e9 <= c.horizon_ns as f64);
    Projection {
        headroom,
        steps_to_full: steps,
        seconds_to_full: seconds,
        within_horizon: within,
        out_of_memory_at_step: None,
    }
}

/// The growth of `state`.
pub fn growth(state: &LiveState, config: &GrowthConfig) -> Growth {
    growth_with(state, config, Vec::new())
}

/// The growth of `state`, with `extra` rows from another view of memory judged beside the
/// driver's.
pub fn growth_with(state: &LiveState, config: &GrowthConfig, extra: Vec<LineSeries>) -> Growth {
    let axis = axis_of(state);
    let (ticks, stride) = state.samples(axis);
    let window_ns = (axis == SampleAxis::Time).then(|| state.sample_width_ns());
    let step_ns = (axis == SampleAxis::Steps)
        .then(|| state.step_duration_ns())
        .flatten();
    // Nanoseconds per sample unit: a step, or a window (time samples are window indices).
    let unit_ns = window_ns.or(step_ns);
    let mut source = if config.device_memory.is_some() {
        "given"
    } else if state.device_accounts().any(|a| a.total > 0) {
        "sampled"
    } else {
        "observed-peak"
    };
    let mut device_memory = config.device_memory;
    // Steps of a pattern that stopped recurring long before the end: the quiet after them.
    let quiet = match state.steps_after_pattern() {
        q if q >= 2 && axis == SampleAxis::Steps => q.min(MAX_QUIET_SAMPLES),
        _ => 0,
    };
    let mut holders: Vec<HolderGrowth> = state
        .holders()
        .iter()
        .map(|h| {
            let points = with_quiet(
                in_units(state.holder_series(h.holder, axis), window_ns),
                quiet,
            );
            let teardown = match axis {
                SampleAxis::Time => teardown_start(&points),
                SampleAxis::Steps => None,
            };
            let full = match (h.holder, axis) {
                (Holder::Device { device }, SampleAxis::Steps) => {
                    full_at(state, device, &points, config)
                }
                _ => None,
            };
            // Read from a snapshot (rotation deleted the first segments, or `--last`): the
            // series begins mid-run, where no warm-up is; its first rises are the run's own.
            let mid_run = state.restored().is_some();
            let bounds = Bounds {
                teardown,
                warm_up_until: points.first().map(|p| p.0).filter(|_| mid_run),
                time: axis == SampleAxis::Time,
                full,
            };
            let course = Course::within(&points, bounds, config);
            // The memory a projection counts down from: only a device's known size (the
            // observed peak is a lower bound, and would project every growth full at once).
            let (threshold, memory) = match h.holder {
                Holder::Device { device } => {
                    let (memory, from) = memory_of(state, config, device);
                    source = from;
                    device_memory = Some(device_memory.unwrap_or(0).max(memory));
                    let baseline = state
                        .device_accounts()
                        .find(|a| a.device == device)
                        .map_or(0, |a| a.baseline());
                    let known = (from != "observed-peak").then(|| memory.saturating_sub(baseline));
                    (Some(memory as f64 * config.alert_fraction), known)
                }
                Holder::Host => (None, None),
            };
            HolderGrowth {
                holder: h.holder,
                teardown_freed: course.last_bytes.saturating_sub(h.bytes),
                room: memory.map(|m| m.saturating_sub(course.last_bytes)),
                course,
                threshold,
                steady_growth: 0.0,
                projection: None,
                alert: false,
            }
        })
        .collect();
    let holder_of = |holder: Holder| holders.iter().find(|h| h.holder == holder);

    // The driver's series by place and holder, summed.
    let mut places: BTreeMap<(Holder, Place), Members> = BTreeMap::new();
    for (site, holder, points) in state.site_series(axis) {
        let peak = points.iter().map(|p| p.1).max().unwrap_or(0);
        let e = places.entry((holder, place(state, site))).or_default();
        e.series
            .push(with_quiet(in_units(points, window_ns), quiet));
        e.sites.push((peak, site));
    }
    let turnover: BTreeMap<(Holder, SiteId), (u64, u64)> = (holders.iter())
        .flat_map(|h| {
            let holder = h.holder;
            (state.site_turnover(holder))
                .map(move |(site, made, live)| ((holder, site), (made, live)))
        })
        .collect();
    let now: BTreeMap<(Holder, SiteId), u64> = holders
        .iter()
        .flat_map(|h| {
            let holder = h.holder;
            state
                .site_holdings(holder)
                .into_iter()
                .map(move |s| ((holder, s.site), s.bytes))
        })
        .collect();
    let mut kept = kept_objects(state, axis);
    let mut rows: Vec<Row> = places
        .into_iter()
        .map(|((holder, _), Members { series, mut sites })| {
            let kept = (sites.iter())
                .filter_map(|&(_, id)| kept.remove(&(holder, id)))
                .fold(KeptAtSite::default(), KeptAtSite::with);
            let now_bytes = sites
                .iter()
                .map(|&(_, id)| now.get(&(holder, id)).copied().unwrap_or(0))
                .sum();
            let (made, live) = (sites.iter())
                .filter_map(|&(_, id)| turnover.get(&(holder, id)))
                .fold((0, 0), |(m, l), &(made, live)| (m + made, l + live));
            // The example: the site holding the most at its highest, then the first seen.
            sites.sort_by_key(|&(peak, id)| (std::cmp::Reverse(peak), id));
            Row {
                site: name(state, sites[0].1),
                holder,
                view: DRIVER,
                sites: sites.len(),
                now_bytes,
                points: sum(&series),
                history_from: None,
                made,
                live,
                kept,
            }
        })
        .collect();
    rows.extend(extra.into_iter().map(|l| Row {
        now_bytes: (l.now_bytes).unwrap_or_else(|| l.points.last().map_or(0, |p| p.1)),
        site: l.site,
        holder: l.holder,
        view: l.view,
        sites: 1,
        points: l.points,
        history_from: l.history_from,
        made: 0,
        live: 0,
        kept: KeptAtSite::default(),
    }));

    let judge = |row: &Row| holder_of(row.holder).map(|h| judge_on(h, axis, &row.points, config));
    let rows = one_place_where_every_path_grows(rows, judge);

    let (mut steady, mut peaks, mut shrinking) = (Vec::new(), Vec::new(), Vec::new());
    let (mut one_off_rises, mut lost) = (Vec::new(), Vec::<LostFrees>::new());
    let lost_events = state.lost_events();
    let lost_share = lost_events as f64 / (state.events() + lost_events).max(1) as f64;
    for row in rows {
        let Row {
            site,
            holder,
            view,
            sites,
            now_bytes,
            points,
            history_from,
            made,
            live,
            kept,
        } = row;
        let Some(h) = holder_of(holder) else {
            continue;
        };
        let mut course = judge_on(h, axis, &points, config);
        let mut kept_from = None;
        if course.shape != Shape::Steady {
            if let Some((from, c)) = kept_course(&points, kept, config) {
                (course, kept_from) = (c, Some(from));
            }
        }
        // XLA's pool is taken when JAX starts, inside the warm-up: it is said as the rise that
        // stayed, with JAX's advice, rather than passed over as the warm-up it is.
        if course.shape == Shape::Flat
            && course.phases.late_rise.is_none()
            && site.owner == OwnerKind::Jax
        {
            course.phases.late_rise = largest_rise(&points);
            course.phases.late_rises = u64::from(course.phases.late_rise.is_some());
        }
        let growth = |course, alert| SiteGrowth {
            site: site.clone(),
            holder,
            course,
            sites,
            now_bytes,
            view,
            alert,
            finding: None,
            history_from,
            kept_from,
        };
        if course.shape == Shape::Steady && lost_frees(lost_share, made, live) {
            lost.push(LostFrees {
                growth: growth(course, false),
                made,
                kept: live,
            });
            continue;
        }
        let list = match course.shape {
            Shape::Steady => &mut steady,
            Shape::Peak => &mut peaks,
            Shape::Shrinking => &mut shrinking,
            Shape::Flat if course.phases.late_rise.is_some() => &mut one_off_rises,
            Shape::Flat => continue,
        };
        let alert = course.shape == Shape::Steady
            && h.threshold.is_some_and(|t| {
                course.rate > t
                    || h.room.is_some_and(|room| {
                        project(room, course.rate, axis, unit_ns, config).within_horizon
                    })
            });
        list.push(growth(course, alert));
    }
    for h in &mut holders {
        // The driver's view measures the device; another view's rows name lines, and would
        // count the same growth twice.
        // (An empty sum of reals is -0.0: + 0.0 makes it the 0 a reader expects.)
        h.steady_growth = steady
            .iter()
            .filter(|s| s.holder == h.holder && s.view == DRIVER)
            .map(|s| s.course.rate)
            .sum::<f64>()
            + 0.0;
        if h.steady_growth > 0.0 {
            let above = h.threshold.is_some_and(|t| h.steady_growth > t);
            // It ran out of memory growing: full already, not in so many steps. Judged before
            // its first failure (the course cut there), or failing after its last sample (a
            // program the error ended, its course steady to the end).
            let at_end = match h.holder {
                Holder::Device { device } if axis == SampleAxis::Steps => {
                    let last = state.holder_series(h.holder, axis).last().map(|p| p.0);
                    (state.failures().iter())
                        .find(|f| f.out_of_memory && f.device == device)
                        .map(|f| f.origin.step)
                        .filter(|&step| last.is_some_and(|x| step >= x))
                }
                _ => None,
            };
            let p = match h.course.phases.full_from.or(at_end) {
                Some(step) => Some(Projection {
                    headroom: h.room.unwrap_or(0),
                    steps_to_full: Some(0.0),
                    seconds_to_full: unit_ns.map(|_| 0.0),
                    within_horizon: true,
                    out_of_memory_at_step: Some(step),
                }),
                None => (h.room).map(|room| project(room, h.steady_growth, axis, unit_ns, config)),
            };
            h.alert = above || p.is_some_and(|p| p.within_horizon);
            h.projection = p;
        }
    }
    let by_rate =
        |a: &SiteGrowth, b: &SiteGrowth| b.course.slope().abs().total_cmp(&a.course.slope().abs());
    steady.sort_by(by_rate);
    lost.sort_by(|a, b| by_rate(&a.growth, &b.growth));
    shrinking.sort_by(by_rate);
    peaks.sort_by_key(|s| std::cmp::Reverse(s.course.max_bytes));
    one_off_rises.sort_by_key(|s| std::cmp::Reverse(s.course.phases.late_rise.map(|r| r.1)));
    Growth {
        axis,
        ticks,
        stride,
        window_ns,
        step_ns,
        device_memory,
        device_memory_source: source,
        alert_fraction: config.alert_fraction,
        horizon_steps: config.horizon_steps,
        horizon_ns: config.horizon_ns,
        min_samples: config.min_samples,
        alert: holders.iter().any(|h| h.alert),
        holders,
        steady,
        lost_frees: lost,
        peaks,
        shrinking,
        one_off_rises,
        config: *config,
        quiet,
    }
}
