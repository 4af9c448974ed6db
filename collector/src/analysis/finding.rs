//! What a diagnosis is made of: each finding classed (steady growth, orphan, fragmentation, peak,
//! teardown-only), how urgent it is, the likely cause and the usual fix, the numbers it rests on,
//! and for a steady growth the other views of memory that saw the same cause.

use serde::Serialize;

use super::growth::Role;
use super::site::SiteName;
use crate::live::{Holder, SampleAxis};

/// What kind of finding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingClass {
    /// Memory that grows every step (or every few) and goes on growing: a leak.
    SteadyGrowth,
    /// Live, but its owner is gone.
    Orphan,
    /// Memory allocated but unusable.
    Fragmentation,
    /// A one-off rise that fell back: a large temporary.
    Peak,
    /// Held until the end and flat during training: released by the process's exit.
    TeardownOnly,
}

impl FindingClass {
    /// Short name used in reports (the same as its JSON spelling).
    pub const fn name(self) -> &'static str {
        match self {
            FindingClass::SteadyGrowth => "steady growth",
            FindingClass::Orphan => "orphan",
            FindingClass::Fragmentation => "fragmentation",
            FindingClass::Peak => "peak",
            FindingClass::TeardownOnly => "teardown-only",
        }
    }
}

/// How much a finding asks for attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    /// Steady growth that alerts (above the threshold, or full within the horizon).
    Alert,
    /// Worth fixing.
    Warning,
    /// Worth knowing.
    Note,
}

/// What the line a finding names is to its memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LineMeaning {
    /// The line allocated the memory that stays live (a tensor, a driver allocation that is the
    /// object itself).
    Keeps,
    /// The line is where an allocator asked the driver for memory (a caching allocator's
    /// segment): what keeps it may be another line.
    Asked,
}

/// What a finding rests on: the numbers of the analysis that made it (fields that do not apply
/// are `null`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Evidence {
    /// The bytes the finding is about: held at the end of the steady state (steady growth),
    /// the highest point (peak), unusable (fragmentation), orphaned, or held until exit.
    pub bytes: u64,
    /// Bytes per step (or per time window) of steady growth, and the fit of its line.
    pub rate: Option<f64>,
    pub r2: Option<f64>,
    /// Rises of the growth, and the sample (step, or window) it began after.
    pub rises: Option<usize>,
    pub growth_from: Option<u64>,
    /// `steps` or `time`: what `rate` and `growth_from` count.
    pub axis: Option<SampleAxis>,
    /// Objects involved.
    pub objects: Option<u64>,
    /// Bytes the place still held at the end of the trace, and bytes freed after the steady
    /// state (at exit: a teardown that frees them does not make the growth less of a leak).
    pub live_at_end: Option<u64>,
    pub freed_at_teardown: Option<u64>,
    /// At the holder's sustained rate: steps and seconds until the device is full.
    pub steps_to_full: Option<f64>,
    pub seconds_to_full: Option<f64>,
    /// The step the device ran out of memory in (its growth judged up to it): full already.
    pub out_of_memory_at_step: Option<u64>,
    /// Share of allocated device memory that is unusable (fragmentation).
    pub share: Option<f64>,
    /// The view of memory it comes from: `driver`, or another source's name.
    pub view: Option<&'static str>,
    /// For steady growth: whether the line keeps the memory or only asked for it.
    pub line_means: Option<LineMeaning>,
    /// For steady growth in a view whose history begins late (PyTorch's recorder keeps only its
    /// latest actions): the first sample it holds whole; a growth from there may have begun
    /// earlier.
    pub history_from: Option<u64>,
    /// For steady growth the samples read do not show: the step at which the tracer's live
    /// analysis, which saw the run before where reading began, alerted on it (`rate` is the
    /// alert's, per its unit).
    pub alerted_at_step: Option<u64>,
    /// For steady growth the samples read do not show, where reading began at a segment's
    /// snapshot (at this step): judged on what the place still holds at the end, its objects
    /// summed by the step each was made in over the whole run (`rate`, `rises`, `growth_from`
    /// are that course's).
    pub kept_from: Option<u64>,
}

/// Another view of the same cause: a row of steady growth that is evidence of the finding's
/// cause rather than a cause of its own ([`causes`](super::causes)).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Related {
    /// What the row is to the cause: `segments`, `same-line` or `host`.
    pub role: Role,
    /// The view it comes from.
    pub view: &'static str,
    #[serde(flatten)]
    pub holder: Holder,
    /// Where that view saw it.
    pub site: SiteName,
    /// Its own rate (bytes per step or window) and bytes at the last sample and at the end.
    pub rate: f64,
    pub bytes: u64,
    pub live_at_end: u64,
}

/// One finding with its advice.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    pub class: FindingClass,
    pub severity: Severity,
    pub holder: Option<Holder>,
    /// Where: the place (its largest call site, labelled by the program's Python line when a
    /// reader with symbols fills it in); `null` for findings about a whole device.
    pub site: Option<SiteName>,
    /// The likely cause, and the usual fix.
    pub cause: String,
    pub fix: String,
    pub evidence: Evidence,
    /// For steady growth: the other views of the same cause (empty when only one saw it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub related: Vec<Related>,
}
