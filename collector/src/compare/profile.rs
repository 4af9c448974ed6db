//! One trace as the comparisons see it: totals, the device's live bytes at each step, and per
//! call site (named by [`SiteIdentity`]) what it holds at the end and held at the peak, how fast
//! it grows, what it allocated, its orphans and its failures.
//!
//! Everything but allocations and failures comes from the collector's per-site answers
//! ([`Analysis`]: leaks, peaks, steady growth, orphans), keyed by the live state's call sites
//! (native stacks); allocations and failures from a [`CallTally`]. Sites whose names agree
//! (two stacks that differ only inside the CUDA libraries) are added together.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::identity::{native_identity, parting_line, FrameId, PythonLine, SiteIdentity};
use super::lines::{line_metrics, live_by_call, unit_converter, Span};
use super::metrics::{median_u64, SiteMetrics};
use super::tally::{CallCounts, CallTally};
use crate::analysis::growth::{self, Growth};
use crate::analysis::site::one_place_per_line;
use crate::analysis::{Analysis, Headroom, LineMeaning, OwnerKind, Projection, Shape};
use crate::live::{Accounting, Holder, LiveState, ProgramLine, SampleAxis, SiteId, SiteKey};
use crate::python::{is_library_file, PythonFrame, PythonStacks};
use crate::symbols::{frames_label, Attribution, CallRef, FrameKind, StackFrame, Symbolizer};
use crate::units::base_name;

/// What growth is measured against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GrowthUnit {
    /// Bytes per training step (the trace has steps).
    Step,
    /// Bytes per second (no steps: growth was sampled in time windows).
    Second,
}

impl GrowthUnit {
    /// `step` or `second`.
    pub const fn name(self) -> &'static str {
        match self {
            GrowthUnit::Step => "step",
            GrowthUnit::Second => "second",
        }
    }
}

/// Where a trace's steps came from and how many there were.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StepFacts {
    /// `marks`, `pattern` or `none` (as in the report's analysis).
    pub source: &'static str,
    pub steps: u64,
    /// The unit of every growth figure of the trace.
    pub unit: GrowthUnit,
}

/// Adds a call's allocations and failures to a site's numbers.
fn add_calls(m: &mut SiteMetrics, c: &CallCounts) {
    m.allocations += c.allocations;
    m.allocated_bytes += c.allocated_bytes;
    m.failures += c.failures;
    m.out_of_memory += c.out_of_memory;
}

/// A trace's totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct RunTotals {
    /// The devices' numbers in all: objects and bytes live at the end (device, and pinned
    /// host), the devices' peaks added, sustained growth (their steadily growing places' rates,
    /// per unit), allocations, orphans and failures.
    #[serde(flatten)]
    pub metrics: SiteMetrics,
    /// Communicators not destroyed or aborted at the end, and the device bytes attributed to
    /// communicators (live or ended) at the end.
    pub communicators: u64,
    pub communicator_bytes: u64,
}

impl RunTotals {
    /// The totals of a trace read into `state`, with its `analysis` and `tally`.
    pub fn of(state: &LiveState, analysis: &Analysis, tally: &CallTally) -> Self {
        let g = &analysis.growth;
        let per_unit = unit_converter(g);
        let calls = tally.total();
        let summary = state.summary();
        // The driver's view measures the devices (another view's rows name lines).
        let steady =
            || (g.steady.iter()).filter(|s| is_device(s.holder) && s.view == growth::DRIVER);
        let mut metrics = SiteMetrics {
            live_count: analysis.leaks.device.count,
            live_bytes: analysis.leaks.device.bytes,
            host_bytes: analysis.leaks.host.bytes,
            peak_bytes: (analysis.peaks.holders.iter())
                .filter(|h| is_device(h.holder))
                .map(|h| h.peak.bytes)
                .sum(),
            growth: per_unit(steady().map(|s| s.course.rate).sum::<f64>() + 0.0),
            confident_growth: per_unit(
                steady()
                    .filter(|s| g.confident(&s.course))
                    .map(|s| s.course.rate)
                    .sum(),
            ),
            orphans: analysis.orphans.total.count,
            orphan_bytes: analysis.orphans.total.bytes,
            ..SiteMetrics::default()
        };
        add_calls(&mut metrics, &calls);
        metrics.failures = state.failures().total();
        metrics.out_of_memory = analysis.ooms.total;
        RunTotals {
            metrics,
            communicators: state.communicators().filter(|c| !c.state.is_gone()).count() as u64,
            communicator_bytes: summary.by_communicator.iter().map(|c| c.bytes).sum(),
        }
    }

    /// The median of each number over `all` (at least one).
    pub fn median(all: &[&RunTotals]) -> RunTotals {
        let metrics: Vec<SiteMetrics> = all.iter().map(|t| t.metrics).collect();
        RunTotals {
            metrics: SiteMetrics::median(&metrics),
            communicators: median_u64(all.iter().map(|t| t.communicators).collect()),
            communicator_bytes: median_u64(all.iter().map(|t| t.communicator_bytes).collect()),
        }
    }
}

/// One call site of a trace.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SiteProfile {
    #[serde(skip)]
    pub identity: SiteIdentity,
    /// The site in words: its Python line, else its native frame and the frame that called into
    /// that frame's module.
    pub label: String,
    /// The module that asked (first frame outside the CUDA libraries).
    pub module: Option<String>,
    /// The program's Python lines its calls came from (several when the site is a native stack
    /// reached from several lines).
    pub python_lines: Vec<PythonLine>,
    /// Whether some of those lines were inferred (the call's thread ran no Python).
    pub python_inferred: bool,
    /// Whether the site is one of several Python lines that reached one native stack: its peak
    /// and growth are then estimated from the objects it still holds (see `compare::lines`).
    pub shared_stack: bool,
    /// Whether its line kept the memory, or is where a framework's allocator asked the driver
    /// for memory (a segment: what keeps it may be another line).
    pub line_means: LineMeaning,
    /// The mixed stack of its largest call.
    #[serde(skip)]
    pub frames: Vec<StackFrame>,
    #[serde(flatten)]
    pub metrics: SiteMetrics,
}

/// Lines seen executing per `(file, function)`.
pub(crate) type ExecutedLines = BTreeMap<(String, String), BTreeSet<u32>>;

/// A Python code object the trace named.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct CodeFacts {
    pub file: String,
    pub function: String,
    pub first_line: u32,
}

/// One trace, ready to be compared.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    pub steps: StepFacts,
    pub totals: RunTotals,
    /// With steps: device bytes live at each sampled step boundary, `(step, bytes)`.
    pub step_series: Vec<(u64, u64)>,
    /// Call sites, most live device memory first.
    pub sites: Vec<SiteProfile>,
    /// Python code objects, sorted.
    pub codes: Vec<CodeFacts>,
    /// Lines seen executing per `(file, function)`, in any frame of a call's Python stack.
    pub executed: ExecutedLines,
    /// The program's main script: the file of the outermost Python frame most calls had.
    pub main_script: Option<String>,
    /// When its device would be full at a growth of its own (`None`: the device's size is not
    /// known, or the profile is a median).
    pub fill: Option<Fill>,
    /// Where its own findings trace a framework allocator's growing segments to the line whose
    /// tensors they hold (PyTorch's recorder): what a comparison without the other run's
    /// recorder can still name.
    pub kept_at: Vec<KeptAt>,
}

/// A place of the driver's view (a framework allocator's segments) and the line the run's
/// findings found keeping the tensors they hold, each as `(label, owner)`.
#[derive(Clone, Debug, PartialEq)]
pub struct KeptAt {
    pub segments: (String, Option<String>),
    pub line: (String, Option<String>),
}

/// The [`KeptAt`] pairs of `analysis`'s steady growth findings.
fn kept_at(analysis: &Analysis) -> Vec<KeptAt> {
    let named = |s: &crate::analysis::SiteName| Some((s.label.clone()?, s.module_name.clone()));
    (analysis.diagnosis.iter())
        .filter(|f| f.class == crate::analysis::FindingClass::SteadyGrowth)
        .filter_map(|f| Some((f, named(f.site.as_ref()?)?)))
        .flat_map(|(f, line)| {
            (f.related.iter())
                .filter(|r| r.role == crate::analysis::Role::Segments)
                .filter_map(move |r| {
                    Some(KeptAt {
                        segments: named(&r.site)?,
                        line: line.clone(),
                    })
                })
        })
        .collect()
}

/// When a trace's device would be full at a growth of its own, as the report's analysis projects
/// its devices' growth: from the bytes left on the device with the least at the end of its
/// steady state, against the same horizon.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fill {
    headroom: Headroom,
    unit: GrowthUnit,
    /// Units ([`GrowthUnit`]) per sample unit of the analysis: 1 per step, a window's seconds.
    per_sample: f64,
}

impl Fill {
    /// The fill of a trace's `growth`.
    pub fn of(growth: &Growth) -> Option<Fill> {
        let headroom = (growth.holders.iter())
            .filter(|h| is_device(h.holder))
            .filter_map(|h| growth.headroom(h.holder))
            .min_by_key(|h| h.room)?;
        Some(Fill {
            headroom,
            unit: growth_unit(growth),
            per_sample: match (growth.axis, growth.window_ns) {
                (SampleAxis::Time, Some(w)) => w as f64 / 1e9,
                _ => 1.0,
            },
        })
    }

    /// When the device is full at `rate` more bytes per `unit`; `None` in another unit.
    pub fn at(&self, rate: f64, unit: GrowthUnit) -> Option<Projection> {
        (unit == self.unit).then(|| self.headroom.project(rate * self.per_sample))
    }
}

fn is_device(h: Holder) -> bool {
    matches!(h, Holder::Device { .. })
}

/// The growth unit of an analysis.
pub fn growth_unit(g: &Growth) -> GrowthUnit {
    match g.axis {
        SampleAxis::Steps => GrowthUnit::Step,
        SampleAxis::Time => GrowthUnit::Second,
    }
}

/// A site's numbers and calls, before naming.
#[derive(Default)]
struct Gathered {
    metrics: SiteMetrics,
    caller: u64,
    /// The entry point of a call there that made what the live state keeps.
    api: Option<&'static str>,
    calls: Vec<(CallRef, CallCounts)>,
    /// The live state's own peak and growth numbers per Python line and path of the site (it
    /// keeps its series per native site and program line), for a site split by line.
    lines: BTreeMap<ProgramLine, SiteMetrics>,
}

impl Profile {
    /// The profile of a trace read into `state`, with its `analysis` and the `tally` of its
    /// calls; `symbols` names the native frames.
    pub fn build(
        state: &LiveState,
        analysis: &Analysis,
        tally: &CallTally,
        symbols: &mut Symbolizer,
    ) -> Profile {
        let unit = growth_unit(&analysis.growth);
        let steps = StepFacts {
            source: analysis.steps.source,
            steps: analysis.steps.steps,
            unit,
        };
        let gathered = gather(state, analysis, tally);
        let live = live_by_call(state, analysis);
        let span = Span::of(state, analysis);
        let python = state.python_stacks();
        let mut naming = Attribution::of_state(state, symbols);
        let mut by_identity: BTreeMap<SiteIdentity, (SiteProfile, u64)> = BTreeMap::new();
        for (key, g) in gathered {
            let lines = by_line(python, &g.calls);
            let shared = lines.len() > 1;
            let site = |line: &OnPath, calls, metrics| Site {
                key,
                caller: g.caller,
                api: g.api,
                line: line.line.clone(),
                path: line.path.clone(),
                calls,
                metrics,
                shared,
            };
            let sites: Vec<Site<'_>> = if shared {
                (lines.iter())
                    .map(|(line, calls)| {
                        let mut m = line_metrics(calls, &live, span, &analysis.growth);
                        ledger_numbers(&mut m, python, &g.lines, calls);
                        site(line, calls, m)
                    })
                    .collect()
            } else {
                let line = lines.keys().next().cloned().unwrap_or_default();
                vec![site(&line, &g.calls, g.metrics)]
            };
            for s in &sites {
                add_site(&mut by_identity, name_site(&mut naming, python, s));
            }
        }
        let sites: Vec<SiteProfile> = by_identity.into_values().map(|(s, _)| s).collect();
        let mut sites = one_site_where_every_path_grows(named_by_path(sites));
        sort_sites(&mut sites);
        let (executed, main_script) = python_facts(python, tally);
        let mut codes: Vec<CodeFacts> = python
            .codes()
            .map(|c| CodeFacts {
                file: c.file.clone(),
                function: c.function.clone(),
                first_line: c.first_line,
            })
            .collect();
        codes.sort();
        Profile {
            steps,
            totals: RunTotals::of(state, analysis, tally),
            step_series: match unit {
                GrowthUnit::Step => step_series(state),
                GrowthUnit::Second => Vec::new(),
            },
            sites,
            codes,
            executed,
            main_script,
            fill: Fill::of(&analysis.growth),
            kept_at: kept_at(analysis),
        }
    }
}

/// The numbers of every native call site the state or the tally names. The analyses merge call
/// sites into places (a Python line's native paths together); runs are compared site by site,
/// so the numbers are taken per native site here, from the state itself, with the analyses'
/// rules: what a lost event may have freed is not live, growth is judged on each site's series.
fn gather(
    state: &LiveState,
    analysis: &Analysis,
    tally: &CallTally,
) -> BTreeMap<SiteKey, Gathered> {
    let per_unit = unit_converter(&analysis.growth);
    let mut sites: BTreeMap<SiteKey, Gathered> = BTreeMap::new();
    fn at(sites: &mut BTreeMap<SiteKey, Gathered>, caller: u64, stack: u32) -> &mut Gathered {
        let g = sites
            .entry(SiteKey::of(caller, stack, ProgramLine::NONE))
            .or_default();
        if g.caller == 0 {
            g.caller = caller;
        }
        g
    }
    let native = |id: SiteId| state.site(id).map(|(key, caller)| (caller, key.stack));
    let line = |id: SiteId| {
        state
            .site(id)
            .map_or(ProgramLine::NONE, |(key, _)| key.line)
    };
    for o in state.live_objects() {
        if state.lost_after(o.origin.seq) {
            continue;
        }
        let Some((caller, stack)) = native(o.origin.site) else {
            continue;
        };
        let m = &mut at(&mut sites, caller, stack).metrics;
        m.live_count += 1;
        match o.category.accounting() {
            Accounting::Device => m.live_bytes += o.bytes,
            Accounting::Host => m.host_bytes += o.bytes,
            Accounting::VirtualAddress | Accounting::None => {}
        }
        if o.flags.is_orphan() {
            m.orphans += 1;
        }
    }
    for o in &analysis.orphans.objects {
        at(&mut sites, o.site.caller, o.site.stack)
            .metrics
            .orphan_bytes += o.device_bytes;
    }
    for h in state.holders().iter().filter(|h| is_device(h.holder)) {
        for s in state.peak_holdings(h.holder) {
            if let Some((caller, stack)) = native(s.site) {
                let g = at(&mut sites, caller, stack);
                g.metrics.peak_bytes += s.bytes;
                g.lines.entry(line(s.site)).or_default().peak_bytes += s.bytes;
            }
        }
    }
    let g = &analysis.growth;
    let mut kept = growth::kept_objects(state, g.axis);
    for (site, holder, points) in state.site_series(g.axis).filter(|s| is_device(s.1)) {
        let Some((caller, stack)) = native(site) else {
            continue;
        };
        let gathered = at(&mut sites, caller, stack);
        gathered.api = gathered
            .api
            .or_else(|| state.site_api(site).map(|a| a.name()));
        let course = g.judge_with_kept(holder, points, kept.remove(&(holder, site)));
        if course.shape == Shape::Steady {
            let rate = per_unit(course.rate);
            let confident = g.confident(&course);
            let by_line = gathered.lines.entry(line(site)).or_default();
            for m in [&mut gathered.metrics, by_line] {
                m.growth += rate;
                if confident {
                    m.confident_growth += rate;
                }
            }
        }
    }
    for (call, counts) in tally.iter() {
        let g = sites
            .entry(SiteKey::of(call.caller, call.stack, ProgramLine::NONE))
            .or_default();
        if g.caller == 0 {
            g.caller = call.caller;
        }
        add_calls(&mut g.metrics, counts);
        g.calls.push((*call, *counts));
    }
    for g in sites.values_mut() {
        g.calls.sort_by_key(|(call, _)| *call);
    }
    sites
}

/// Puts the live state's own peak and growth of Python line `line` of a site (`lines`, per
/// program line) in `m`, in place of what its objects live at the end suggest: a leak that the
/// program's exit (or a `destroy_process_group` at its end) frees holds nothing at the end, and
/// grew all the same.
fn ledger_numbers(
    m: &mut SiteMetrics,
    python: &PythonStacks,
    lines: &BTreeMap<ProgramLine, SiteMetrics>,
    calls: &[(CallRef, CallCounts)],
) {
    let mine: BTreeSet<ProgramLine> = (calls.iter())
        .map(|(call, _)| ProgramLine::of(python, call.py_stack))
        .collect();
    let mut own = SiteMetrics::default();
    let mut seen = false;
    for (pl, numbers) in lines {
        if mine.contains(pl) {
            own.peak_bytes += numbers.peak_bytes;
            own.growth += numbers.growth;
            own.confident_growth += numbers.confident_growth;
            seen = true;
        }
    }
    if seen {
        m.peak_bytes = own.peak_bytes;
        m.growth = own.growth;
        m.confident_growth = own.confident_growth;
    }
}

/// The program frame of a Python stack as a [`PythonLine`].
fn program_line(python: &PythonStacks, py_stack: u32) -> Option<PythonLine> {
    python
        .program_frame(py_stack)
        .as_ref()
        .map(python_frame_line)
}

/// A frame of a Python stack as a [`PythonLine`].
fn python_frame_line(f: &PythonFrame<'_>) -> PythonLine {
    PythonLine {
        file: f.file.unwrap_or("<unknown>").to_string(),
        function: f
            .function
            .map_or_else(|| format!("<code {}>", f.code), str::to_string),
        line: f.line,
    }
}

/// One site to name: a native site, or one Python line (on one path) of it.
struct Site<'a> {
    key: SiteKey,
    caller: u64,
    api: Option<&'static str>,
    /// Its Python line, when it has one of its own.
    line: Option<PythonLine>,
    /// The program's lines that called it ([`SiteIdentity::path`]).
    path: Vec<PythonLine>,
    calls: &'a [(CallRef, CallCounts)],
    metrics: SiteMetrics,
    shared: bool,
}

/// A Python line on one path of the program to it.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
struct OnPath {
    line: Option<PythonLine>,
    path: Vec<PythonLine>,
}

/// The Python line a call counts under, and its path: its program line, also when it was
/// inferred from another thread (PyTorch's allocator asks the driver from autograd's thread),
/// as the analysis counts it, so a diff names a site by the place the report names it by.
fn line_of(python: &PythonStacks, call: &CallRef) -> OnPath {
    let line = program_line(python, call.py_stack);
    let path = match line {
        Some(_) => (python.program_callers(call.py_stack).iter())
            .map(python_frame_line)
            .collect(),
        None => Vec::new(),
    };
    OnPath { line, path }
}

/// The calls of a site by the Python line and path they count under.
fn by_line(
    python: &PythonStacks,
    calls: &[(CallRef, CallCounts)],
) -> BTreeMap<OnPath, Vec<(CallRef, CallCounts)>> {
    let mut lines: BTreeMap<OnPath, Vec<(CallRef, CallCounts)>> = BTreeMap::new();
    for (call, counts) in calls {
        lines
            .entry(line_of(python, call))
            .or_default()
            .push((*call, *counts));
    }
    lines
}

/// Where a line is reached on several paths, each of its sites is named with the first line
/// of its path that the others do not share (`helper.py:7 in make via train.py:14 in
/// <module>`), as the report names its places ([`crate::analysis::SiteName::on_its_path`]).
fn named_by_path(mut sites: Vec<SiteProfile>) -> Vec<SiteProfile> {
    let mut paths: BTreeMap<&PythonLine, BTreeSet<&[PythonLine]>> = BTreeMap::new();
    for s in &sites {
        if let Some(line) = &s.identity.python {
            paths.entry(line).or_default().insert(&s.identity.path);
        }
    }
    let vias: Vec<Option<PythonLine>> = (sites.iter())
        .map(|s| {
            let all = paths.get(s.identity.python.as_ref()?)?;
            parting_line(&s.identity.path, all).cloned()
        })
        .collect();
    for (s, via) in sites.iter_mut().zip(vias) {
        if let (Some(line), Some(via)) = (&s.identity.python, via) {
            s.label = format!("{line} via {via}");
        }
    }
    sites
}

/// A line that grows on two of its paths or more keeps what it makes itself (a helper that
/// caches what it returns): its paths are one site again, named by the line alone, their
/// numbers added, as the report makes them one place ([`one_place_per_line`]).
fn one_site_where_every_path_grows(sites: Vec<SiteProfile>) -> Vec<SiteProfile> {
    let whole = one_place_per_line(sites.iter().map(|s| {
        let id = &s.identity;
        let line = (id.python.clone()).map(|python| (python, id.native.clone()));
        (line, s.metrics.growth > 0.0)
    }));
    if whole.is_empty() {
        return sites;
    }
    without_paths(sites, &whole)
}

/// `sites` with the paths of those at `whole` (indexes) dropped: each is its line alone, named
/// so, one site with the others of its line that lost theirs, their numbers added.
fn without_paths(sites: Vec<SiteProfile>, whole: &BTreeSet<usize>) -> Vec<SiteProfile> {
    let mut by_identity: BTreeMap<SiteIdentity, (SiteProfile, u64)> = BTreeMap::new();
    for (i, mut s) in sites.into_iter().enumerate() {
        if whole.contains(&i) {
            s.identity.path.clear();
            s.label = s
                .identity
                .python
                .as_ref()
                .map_or(s.label, |l| l.to_string());
        }
        add_site(&mut by_identity, s);
    }
    by_identity.into_values().map(|(s, _)| s).collect()
}

/// Most live device memory first (then host memory), ties by identity.
fn sort_sites(sites: &mut [SiteProfile]) {
    sites.sort_by(|a, b| {
        (b.metrics.live_bytes, b.metrics.host_bytes)
            .cmp(&(a.metrics.live_bytes, a.metrics.host_bytes))
            .then_with(|| a.identity.cmp(&b.identity))
    });
}

/// Adds a named site, or its numbers to the site of the same identity.
fn add_site(by_identity: &mut BTreeMap<SiteIdentity, (SiteProfile, u64)>, named: SiteProfile) {
    let m = &named.metrics;
    let size = m.live_bytes + m.host_bytes + m.allocated_bytes;
    match by_identity.get_mut(&named.identity) {
        Some((site, largest)) => {
            site.metrics.add(&named.metrics);
            for line in named.python_lines {
                if !site.python_lines.contains(&line) {
                    site.python_lines.push(line);
                }
            }
            site.python_lines.sort();
            site.python_inferred |= named.python_inferred;
            site.shared_stack |= named.shared_stack;
            if size > *largest {
                site.frames = named.frames;
                site.line_means = named.line_means;
                *largest = size;
            }
        }
        None => {
            by_identity.insert(named.identity.clone(), (named, size));
        }
    }
}

/// Names one site: its identity, label and stack.
fn name_site(naming: &mut Attribution<'_>, python: &PythonStacks, site: &Site<'_>) -> SiteProfile {
    let mut lines: BTreeSet<PythonLine> = BTreeSet::new();
    let mut inferred = false;
    let (mut example_py, mut example_size) = (0, 0);
    for (call, c) in site.calls {
        inferred |= c.inferred_python > 0;
        if let Some(l) = program_line(python, call.py_stack) {
            lines.insert(l);
        }
        let size = c.allocated_bytes.max(1);
        if call.py_stack != 0 && size > example_size {
            example_py = call.py_stack;
            example_size = size;
        }
    }
    let native_call = CallRef {
        caller: site.caller,
        stack: site.key.stack,
        py_stack: 0,
    };
    let native_frames = naming.stack(native_call);
    let native = native_identity(&native_frames);
    let frames = naming.stack(CallRef {
        py_stack: example_py,
        ..native_call
    });
    let module = native_frames
        .iter()
        .find(|f| f.kind == FrameKind::Native && !f.in_cuda_library())
        .and_then(|f| f.module.clone());
    let label = match &site.line {
        Some(p) => p.to_string(),
        None => native_label(&native_frames),
    };
    SiteProfile {
        identity: SiteIdentity {
            python: site.line.clone(),
            path: site.path.clone(),
            native,
        },
        label,
        python_lines: lines.into_iter().collect(),
        python_inferred: inferred,
        shared_stack: site.shared,
        line_means: if module
            .as_deref()
            .is_some_and(|m| OwnerKind::of_module(m).makes_pools(site.api))
        {
            LineMeaning::Asked
        } else {
            LineMeaning::Keeps
        },
        module,
        frames,
        metrics: site.metrics,
    }
}

/// A native site in words, as every output names it ([`frames_label`]); its frame's
/// `module+offset` when symbols name nothing.
pub(crate) fn native_label(frames: &[StackFrame]) -> String {
    frames_label(frames).unwrap_or_else(|| {
        frames
            .iter()
            .find(|f| f.kind == FrameKind::Native && !f.in_cuda_library())
            .map_or("(no stack)".to_string(), |f| FrameId::of(f).to_string())
    })
}

/// Lines executed per code object, and the main script: the one most stacks run.
/// The program's main script: the file of the outermost Python frame of its own most calls
/// had (a launcher's `runpy` frames further out are not it); `None` without Python stacks.
pub fn main_script(python: &PythonStacks, tally: &CallTally) -> Option<String> {
    python_facts(python, tally).1
}

fn python_facts(python: &PythonStacks, tally: &CallTally) -> (ExecutedLines, Option<String>) {
    let mut executed = ExecutedLines::new();
    let mut runs: BTreeMap<String, u64> = BTreeMap::new();
    let stacks: BTreeSet<u32> = tally
        .iter()
        .map(|(c, _)| c.py_stack)
        .filter(|&s| s != 0)
        .collect();
    for id in stacks {
        // Frames come innermost first. The script a stack runs is its innermost module-level
        // frame of the program's own: a launcher that runs it by `runpy` (`python wrap.py
        // train.py`, `python -m`) has its own `<module>` frame further out. Without one (the
        // code runs in a function, as `mp.spawn` runs it), the outermost frame of the program's.
        let (mut module, mut own, mut last) = (None, None, None);
        for f in python.frames(id) {
            let (Some(file), Some(function)) = (f.file, f.function) else {
                continue;
            };
            executed
                .entry((file.to_string(), function.to_string()))
                .or_default()
                .insert(f.line);
            if !is_library_file(file) {
                if function == "<module>" && module.is_none() {
                    module = Some(file);
                }
                own = Some(file);
            }
            last = Some(file);
        }
        if let Some(file) = module.or(own).or(last) {
            *runs.entry(file.to_string()).or_default() += 1;
        }
    }
    let main = runs
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|(f, _)| f);
    (executed, main)
}

/// Device bytes live at each sampled step boundary, devices added.
fn step_series(state: &LiveState) -> Vec<(u64, u64)> {
    let mut by_step: BTreeMap<u64, u64> = BTreeMap::new();
    for h in state.holders().into_iter().filter(|h| is_device(h.holder)) {
        for (step, bytes) in state.holder_series(h.holder, SampleAxis::Steps) {
            *by_step.entry(step).or_default() += bytes;
        }
    }
    by_step.into_iter().collect()
}

impl Profile {
    /// The site named `label` (tests and tools look sites up by what they print).
    pub fn site(&self, label: &str) -> Option<&SiteProfile> {
        self.sites.iter().find(|s| s.label == label)
    }

    /// The base name of the main script, when the program is Python.
    pub fn main_script_name(&self) -> Option<&str> {
        self.main_script.as_deref().map(base_name)
    }

    /// This profile with the paths of the sites at `whole` (indexes) dropped, each made one
    /// site with the others of its line that lost theirs (`Matching::whole_lines`); itself
    /// when there are none.
    pub(crate) fn without_paths(&self, whole: &BTreeSet<usize>) -> Cow<'_, Profile> {
        if whole.is_empty() {
            return Cow::Borrowed(self);
        }
        let mut sites = without_paths(self.sites.clone(), whole);
        sort_sites(&mut sites);
        Cow::Owned(Profile {
            sites,
            ..self.clone()
        })
    }
}
