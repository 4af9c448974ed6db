//! What a replay gathered besides the live set and the running totals: calls per entry point,
//! failures, anomalies, steps, contexts and pools, the tracer's own notes, and the modules and
//! stacks that name addresses.

use super::ledger::Holder;
use super::origin::{CodeLocation, OwnerResolver};
use super::{
    Anomalies, ApiCount, Communicator, Context, DeviceAccount, Failures, LiveState, OomLog, Pool,
    StepPattern, StepSource, Teardown,
};
use crate::event::Api;
use crate::format::{End, Lookup, Stats};
use crate::module_map::ModuleMap;
use crate::python::PythonStacks;

/// See [`LiveState::steps_after_pattern`].
pub(crate) const QUIET_FACTOR: u64 = 100;
/// See [`LiveState::steps_after_pattern`].
pub(crate) const QUIET_MIN_NS: u64 = 1_000_000_000;

impl LiveState {
    /// Device memory live on `device` now.
    pub fn device_bytes(&self, device: i32) -> u64 {
        self.ledger.holder_totals(Holder::Device { device }).0
    }

    /// Device accounting from the tracer's `cuMemGetInfo` samples, per device.
    pub fn device_accounts(&self) -> impl Iterator<Item = &DeviceAccount> {
        self.devices.values()
    }

    /// Calls and failures per entry point, for the entry points called.
    pub fn calls(&self) -> Vec<ApiCount> {
        Api::ALL
            .iter()
            .zip(self.calls.0.iter())
            .filter(|&(_, &calls)| calls > 0)
            .map(|(&api, &calls)| ApiCount {
                api,
                calls,
                failed: self.failures.count(api),
            })
            .collect()
    }

    /// Calls of one entry point.
    pub fn call_count(&self, api: Api) -> u64 {
        self.calls.0[api as usize]
    }

    /// Failed calls.
    pub fn failures(&self) -> &Failures {
        &self.failures
    }

    /// Anomalies.
    pub fn anomalies(&self) -> &Anomalies {
        &self.anomalies
    }

    /// Objects removed by context teardown rather than freed.
    pub fn teardown(&self) -> Teardown {
        self.teardown
    }

    /// Communicators known: live and finalized ones, then the most recently ended ones.
    pub fn communicators(&self) -> impl Iterator<Item = &Communicator> {
        self.nccl.communicators()
    }

    /// Memory pools not destroyed.
    pub fn pools(&self) -> impl Iterator<Item = &Pool> {
        self.pools.values()
    }

    /// Contexts created with `cuCtxCreate*` and not destroyed.
    pub fn contexts(&self) -> impl Iterator<Item = &Context> {
        self.contexts.values()
    }

    /// Events applied.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Highest event sequence number seen.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Steps begun: step marks applied, or boundaries of the pattern the state was made with
    /// ([`StepSource::Pattern`]).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Step marks applied, whatever the step source.
    pub fn marks(&self) -> u64 {
        self.marks
    }

    /// Iteration marks seen (`vramtrace_mark_iteration`), whatever the step source.
    pub fn iterations(&self) -> u64 {
        self.iterations
    }

    /// Iteration marks that began a step (with [`StepSource::Marks`], before the first step
    /// mark).
    pub fn iteration_steps(&self) -> u64 {
        self.iteration_steps
    }

    /// Whether the steps applied are the program's marks (step marks, or iteration marks).
    pub(crate) fn steps_from_marks(&self) -> bool {
        matches!(self.step_source, StepSource::Marks | StepSource::StepMarks)
            && (self.marks > 0 || self.iteration_steps > 0)
    }

    /// Where steps come from.
    pub fn step_source(&self) -> &StepSource {
        &self.step_source
    }

    /// In a trace without step marks: the period of its allocation pattern, if one repeats
    /// (replaying with its [`StepPattern::source`] then gives steps). When the state was made
    /// with a pattern: the whole trace's, if the steps applied are its boundaries (as when a
    /// pattern found in the first part of the trace carried on through the rest), else the
    /// pattern replayed with and the steps it applied.
    pub fn step_pattern(&self) -> Option<StepPattern> {
        match &self.step_source {
            StepSource::Pattern(p) => {
                let applied = &self.applied_boundaries[..];
                if let Some(found) = self.detector.detect().filter(|f| *f.boundaries == *applied) {
                    return Some(found);
                }
                let mut p = (**p).clone();
                p.steps = applied.len() as u64;
                p.first_seq = applied.first().copied().unwrap_or(0);
                p.last_seq = applied.last().copied().unwrap_or(0);
                p.boundaries = applied.into();
                Some(p)
            }
            StepSource::Marks | StepSource::StepMarks => self.detector.detect(),
        }
    }

    /// The steps the trace applied so far shows, when they are not those the state applied:
    /// step marks, or the period of its allocation pattern with exactly its boundaries. `None`
    /// when they are (a reader that applied steps found in the first part of a trace is then
    /// done; otherwise it reads the trace again with these).
    pub fn unapplied_steps(&self) -> Option<StepSource> {
        let found = self.detector.detect();
        match (&self.step_source, found) {
            // Iterations began steps, and step marks came after them: step marks alone.
            (StepSource::Marks, _) if self.marks > 0 && self.iteration_steps > 0 => {
                Some(StepSource::StepMarks)
            }
            (StepSource::Marks | StepSource::StepMarks, None) => None,
            (StepSource::Marks | StepSource::StepMarks, Some(p)) => Some(p.source()),
            (StepSource::Pattern(_), None) => Some(StepSource::Marks),
            (StepSource::Pattern(_), Some(p)) => {
                (*p.boundaries != self.applied_boundaries[..]).then(|| p.source())
            }
        }
    }

    /// Steps' worth of time from the last step boundary to the last event, when the steps come
    /// from an allocation pattern and that quiet lasted at least [`QUIET_MIN_NS`] and more than
    /// [`QUIET_FACTOR`] times the time the pattern's steps spanned (0 otherwise): a pattern's
    /// steps end where its anchor stops recurring, and a run that went on that long without it
    /// was not in those steps (a burst of a caching allocator's segments while a model
    /// compiles, then seconds of training it never shows). A program's exit, after a loop that
    /// ran to its end, takes a few times a GPU training loop's time (three, on the H200's
    /// acceptance programs), and tens of milliseconds after a loop of a few milliseconds.
    pub(crate) fn steps_after_pattern(&self) -> u64 {
        let (StepSource::Pattern(_), Some((first, last)), Some(step)) =
            (&self.step_source, self.step_times, self.step_duration_ns())
        else {
            return 0;
        };
        let after = self.ledger.time_ns().saturating_sub(last);
        if after < QUIET_MIN_NS || after <= QUIET_FACTOR.saturating_mul(last.saturating_sub(first))
        {
            return 0;
        }
        after / step.max(1)
    }

    /// Mean nanoseconds between step boundaries, with at least two.
    pub(crate) fn step_duration_ns(&self) -> Option<u64> {
        let (first, last) = self.step_times?;
        (self.steps >= 2).then(|| (last.saturating_sub(first)) / (self.steps - 1))
    }

    /// Out-of-memory snapshots.
    pub fn ooms(&self) -> &OomLog {
        &self.ooms
    }

    /// Pool trims applied.
    pub fn pool_trims(&self) -> u64 {
        self.pool_trims
    }

    /// `cuDevicePrimaryCtxRelease` calls (recorded only: the retain count is not traced).
    pub fn primary_context_releases(&self) -> u64 {
        self.primary_releases
    }

    /// The tracer's latest counters (from the end record, else the last stats record).
    pub fn stats(&self) -> Option<&Stats> {
        self.notes.stats.as_ref()
    }

    /// The end record, when the trace has one.
    pub fn end(&self) -> Option<&End> {
        self.notes.end.as_ref()
    }

    /// Driver entry points handed out without a wrapper (the first [`MAX_TRACER_NOTES`](super::MAX_TRACER_NOTES)).
    pub fn lookups(&self) -> &[Lookup] {
        &self.notes.lookups
    }

    /// All lookup records, including those not kept.
    pub fn lookups_total(&self) -> u64 {
        self.notes.lookups_total
    }

    /// The tracer's warnings (the first [`MAX_TRACER_NOTES`](super::MAX_TRACER_NOTES)).
    pub fn warnings(&self) -> &[String] {
        &self.notes.warnings
    }

    /// All warning records, including those not kept.
    pub fn warnings_total(&self) -> u64 {
        self.notes.warnings_total
    }

    /// Alerts the tracer raised while the program ran, in order (the first
    /// [`MAX_TRACER_NOTES`](super::MAX_TRACER_NOTES)), each at its step as this reading counts
    /// steps; as the tracer counted them where events before it were lost (their marks were not
    /// counted here) or the steps are a pattern's.
    pub fn alerts(&self) -> Vec<crate::format::Alert> {
        (self.notes.alerts.iter().zip(&self.notes.alert_steps))
            .map(|(a, &counted)| {
                let lost_before = self.losses.between(0, a.after_seq.saturating_add(1));
                match counted {
                    Some(step) if !lost_before => crate::format::Alert { step, ..a.clone() },
                    _ => a.clone(),
                }
            })
            .collect()
    }

    /// Alerts raised in all.
    pub fn alerts_total(&self) -> u64 {
        self.notes.alerts_total
    }

    /// The modules recorded.
    pub fn modules(&self) -> &ModuleMap {
        self.owners.modules()
    }

    /// The owner resolver (modules and stacks), for naming addresses.
    pub fn owners(&self) -> &OwnerResolver {
        &self.owners
    }

    /// The Python code objects and stacks recorded, for naming `Origin::py_stack`.
    pub fn python_stacks(&self) -> &PythonStacks {
        &self.python
    }

    /// Names a code address as `module+offset`.
    pub fn locate(&self, addr: u64) -> CodeLocation {
        self.owners.locate(addr)
    }
}

/// Calls per entry point, one counter for each: indexed by an `Api`, which is always in range,
/// so counting a call is one add (no bounds check, no growing).
#[derive(Debug)]
pub(super) struct CallCounts(pub(super) Box<[u64; Api::ALL.len()]>);

impl Default for CallCounts {
    fn default() -> Self {
        CallCounts(Box::new([0; Api::ALL.len()]))
    }
}
