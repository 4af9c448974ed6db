//! The answers to the questions users bring, each a function of the live-allocation state with a
//! typed, serializable result: is it a leak or a peak ([`leaks`](leaks()),
//! [`growth`](growth()), [`peak`]), who holds the memory ([`orphans`](orphans()), [`peak`]), why
//! did it run out ([`oom`]), is memory free but unusable ([`fragmentation`](fragmentation())),
//! and did the trace see impossible things ([`anomalies`](anomalies())).
//!
//! The state must have been built by replaying a trace (or in-process, event by event) with
//! [`crate::live::LiveState::apply`]; every analysis reads it as of the last event applied, so
//! the same functions answer at the end of a trace and at any point a replay stops.

pub mod anomalies;
pub mod fit;
pub mod fragmentation;
pub mod growth;
pub mod leaks;
pub mod oom;
pub mod orphans;
pub mod peak;
pub mod site;

use serde::Serialize;

pub use anomalies::{anomalies, AnomalyReport};
pub use fit::Fit;
pub use fragmentation::{fragmentation, Fragmentation};
pub use growth::{growth, Growth, GrowthConfig, Shape};
pub use leaks::{leaks, Leaks};
pub use oom::{ooms, OomReport};
pub use orphans::{orphans, OrphanKind, Orphans};
pub use peak::{peaks, Peaks};
pub use site::{SiteAmount, SiteName};

use crate::live::{LiveState, StepPattern, StepSource};

/// Where the steps of a replay came from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepInfo {
    /// `marks` (the program's step marks), `pattern` (a repeating allocation, see `pattern`), or
    /// `none` (growth is then sampled per time window).
    pub source: &'static str,
    /// Steps begun.
    pub steps: u64,
    /// Step marks in the trace.
    pub marks: u64,
    /// The repeating allocation used as step boundary (source `pattern`), or found in a trace
    /// without marks that was replayed without it.
    pub pattern: Option<StepPattern>,
}

/// The steps of a replay.
pub fn step_info(state: &LiveState) -> StepInfo {
    let pattern = state.step_pattern();
    let source = match state.step_source() {
        StepSource::Allocation { .. } => "pattern",
        StepSource::Marks if state.marks() > 0 => "marks",
        StepSource::Marks => "none",
    };
    StepInfo {
        source,
        steps: state.steps(),
        marks: state.marks(),
        pattern,
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
}

impl Analysis {
    /// Every call site named anywhere in the answers, to label them (each list in turn; a site
    /// named in several lists comes once per list).
    pub fn sites_mut(&mut self) -> impl Iterator<Item = &mut SiteName> {
        let g = &mut self.growth;
        let growth = g
            .steady
            .iter_mut()
            .chain(g.peaks.iter_mut())
            .chain(g.shrinking.iter_mut())
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
        growth.chain(leaks).chain(orphans).chain(peaks).chain(ooms)
    }
}

/// Runs every analysis on `state`.
pub fn analyze(state: &LiveState, config: &GrowthConfig) -> Analysis {
    Analysis {
        steps: step_info(state),
        orphans: orphans(state),
        growth: growth(state, config),
        leaks: leaks(state),
        peaks: peaks(state),
        ooms: ooms(state, config),
        fragmentation: fragmentation(state),
        anomalies: anomalies(state),
    }
}
