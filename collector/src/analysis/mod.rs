//! The answers to the questions users bring, each a function of the live-allocation state with a
//! typed, serializable result: is it a leak or a peak ([`leaks`](leaks()),
//! [`growth`](growth()), [`peak`]), who holds the memory ([`orphans`](orphans()), [`peak`]), why
//! did it run out ([`oom`]), is memory free but unusable ([`fragmentation`](fragmentation())),
//! and did the trace see impossible things ([`anomalies`](anomalies())); then the diagnosis
//! ([`diagnose`](diagnose())): one finding per cause ([`causes`]), worded for the framework that
//! made the memory ([`advice`], [`owner`]).
//!
//! The state must have been built by replaying a trace (or in-process, event by event) with
//! [`crate::live::LiveState::apply`]; every analysis reads it as of the last event applied, so
//! the same functions answer at the end of a trace and at any point a replay stops.

mod advice;
pub(crate) mod causes;
pub(crate) mod course;
mod diagnose;
pub(crate) mod finding;
pub(crate) mod fit;
pub(crate) mod fragmentation;
pub(crate) mod growth;
pub(crate) mod integrity;
pub(crate) mod leaks;
pub(crate) mod oom;
pub(crate) mod orphans;
pub(crate) mod owner;
pub(crate) mod peak;
pub(crate) mod site;
pub(crate) mod watch;

use serde::Serialize;

pub use course::GrowthConfig;
pub use course::{Phases, Shape};
pub(crate) use diagnose::{diagnose, row_findings};
pub use finding::{Finding, FindingClass, LineMeaning, Related, Severity};
pub use fragmentation::fragmentation;
pub(crate) use fragmentation::Fragmentation;
pub use fragmentation::{AddressSpace, CacheUse, OomRelief, PhysicalMemory, ReservationUse};
pub(crate) use growth::FindingRef;
pub use growth::{growth, growth_with, Growth, LineSeries, Role};
#[cfg(feature = "symbols")]
pub(crate) use growth::{Headroom, Projection};
pub use growth::{HolderGrowth, LostFrees, SiteGrowth, DRIVER};
pub use integrity::anomalies;
pub(crate) use integrity::AnomalyReport;
pub use leaks::{leaks, LeakSite, Leaks};
pub(crate) use oom::OomReport;
pub use oom::{ooms, OomFailure};
pub use orphans::Orphan;
pub use orphans::{orphans, OrphanKind, Orphans};
pub use owner::is_library_module;
pub use owner::OwnerKind;
pub use peak::peaks;
pub(crate) use peak::Peaks;
pub use site::{name as site_name, short_function};
pub use site::{SiteName, SourceLine};
pub use watch::{Judgement, Reason, Watch, WatchConfig};

use crate::live::{LiveState, StepPattern, StepSource};

/// Where the steps of a replay came from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepInfo {
    /// `marks` (the program's step marks: `vramtrace_mark_step`, the Python bootstrap's
    /// optimizer hook, an NVTX step range), `iterations` (a loop without an optimizer: each
    /// outermost model call, marked by the Python bootstrap), `pattern` (the period of the
    /// allocation pattern, see `pattern`), or `none` (growth is then sampled per time window).
    pub source: &'static str,
    /// Steps begun.
    pub steps: u64,
    /// Step marks in the trace.
    pub marks: u64,
    /// Mean nanoseconds between step boundaries (with at least two).
    pub step_ns: Option<u64>,
    /// The pattern the steps came from (source `pattern`), or the one found in a trace without
    /// marks that was replayed without it.
    pub pattern: Option<StepPattern>,
    /// The call site of the pattern's anchor, when it is an allocation or a free.
    pub anchor_site: Option<SiteName>,
    /// When the replay started from a segment's snapshot (rotation deleted the segments before
    /// it, or `--last`/`--since` read from there): the steps begun before it. Series start
    /// there: a growth under way then may have begun earlier.
    pub from_step: Option<u64>,
}

/// An alert the tracer raised while the program ran, with the call site it named (when it named
/// one of the trace's: an alert named by PyTorch's tensors names a line only), so that reports
/// label it as they label every other place.
#[derive(Clone, Debug, Serialize)]
pub struct RaisedAlert {
    #[serde(flatten)]
    pub alert: crate::format::Alert,
    pub site: Option<SiteName>,
    /// The live set at the end shows that the growth at the alert's place stopped: its objects
    /// were made over many steps ([`LeakSite::grew_for_long`]) and none in the steps since,
    /// which are at least four times as many as the growth took between two of its steps and
    /// at least [`leaks::MANY_STEPS`]. Read from a segment's snapshot, the steps before it are
    /// not on disk, but the objects still live say when they were made. Never where memory ran
    /// out: growth that refusals ended did not stop.
    pub growth_stopped: bool,
}

impl RaisedAlert {
    fn of(state: &LiveState, alert: &crate::format::Alert, leaks: &Leaks) -> Self {
        let id = (alert.stack != 0 || alert.caller != 0)
            .then(|| state.site_of_call(alert.caller, alert.stack, alert.py_stack))
            .flatten();
        let site = id.map(|id| site::name(state, id));
        // Growth that out-of-memory refusals ended did not stop: it could not go on.
        let refused = state.ooms().total() > 0;
        let growth_stopped = !refused
            && site.as_ref().is_some_and(|s| {
                (leaks.sites.iter())
                    .find(|l| l.site.place == s.place)
                    .is_some_and(|l| l.stopped_by(state.steps()))
            });
        RaisedAlert {
            alert: alert.clone(),
            site,
            growth_stopped,
        }
    }
}

/// The steps of a replay.
pub fn step_info(state: &LiveState) -> StepInfo {
    let pattern = state.step_pattern();
    let source = match state.step_source() {
        StepSource::Pattern(_) => "pattern",
        _ if state.marks() > 0 => "marks",
        _ if state.iteration_steps() > 0 => "iterations",
        _ => "none",
    };
    let anchor_site = pattern
        .as_ref()
        .and_then(|p| p.anchor.site)
        .map(|id| site::name(state, id));
    StepInfo {
        source,
        steps: state.steps(),
        marks: state.marks(),
        step_ns: state.step_duration_ns(),
        pattern,
        anchor_site,
        from_step: state.restored().map(|r| r.steps),
    }
}

/// Every analysis, in the order a user should read them: what is orphaned and what grows first.
#[derive(Clone, Debug, Serialize)]
pub struct Analysis {
    pub steps: StepInfo,
    pub orphans: Orphans,
    pub growth: Growth,
    pub leaks: Leaks,
    pub peaks: Peaks,
    pub ooms: OomReport,
    pub fragmentation: Fragmentation,
    pub anomalies: AnomalyReport,
    /// Every finding classed, with its likely cause, the usual fix and its evidence, most
    /// urgent first.
    pub diagnosis: Vec<Finding>,
    /// The alerts the tracer raised while the program ran (`VRAMTRACE_ALERT_*`), in the order
    /// raised; absent from the JSON when there were none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub alerts: Vec<RaisedAlert>,
}

impl Analysis {
    /// Every call site named anywhere in the answers, to label them (each list in turn; a site
    /// named in several lists comes once per list). Only the symbol reader labels sites.
    #[cfg(feature = "symbols")]
    pub(crate) fn sites_mut(&mut self) -> impl Iterator<Item = &mut SiteName> {
        let g = &mut self.growth;
        let growth = g
            .steady
            .iter_mut()
            .chain(g.peaks.iter_mut())
            .chain(g.shrinking.iter_mut())
            .chain(g.one_off_rises.iter_mut())
            .chain(g.lost_frees.iter_mut().map(|l| &mut l.growth))
            .map(|s| &mut s.site);
        let leaks = self.leaks.sites.iter_mut().map(|s| &mut s.site);
        let orphans = self.orphans.objects.iter_mut().map(|o| &mut o.site);
        let peaks = self
            .peaks
            .holders
            .iter_mut()
            .flat_map(|h| h.by_site.iter_mut().map(|s| &mut s.site));
        let ooms = self.ooms.failures.iter_mut().flat_map(|f| {
            std::iter::once(&mut f.requester)
                .chain(f.by_site.iter_mut().map(|s| &mut s.site))
                .chain(f.growth_by_site.iter_mut().map(|s| &mut s.site))
        });
        let steps = self.steps.anchor_site.iter_mut();
        let alerts = self.alerts.iter_mut().filter_map(|a| a.site.as_mut());
        let diagnosis = self.diagnosis.iter_mut().flat_map(|f| {
            f.site
                .as_mut()
                .into_iter()
                .chain(f.related.iter_mut().map(|r| &mut r.site))
        });
        growth
            .chain(leaks)
            .chain(orphans)
            .chain(peaks)
            .chain(ooms)
            .chain(steps)
            .chain(alerts)
            .chain(diagnosis)
    }
}

/// What a trace holds of the program's framework beside the driver's view of memory.
#[derive(Clone, Debug, Default)]
pub struct Framework {
    /// Per-line series of another view of memory (PyTorch's recorder: tensor bytes per Python
    /// line at each step), judged for growth beside the driver's.
    pub lines: Vec<LineSeries>,
    /// PyTorch's allocator backend (`native`, `cudaMallocAsync`), when the trace says.
    pub torch_backend: Option<String>,
    /// PyTorch's caching allocator's memory per device, from its own view (its last snapshot).
    pub cache: Vec<fragmentation::CacheUse>,
    /// At its first out-of-memory error: whether freeing its cache would have served it.
    pub oom_relief: Option<fragmentation::OomRelief>,
}

/// Runs every analysis on `state`.
pub fn analyze(state: &LiveState, config: &GrowthConfig) -> Analysis {
    analyze_with(state, config, Framework::default())
}

/// Runs every analysis on `state`, with what the trace holds of the program's framework: its
/// own view of memory judged for growth beside the driver's, and its allocator's settings.
pub fn analyze_with(state: &LiveState, config: &GrowthConfig, framework: Framework) -> Analysis {
    let Framework {
        lines,
        torch_backend,
        cache,
        oom_relief,
    } = framework;
    let mut growth = growth_with(state, config, lines);
    let framework = Framework {
        lines: Vec::new(),
        torch_backend,
        cache,
        oom_relief,
    };
    let leaks = leaks(state);
    let orphans = orphans(state);
    let peaks = peaks(state);
    let mut fragmentation = fragmentation(state);
    fragmentation.allocator = framework.cache.clone();
    fragmentation.oom_relief = framework.oom_relief;
    let ooms = ooms(state, config);
    let device_peak = peaks.highest_device().map(|p| p.peak.bytes);
    let alerts: Vec<RaisedAlert> = (state.alerts().iter())
        .map(|a| RaisedAlert::of(state, a, &leaks))
        .collect();
    let steps = step_info(state);
    let diagnosis = diagnose(
        &growth,
        &leaks,
        &orphans,
        &fragmentation,
        &ooms,
        device_peak,
        state.end().is_some(),
        &framework,
        (&alerts, steps.from_step),
    );
    let found = row_findings(&growth, &diagnosis);
    for (row, found) in growth.steady.iter_mut().zip(found) {
        row.finding = found.map(|(number, role)| FindingRef { number, role });
    }
    // Listed as the findings are, each cause's row before the rows that back it (the segments
    // it grew), then the rows of no finding, fastest first: every output's table reads in the
    // diagnosis' order.
    growth.steady.sort_by_key(|row| match row.finding {
        Some(f) => (0, f.number, f.role != Role::Cause),
        None => (1, 0, false),
    });
    Analysis {
        steps,
        orphans,
        growth,
        leaks,
        peaks,
        ooms,
        fragmentation,
        anomalies: anomalies(state),
        diagnosis,
        alerts,
    }
}
