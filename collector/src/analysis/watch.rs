//! The analyses while the program runs: the tracer's writer thread feeds every record it writes
//! to a [`Watch`], which keeps the live-allocation state current and, when asked, judges growth
//! with the same code the tools run on a finished trace ([`growth`](super::growth())): phases,
//! steady growth per device and per place, and the projection to a full device.
//!
//! A judgement runs at most once per [`WatchConfig::every_ns`] and only when a step (or a time
//! window, for a program without step marks) was sampled since the last one, so its cost is per
//! step, not per event. It raises an alert for a device the first time that device's steady
//! growth passes the threshold or its projection falls within the horizon, and that growth has
//! lasted [`WatchConfig::confirm`] samples: a program cannot be told from its first steps to be
//! warming up or leaking, and the end-of-run analysis, which sees the growth stop, would call a
//! warm-up of a few steps flat. The growth must also still be going on at the latest sample
//! judged, which a one-off peak is not. An alert the program's own view shows to be no leak is
//! withdrawn ([`Watch::withdraw`]); that device is judged again once the run has gone on twice
//! as long.
//!
//! When the tracer's writer falls behind the program, it lowers the resolution instead of
//! stopping the analysis ([`Watch::set_stride`]): judgements every N-th step or N intervals,
//! from the same state, kept current on every event (the trace's segments need it anyway).
//! With PyTorch's recorder on, the driver sees the caching allocator's segments, charged to
//! whichever line made the allocator grow. The watch keeps PyTorch's payloads, from which, once
//! the program has handed over a snapshot of its recorder (the Python hooks do when an alert
//! waits for it), `torch::keeping_places` names each device's fastest cause at the line whose
//! tensors stay live, with the same causes as the report.
//!
//! A program without step marks (a CuPy or JAX loop) is judged per time window until its
//! allocation pattern shows a period: the watch looks for one as the run goes on (at each
//! judgement, then, past [`CHEAP_PATTERN_LOOK`] allocations and frees, each time they have
//! doubled), and once its anchor has recurred
//! [`MIN_PATTERN_STEPS`] times over [`MIN_PATTERN_NS`] and still does, a step begins at each
//! later occurrence ([`LiveState::follow_pattern`]), numbered on from those already seen, as
//! the report numbers the steps it finds in the whole trace. A growth judged per such step must
//! also have lasted [`WatchConfig::confirm_pattern_ns`] of wall time: a program's start can
//! repeat one allocation for seconds (its arrays made one by one), where its loop repeats it
//! for as long as it runs. A PyTorch program under the Python hooks follows no pattern: the
//! hooks mark its steps, and before the first of them it is building its model. A mark that
//! comes later wins (the pattern's steps end there). A pattern whose anchor stops recurring (a
//! start that repeated itself, then a loop that does something else) is let go after
//! [`PATTERN_QUIET_STEPS`] steps' time (at least [`PATTERN_QUIET_NS`]): the run is judged per
//! time window again, and looked at for a pattern anew.
//!
//! Without step marks the samples are time windows of a millisecond and up, so a count of them
//! says little: a PyTorch program building its model and taking its first step (before the
//! Python hooks' first optimizer-step mark) grows for a second or more, which is ten windows. A
//! growth judged per time window must also have lasted [`WatchConfig::confirm_time_ns`] of wall
//! time (on the H200, a healthy GPT loop alerted at its start without this rule).

use std::collections::{BTreeMap, BTreeSet};

use super::course::GrowthConfig;
use super::course::Shape;
use super::growth::{growth, Growth, HolderGrowth, Projection, SiteGrowth, DRIVER};
use super::site::{Place, SiteName};
use crate::attached::{Attachments, KIND_TORCH_ALLOCATOR};
use crate::event::Event;
use crate::format::Record;
use crate::live::{Holder, LiveState, SampleAxis};
use crate::units::line_label;

/// How the live analysis judges.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WatchConfig {
    /// The growth verdicts' settings (threshold as a share of device memory, horizon).
    pub growth: GrowthConfig,
    /// Growth per step (or per time window) in bytes above which steady growth alerts, in place
    /// of `growth.alert_fraction` of device memory.
    pub threshold_bytes: Option<u64>,
    /// Steps (or windows) a steady growth must have lasted, from its first rise to the latest
    /// sample, before it alerts.
    pub confirm: u64,
    /// Nanoseconds a steady growth judged per time window (no step marks) must have lasted,
    /// besides `confirm` windows.
    pub confirm_time_ns: u64,
    /// Nanoseconds a steady growth judged per step of an allocation pattern the watch found
    /// (no step marks) must have lasted, besides `confirm` steps.
    pub confirm_pattern_ns: u64,
    /// Least nanoseconds between judgements.
    pub every_ns: u64,
    /// Whether a run without step marks gets steps from its allocation pattern (off: the watch
    /// only keeps the state current, and the detector's memory is saved).
    pub find_steps: bool,
}

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig {
            growth: GrowthConfig::default(),
            threshold_bytes: None,
            confirm: 10,
            confirm_time_ns: 600 * 1_000_000_000,
            confirm_pattern_ns: 60 * 1_000_000_000,
            every_ns: 1_000_000_000,
            find_steps: true,
        }
    }
}

/// Occurrences of a pattern's anchor seen before the watch follows it: fewer could be a
/// program's start repeating itself a few times, not its loop.
pub(crate) const MIN_PATTERN_STEPS: u64 = 8;

/// Nanoseconds the occurrences of a pattern's anchor must span before the watch follows it.
pub(crate) const MIN_PATTERN_NS: u64 = 1_000_000_000;

/// Steps' worth of time, and the least time, without the anchor of the pattern the watch
/// follows before it stops following it ([`Watch::forget_stopped_pattern`]).
pub(crate) const PATTERN_QUIET_STEPS: u64 = 10;
pub(crate) const PATTERN_QUIET_NS: u64 = 30 * 1_000_000_000;

/// Allocations and frees seen before the watch first looks for a pattern.
const FIRST_PATTERN_LOOK: u64 = 16;
/// Up to this many, the watch looks for a pattern at every judgement that saw new ones (a
/// few milliseconds); beyond, each time they have doubled.
const CHEAP_PATTERN_LOOK: u64 = 1 << 14;

/// Why a device alerts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Steady growth above the threshold.
    Growth,
    /// At its rate, the device is full within the horizon.
    Horizon,
    /// The device ran out of memory while it grew steadily.
    OutOfMemory,
}

impl Reason {
    /// `growth` or `horizon`.
    pub const fn name(self) -> &'static str {
        match self {
            Reason::Growth => "growth",
            Reason::Horizon => "horizon",
            Reason::OutOfMemory => "out-of-memory",
        }
    }

    /// Why alert `a` was raised, in the words its stderr line and the report both give:
    /// `above the threshold of 1.0 MiB per step`, `above the threshold of 524.3 KiB per step,
    /// 0.1% of 512.0 MiB`, `full within the horizon`, `it ran out of memory`.
    pub fn words(a: &crate::format::Alert) -> String {
        if a.reason == Reason::OutOfMemory.name() {
            "it ran out of memory".to_string()
        } else if a.reason == Reason::Growth.name() {
            // A share of the device's memory (the default) says so.
            let share = crate::units::share_of(a.threshold as f64, a.device_memory)
                .map_or(String::new(), |s| format!(", {s}"));
            let unit = a.unit_name();
            format!(
                "above the threshold of {} per {unit}{share}",
                crate::units::bytes(a.threshold)
            )
        } else {
            "full within the horizon".to_string()
        }
    }
}

/// One device at one judgement.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceVerdict {
    pub device: i32,
    /// Bytes live now.
    pub live_bytes: u64,
    /// Bytes of device memory the threshold and projection count from (0: unknown).
    pub device_memory: u64,
    /// Steady growth in bytes per sample unit (0 when none).
    pub steady_growth: f64,
    /// The threshold, bytes per sample unit.
    pub threshold: f64,
    pub projection: Option<Projection>,
    /// Bytes held now by the places growing steadily: what a leak holds so far.
    pub leak_suspect_bytes: u64,
    /// Whether the growth passes the threshold or the horizon and has lasted long enough.
    pub alert: Option<Reason>,
    /// Growth that would alert but has not lasted the wall time asked for yet: what the end of
    /// a run says when it raised no alert.
    pub held: Option<Held>,
    /// The place growing fastest on the device (the driver's view).
    pub top: Option<SiteGrowth>,
}

/// Steady growth that would alert, held back by a confirmation in wall time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    /// Nanoseconds it has lasted, and those asked for (0 where the samples fell short).
    pub lasted_ns: u64,
    pub wanted_ns: u64,
    /// Judged per step of an allocation pattern (else per time window).
    pub pattern: bool,
    /// Steps it has lasted, and those the confirmation asks for, when those fell short: a loop
    /// shorter than `VRAMTRACE_ALERT_CONFIRM` (growth per time window shorter than it is not
    /// held but unjudged: a program's first milliseconds grow as much as a leak).
    pub samples: Option<(u64, u64)>,
}

/// What a judgement found.
#[derive(Clone, Debug, PartialEq)]
pub struct Judgement {
    /// Samples are steps, or time windows of `unit_ns`.
    pub axis: SampleAxis,
    /// Steps guessed from the allocation pattern (a run without step marks).
    pub guessed: bool,
    /// Nanoseconds per sample unit, when known (the mean step, or the window).
    pub unit_ns: Option<u64>,
    /// Steps begun.
    pub steps: u64,
    pub devices: Vec<DeviceVerdict>,
    /// Devices alerting now for the first time.
    pub raised: Vec<i32>,
}

impl Judgement {
    /// The verdict of `device`.
    pub fn device(&self, device: i32) -> Option<&DeviceVerdict> {
        self.devices.iter().find(|d| d.device == device)
    }
}

/// What [`Watch::alert_of`] found for one holder.
enum Verdict {
    Alert(Reason),
    Held(Held),
    None,
}

/// The live analysis of one process.
#[derive(Debug)]
pub struct Watch {
    state: LiveState,
    config: WatchConfig,
    /// When the last judgement ran, and the samples (steps, windows) it saw.
    judged: Option<(u64, (u64, u64))>,
    /// Devices that alerted already (each alerts once).
    alerted: BTreeSet<i32>,
    /// Devices whose alert was withdrawn ([`Watch::withdraw`]), with the samples (steps,
    /// windows) taken then: such a device alerts again only once twice as many were taken.
    withdrawn: BTreeMap<i32, (u64, u64)>,
    /// Judge at most every `stride`-th step and every `stride` intervals (see
    /// [`Watch::set_stride`]).
    stride: u64,
    /// PyTorch's payloads: its allocator settings and its recorder's snapshots.
    torch: Attachments,
    /// Steps of the pattern seen before the watch followed it (0: it follows none).
    steps_before: u64,
    /// Tokens the detector had noted when the watch last looked for a pattern.
    looked_at: u64,
    /// While it follows a pattern: the time of the anchor's occurrence it was found at, and
    /// the pattern's mean step (the quiet is measured from these until a step is applied).
    followed: (u64, u64),
}

impl Watch {
    pub fn new(config: WatchConfig) -> Self {
        Watch {
            state: if config.find_steps {
                LiveState::new()
            } else {
                LiveState::without_step_detection()
            },
            config,
            judged: None,
            alerted: BTreeSet::new(),
            withdrawn: BTreeMap::new(),
            stride: 1,
            torch: Attachments::default(),
            steps_before: 0,
            looked_at: 0,
            followed: (0, 0),
        }
    }

    /// Steps begun, as the judgements number them: with a pattern's steps, counted on from the
    /// occurrences seen before the watch followed it; with step marks, the marks alone, as a
    /// reader of the whole trace counts them (`LiveState::unapplied_steps`), though the loop's
    /// iterations before the first mark began steps of the state's own series.
    pub fn steps(&self) -> u64 {
        let s = &self.state;
        match (s.marks(), s.iterations()) {
            (0, 0) => self.steps_before + s.steps(),
            (0, _) => s.steps(),
            _ => s.steps() - s.iteration_steps(),
        }
    }

    /// In a run without marks, follows the allocation pattern once one shows with enough steps
    /// (looked for at each judgement while few tokens were seen, then each time they have
    /// doubled: finding a period costs time in the tokens kept).
    fn find_steps(&mut self) {
        self.forget_stopped_pattern();
        let s = &self.state;
        // The Python hooks attach PyTorch's allocator settings: they mark its steps.
        let hooked = !self.torch.of_kind(KIND_TORCH_ALLOCATOR).is_empty();
        let marked = s.marks() > 0 || s.iterations() > 0 || hooked;
        if !self.config.find_steps || s.follows_pattern() || marked {
            return;
        }
        let tokens = s.step_tokens();
        let again = match tokens <= CHEAP_PATTERN_LOOK {
            true => tokens > self.looked_at,
            false => tokens >= 2 * self.looked_at,
        };
        if tokens < FIRST_PATTERN_LOOK || !again {
            return;
        }
        self.looked_at = tokens;
        let Some(p) = s.step_pattern().filter(|p| p.steps >= MIN_PATTERN_STEPS) else {
            return;
        };
        let (first, last) = p.times_ns;
        let span = last.saturating_sub(first);
        let step_ns = span / (p.steps - 1);
        // Still recurring: the latest occurrence no more than a few steps before the latest
        // event (the trace's own clock: the writer may be behind the program).
        let recurring = s.latest_ns().saturating_sub(last) <= 4 * step_ns;
        if span >= MIN_PATTERN_NS && recurring {
            self.steps_before += p.steps;
            self.followed = (last, step_ns);
            self.state.follow_pattern(&p);
        }
    }

    /// Lowers (or restores) the resolution: judge at most every `stride`-th step, and at most
    /// once per `stride` intervals. The state is kept current on every event whatever the
    /// stride, so a judgement sees every sample since the last: a lower resolution delays an
    /// alert, never loses it.
    pub fn set_stride(&mut self, stride: u64) {
        self.stride = stride.max(1);
    }

    /// The current stride (1: every step, every interval).
    pub fn stride(&self) -> u64 {
        self.stride
    }

    /// The live-allocation state as of the last record applied.
    pub fn state(&self) -> &LiveState {
        &self.state
    }

    /// Applies a record written to the trace. Of the payloads the program attached only
    /// PyTorch's are kept (to name the line behind an alert: `torch::keeping_places`); the
    /// judgement reads none.
    pub fn apply(&mut self, record: &Record) {
        match record {
            Record::Attachment(a) if a.kind.starts_with("torch.") => self.torch.add(a),
            Record::Attachment(_) => {}
            r => self.state.apply(r),
        }
    }

    /// The payloads the program attached that the watch keeps: PyTorch's (`torch.*`).
    pub fn attachments(&self) -> &Attachments {
        &self.torch
    }

    /// Applies an event written to the trace.
    #[inline]
    pub fn apply_event(&mut self, event: &Event) {
        self.state.apply_event(event);
    }

    /// Samples taken so far: steps and time windows.
    fn samples(&self) -> (u64, u64) {
        (
            self.state.samples(SampleAxis::Steps).0,
            self.state.samples(SampleAxis::Time).0,
        )
    }

    /// Whether a judgement is due at `now_ns`: none ran for [`WatchConfig::every_ns`] (times
    /// the stride), and a sample was taken since the last one (at least a stride of steps, when
    /// the program marks them).
    pub fn due(&self, now_ns: u64) -> bool {
        match self.judged {
            None => self.state.events() > 0,
            Some((at, seen)) => {
                let now = self.samples();
                let steps = now.0.saturating_sub(seen.0);
                let enough = steps >= self.stride || (steps == 0 && now.1 != seen.1);
                let every = self.config.every_ns.saturating_mul(self.stride);
                now_ns.saturating_sub(at) >= every && now != seen && enough
            }
        }
    }

    /// Whether a sample was taken since the last judgement (or none ran yet): what the end of a
    /// run judges, whatever the interval and the stride, so that a judgement they put off is
    /// not lost.
    pub fn unjudged(&self) -> bool {
        match self.judged {
            None => self.state.events() > 0,
            Some((_, seen)) => self.samples() != seen,
        }
    }

    /// The growth settings with an absolute threshold turned into a share of the device memory
    /// known now.
    pub fn growth_config(&self) -> GrowthConfig {
        let mut c = self.config.growth;
        if let Some(bytes) = self.config.threshold_bytes {
            let memory = c.device_memory.or_else(|| {
                self.state
                    .device_accounts()
                    .map(|a| a.total)
                    .max()
                    .filter(|&t| t > 0)
            });
            let observed = || {
                self.state
                    .holders()
                    .iter()
                    .filter(|h| matches!(h.holder, Holder::Device { .. }))
                    .map(|h| h.peak.bytes)
                    .max()
            };
            c.alert_fraction = match memory.or_else(observed).filter(|&m| m > 0) {
                Some(m) => bytes as f64 / m as f64,
                None => f64::INFINITY,
            };
        }
        c
    }

    /// Stops following a pattern whose anchor has not recurred for [`PATTERN_QUIET_STEPS`] of its
    /// steps (and at least [`PATTERN_QUIET_NS`]): judged per step, a run whose steps stopped
    /// would go unjudged. Its steps are counted on; its samples are dropped.
    fn forget_stopped_pattern(&mut self) {
        let s = &self.state;
        if !s.follows_pattern() {
            return;
        }
        let last = s.step_times().map_or(self.followed.0, |t| t.1);
        let step = s.step_duration_ns().unwrap_or(self.followed.1);
        let quiet = PATTERN_QUIET_NS.max(PATTERN_QUIET_STEPS.saturating_mul(step));
        if s.latest_ns().saturating_sub(last) > quiet {
            self.steps_before += s.steps();
            self.looked_at = 0;
            self.state.forget_pattern();
        }
    }

    /// Judges growth now (`now_ns`: the clock [`Watch::due`] is asked with).
    pub fn judge(&mut self, now_ns: u64) -> Judgement {
        self.find_steps();
        self.judged = Some((now_ns, self.samples()));
        let config = self.growth_config();
        let g = growth(&self.state, &config);
        let unit_ns = g.window_ns.or(g.step_ns);
        let mut devices = Vec::new();
        let mut raised = Vec::new();
        for h in &g.holders {
            let Holder::Device { device } = h.holder else {
                continue;
            };
            let top = g
                .steady
                .iter()
                .find(|s| s.holder == h.holder && s.view == DRIVER)
                .cloned();
            let (alert, held) = match self.alert_of(h, &g, top.as_ref()) {
                Verdict::Alert(reason) => (Some(reason), None),
                Verdict::Held(held) => (None, Some(held)),
                Verdict::None => (None, None),
            };
            if alert.is_some() && !self.held_back(device, g.axis) && self.alerted.insert(device) {
                raised.push(device);
            }
            devices.push(DeviceVerdict {
                device,
                live_bytes: self
                    .state
                    .holders()
                    .iter()
                    .find(|s| s.holder == h.holder)
                    .map_or(0, |s| s.bytes),
                device_memory: self.memory_of(device, &g),
                steady_growth: h.steady_growth,
                threshold: h.threshold.unwrap_or(0.0),
                projection: h.projection,
                leak_suspect_bytes: g
                    .steady
                    .iter()
                    .filter(|s| s.holder == h.holder && s.view == DRIVER)
                    .map(|s| s.now_bytes)
                    .sum(),
                alert,
                held,
                top,
            });
        }
        Judgement {
            axis: g.axis,
            guessed: g.axis == SampleAxis::Steps && self.state.follows_pattern(),
            unit_ns,
            steps: self.steps(),
            devices,
            raised,
        }
    }

    /// Whether `device` raised an alert (and it was not withdrawn).
    pub fn alerted(&self, device: i32) -> bool {
        self.alerted.contains(&device)
    }

    /// Takes back the alert `device` raised: the program's own view showed it to be no leak (its
    /// tensors do not grow where the driver sees the caching allocator's segments grow). The
    /// device may alert again once the run has gone on twice as long, so that growth that
    /// lasts is looked at again, at most a few times in a run.
    pub fn withdraw(&mut self, device: i32) {
        self.alerted.remove(&device);
        self.withdrawn.insert(device, self.samples());
    }

    /// Whether `device`, withdrawn at some point, must wait longer before alerting again.
    fn held_back(&self, device: i32, axis: SampleAxis) -> bool {
        let Some(&(steps, windows)) = self.withdrawn.get(&device) else {
            return false;
        };
        let (now_steps, now_windows) = self.samples();
        match axis {
            SampleAxis::Steps => now_steps < 2 * steps,
            SampleAxis::Time => now_windows < 2 * windows,
        }
    }

    /// Device memory as the growth verdicts counted it (sampled or given; 0 when only the
    /// observed peak was known).
    fn memory_of(&self, device: i32, g: &Growth) -> u64 {
        if g.device_memory_source == "observed-peak" {
            return 0;
        }
        self.config.growth.device_memory.unwrap_or_else(|| {
            self.state
                .device_accounts()
                .find(|a| a.device == device)
                .map_or(0, |a| a.total)
        })
    }

    /// Whether holder `h` alerts: the verdict's own alert, confirmed by growth that has lasted
    /// and goes on at the latest sample.
    fn alert_of(&self, h: &HolderGrowth, g: &Growth, top: Option<&SiteGrowth>) -> Verdict {
        let Some((top, from)) = top
            .filter(|_| h.alert)
            .and_then(|t| Some((t, t.course.phases.growth_from?)))
        else {
            return Verdict::None;
        };
        // The latest sample, in the units the growth was judged in.
        let latest = self
            .state
            .holder_series(h.holder, g.axis)
            .last()
            .map_or(0, |p| match g.window_ns {
                Some(w) if w > 0 => p.0 / w,
                _ => p.0,
            });
        let lasted = latest.saturating_sub(from);
        if top.course.shape != Shape::Steady {
            return Verdict::None;
        }
        let windows = g.window_ns.is_some_and(|w| w > 0);
        // Per time window the device itself must grow: a place's staircase beside a burst
        // that leaves the device flat is not the device filling (on the H100, a CuPy loop of
        // 31 ms in a process of half a second: its leak one burst of 400 MiB, another line's
        // three rises of 256 KiB "steady").
        if windows && h.course.shape != Shape::Steady {
            return Verdict::None;
        }
        if lasted < self.config.confirm {
            // Per time window, growth shorter than the confirmation's windows is a program's
            // first milliseconds as much as a leak (a healthy run of 4 ms grows in 3 windows of
            // its 4): nothing to say of it. Steps, marked or of a pattern, are the loop's own.
            if windows {
                return Verdict::None;
            }
            return Verdict::Held(Held {
                lasted_ns: 0,
                wanted_ns: 0,
                pattern: false,
                samples: Some((lasted, self.config.confirm)),
            });
        }
        // Without marks: wall time too (per time window, or per step of a pattern).
        let timed = match g.window_ns.filter(|&w| w > 0) {
            Some(w) => Some((w, self.config.confirm_time_ns, false)),
            None if self.state.follows_pattern() => {
                Some((g.step_ns.unwrap_or(0), self.config.confirm_pattern_ns, true))
            }
            None => None,
        };
        if let Some((unit_ns, wanted_ns, pattern)) = timed {
            let lasted_ns = lasted.saturating_mul(unit_ns);
            if lasted_ns < wanted_ns {
                return Verdict::Held(Held {
                    lasted_ns,
                    wanted_ns,
                    pattern,
                    samples: None,
                });
            }
        }
        let above = h.threshold.is_some_and(|t| h.steady_growth > t);
        let out_of_memory = h
            .projection
            .is_some_and(|p| p.out_of_memory_at_step.is_some());
        Verdict::Alert(match (out_of_memory, above) {
            (true, _) => Reason::OutOfMemory,
            (false, true) => Reason::Growth,
            (false, false) => Reason::Horizon,
        })
    }

    /// The place of `site` in words, where the trace can tell without symbols: the program's
    /// Python line, `file:line in function`. `None` for a native call site.
    pub fn python_place(&self, site: &SiteName) -> Option<String> {
        let Place::Line { line, .. } = site.place else {
            return None;
        };
        let code = self.state.python_stacks().code(line.code)?;
        Some(site.on_its_path(line_label(&code.file, line.line, &code.function)))
    }

    /// The owner frame of `site` (the first frame outside the CUDA libraries), for naming a
    /// native site.
    pub fn owner_frame(&self, site: &SiteName) -> u64 {
        self.state.owners().resolve(site.caller, site.stack).frame
    }
}
