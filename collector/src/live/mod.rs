//! The live-allocation state: what a process holds at one point of its trace.
//!
//! [`LiveState::apply`] takes the records of a trace in file order and keeps every object that is
//! live (pointer allocations, arrays, pinned and registered host memory, IPC mappings,
//! reservations, physical handles, mappings, NCCL buffers, registrations and windows) with the
//! [`Origin`] of the call that made it. Memory use is proportional to what is live plus bounded
//! history (recent frees, the first anomalies and failures), never to the length of the trace.
//!
//! The work is split by domain: `apply` takes the records, `table`, `pointers` and `memory` hold
//! pointer allocations and the other plain objects, `vmm` the virtual memory management objects,
//! `context` context teardown, `nccl` communicators and attribution, `sites` the call sites and
//! the interned calls objects point at, `ledger` the running totals, `endings` the objects each
//! event ends (for a reader that keeps them), and `listing`, `summary`, `query` and `counters`
//! answer the queries.

mod anomalies;
mod apply;
mod context;
mod counters;
mod device_memory;
mod endings;
mod failures;
mod ledger;
mod listing;
mod losses;
mod memory;
mod nccl;
mod objects;
mod origin;
mod pointers;
mod query;
mod recent;
mod series;
mod sites;
mod snapshot;
mod snapshot_rows;
mod steps;
mod summary;
mod table;
mod tracked;
mod vmm;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use self::ledger::Ledger;
use self::sites::SiteTable;
use self::steps::StepDetector;

pub use crate::ids::SiteId;
pub(crate) use anomalies::Anomalies;
pub use anomalies::{Anomaly, AnomalyKind};
pub(crate) use device_memory::DeviceAccount;
pub use endings::Ended;
pub(crate) use failures::Failures;
pub(crate) use failures::OomLog;
pub(crate) use failures::RecentSeries;
pub(crate) use failures::MAX_FIRST_OOMS;
#[cfg(feature = "symbols")]
pub(crate) use failures::{means_out_of_memory, means_shutting_down};
pub use failures::{Failure, SiteHolding};
pub use ledger::Holder;
pub(crate) use ledger::{PeakPoint, PoolUse};
pub(crate) use losses::Losses;
pub(crate) use objects::Context;
pub(crate) use objects::Pool;
pub use objects::{Accounting, Category, CommState, Communicator, Flag, Flags, LiveObject, Origin};
pub(crate) use origin::OwnerResolver;
pub use query::SampleAxis;
pub(crate) use sites::ProgramLine;
#[cfg(feature = "symbols")]
pub(crate) use sites::SiteKey;
pub(crate) use snapshot::Restored;
pub use steps::{StepPattern, StepSource};
pub use summary::{CallSite, Summary, Totals};

use self::counters::CallCounts;
use self::memory::MemoryTables;
use self::nccl::NcclTables;
use self::objects::api_name;
pub(crate) use self::objects::{hex, hex_opt};
use self::tracked::{ObjectRef, Store};
use self::vmm::VmmTables;
use crate::attached::Attachments;
use crate::event::Api;
use crate::format::{End, Lookup, Stats};
use crate::python::PythonStacks;

/// Lookups and warnings kept in detail; the rest are counted.
pub(crate) const MAX_TRACER_NOTES: usize = 1000;

/// Calls and failures of one entry point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ApiCount {
    #[serde(serialize_with = "api_name")]
    pub api: Api,
    pub calls: u64,
    pub failed: u64,
}

/// Objects removed because their context went away rather than by a free: not leaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Teardown {
    /// Pointer allocations and arrays removed by `cuCtxDestroy`.
    pub by_context_destroy: Totals,
    /// Pointer allocations and arrays removed by a primary context or device reset.
    pub by_device_reset: Totals,
}

/// What the tracer said about itself.
#[derive(Clone, Debug, Default)]
struct TracerNotes {
    stats: Option<Stats>,
    end: Option<End>,
    lookups: Vec<Lookup>,
    lookups_total: u64,
    warnings: Vec<String>,
    warnings_total: u64,
    /// Alerts the tracer raised while the program ran (the first [`MAX_TRACER_NOTES`]).
    alerts: Vec<crate::format::Alert>,
    /// Per alert kept, the steps this reading had counted when it came, where it counts marks
    /// or iterations.
    alert_steps: Vec<Option<u64>>,
    alerts_total: u64,
}

/// The next step boundary of a pattern: its index, and the sequence number of the event it
/// comes before (`u64::MAX`, which no event has, when none is left: then the anchor's next
/// occurrence is).
#[derive(Clone, Copy, Debug)]
struct NextBoundary {
    index: usize,
    seq: u64,
    /// Past the pattern's last boundary: each occurrence of its anchor begins a step.
    anchor: bool,
}

impl Default for NextBoundary {
    fn default() -> Self {
        NextBoundary {
            index: 0,
            seq: u64::MAX,
            anchor: false,
        }
    }
}

impl NextBoundary {
    /// Boundary `index` of `pattern`.
    fn of(pattern: &StepPattern, index: usize) -> Self {
        let seq = pattern.boundaries.get(index).copied();
        NextBoundary {
            index,
            seq: seq.unwrap_or(u64::MAX),
            anchor: seq.is_none() && pattern.key.is_some(),
        }
    }
}

/// Everything live in a traced process, rebuilt from its records.
#[derive(Debug, Default)]
pub struct LiveState {
    owners: OwnerResolver,
    python: PythonStacks,
    memory: MemoryTables,
    vmm: VmmTables,
    nccl: NcclTables,
    contexts: BTreeMap<u64, Context>,
    pools: BTreeMap<u64, Pool>,
    /// Call sites: every object's origin names one.
    sites: SiteTable,
    /// Live bytes per site, holder and pool, with peaks and sampled series, kept current so a
    /// failure can say what was live then.
    ledger: Ledger,
    ooms: OomLog,
    step_source: StepSource,
    /// With a pattern's steps: its next boundary, compared with every event.
    next_boundary: NextBoundary,
    detector: StepDetector,
    /// Times of the first and the latest step boundary.
    step_times: Option<(u64, u64)>,
    /// With a pattern's steps: the sequence number of the event each step began before, the
    /// boundaries it listed and the occurrences of its anchor past them.
    applied_boundaries: Vec<u64>,
    /// Set when steps follow a pattern found while the program ran ([`LiveState::follow_pattern`]):
    /// they begin at each occurrence of its anchor from then on, none is listed.
    following: bool,
    anomalies: Anomalies,
    failures: Failures,
    /// Calls per entry point, indexed by `Api as usize`.
    calls: CallCounts,
    teardown: Teardown,
    events: u64,
    last_seq: u64,
    /// Gaps in the sequence numbers: events the tracer lost.
    losses: Losses,
    steps: u64,
    marks: u64,
    /// Iteration marks seen, and those applied as steps (while no step mark had come).
    iterations: u64,
    iteration_steps: u64,
    pool_trims: u64,
    primary_releases: u64,
    /// References to each device's primary context seen taken and not yet released.
    primary_refs: BTreeMap<i32, u32>,
    notes: TracerNotes,
    /// Driver-reported used memory per device against the traced live bytes.
    devices: BTreeMap<i32, DeviceAccount>,
    /// Payloads the program handed to the tracer (PyTorch's allocator view: `crate::torch`).
    attachments: Attachments,
    /// Set when the state started from a snapshot (a segment of a trace read alone).
    restored: Option<Restored>,
    /// The objects the event being applied ended, when asked for.
    endings: self::endings::Endings,
}

impl LiveState {
    /// An empty state; steps come from the program's step marks.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty state that never looks for steps in the allocation pattern (steps come from
    /// marks only): for a reader that cannot use a pattern, which needs the whole trace, such
    /// as the tracer's own live analysis. It saves the detector's tokens (up to 20 MiB) and its
    /// work on every allocation and free.
    pub fn without_step_detection() -> Self {
        let mut state = Self::default();
        state.detector.turn_off();
        state
    }

    /// The payloads the program handed to the tracer (`vramtrace_attach`).
    pub fn attachments(&self) -> &Attachments {
        &self.attachments
    }

    /// An empty state whose steps come from `source` (see [`LiveState::step_pattern`]).
    pub fn with_step_source(source: StepSource) -> Self {
        let mut state = Self::default();
        // The detector goes on watching: a reader that applies steps found in the first part of
        // a trace checks them against what the whole trace shows.
        if let StepSource::Pattern(p) = &source {
            state.next_boundary = NextBoundary::of(p, 0);
        }
        state.step_source = source;
        state
    }

    /// From the next event on, a step begins at each occurrence of `pattern`'s anchor: the
    /// pattern a live reader (the tracer's own analysis) found in the part of a run without
    /// marks it has seen, which cannot read the run again from its start. Steps count from
    /// here; the boundaries are not kept (the run may be weeks long), and detection stops.
    /// A mark that comes later ends it: marks win, as they do in a trace read whole, and steps
    /// count from the first mark.
    pub(crate) fn follow_pattern(&mut self, pattern: &StepPattern) {
        let mut p = pattern.clone();
        p.boundaries = Arc::from([]);
        self.next_boundary = NextBoundary::of(&p, 0);
        self.step_source = StepSource::Pattern(Arc::new(p));
        self.detector.turn_off();
        self.following = true;
    }

    /// The pattern followed stopped recurring (a program's start repeated itself, then its loop
    /// did something else): its steps and their samples are dropped, growth is judged per time
    /// window again, and the detector looks anew.
    pub(crate) fn forget_pattern(&mut self) {
        if !std::mem::take(&mut self.following) {
            return;
        }
        self.step_source = StepSource::Marks;
        self.next_boundary = NextBoundary::default();
        self.steps = 0;
        self.step_times = None;
        self.ledger.forget_steps();
        self.detector = StepDetector::default();
    }

    /// Times of the first and the latest step boundary.
    pub(crate) fn step_times(&self) -> Option<(u64, u64)> {
        self.step_times
    }

    /// A mark came: steps are the marks from now on, counted from it as a reader of the whole
    /// trace counts them (the pattern's steps and their samples are dropped).
    pub(crate) fn stop_following(&mut self) {
        if std::mem::take(&mut self.following) {
            self.step_source = StepSource::Marks;
            self.next_boundary = NextBoundary::default();
            self.steps = 0;
            self.step_times = None;
            self.ledger.forget_steps();
        }
    }

    /// Steps the program marked: [`LiveState::steps`] unless they come from a pattern followed
    /// live, which a reader of the trace finds for itself (segment headers and snapshots say
    /// these).
    pub fn marked_steps(&self) -> u64 {
        if self.following {
            0
        } else {
            self.steps
        }
    }

    /// Time of the latest event applied.
    pub(crate) fn latest_ns(&self) -> u64 {
        self.ledger.time_ns()
    }

    /// Whether steps follow a pattern found while the program ran.
    pub fn follows_pattern(&self) -> bool {
        self.following
    }

    /// Allocations, frees and ranges the step detector has noted so far (0 once it is off).
    pub fn step_tokens(&self) -> u64 {
        self.detector.seen()
    }
}

#[cfg(test)]
mod tests {
    use super::anomalies::MAX_ANOMALY_DETAILS;
    use super::failures::{MAX_FIRST_FAILURES, MAX_RECENT_FAILURES};
    use super::*;
    use crate::event::{Event, MemKind, Op};
    use crate::format::{Module, Record, Segment};

    fn event(seq: u64, op: Op, result: i32, caller: u64, scope: u64) -> Record {
        Record::Event(Event {
            time_ns: seq,
            thread: 1,
            result,
            caller,
            nccl_scope: scope,
            ..Event::new(seq, Api::CudaMalloc, op)
        })
    }

    fn alloc(ptr: u64) -> Op {
        Op::Alloc {
            kind: MemKind::Device,
            ptr,
            size: 8,
            stream: 0,
            pool: 0,
            flags: 0,
            pitch: 0,
        }
    }

    /// A long trace with nothing live at its end leaves only bounded history behind.
    #[test]
    fn memory_follows_what_is_live_not_the_trace_length() {
        let mut s = LiveState::new();
        s.apply(&Record::Module(Module {
            id: 1,
            path: "/lib/libnccl.so.2".into(),
            base: 0x1000,
            segments: vec![Segment {
                start: 0x1000,
                len: 0x1000,
                executable: true,
            }],
            build_id: vec![],
        }));
        let mut seq = 0;
        let mut next = || {
            seq += 1;
            seq
        };
        for i in 0..100_000u64 {
            let ptr = 0x10_0000 + i * 16;
            // NCCL memory inside calls whose events never arrive, and on NCCL's own threads.
            let scope = if i % 2 == 0 { i + 1 } else { 0 };
            s.apply(&event(next(), alloc(ptr), 0, 0x1100, scope));
            let free = Op::Free { ptr, stream: 0 };
            s.apply(&event(next(), free.clone(), 0, 0x1100, 0));
            s.apply(&event(next(), free, 1, 0x1100, 0));
            let unknown = Op::Free {
                ptr: 0x9000_0000 + i * 16,
                stream: 0,
            };
            s.apply(&event(next(), unknown, 0, 0x1100, 0));
        }
        assert_eq!(s.live_objects().count(), 0);
        assert_eq!(s.device_bytes(0), 0);
        let (freed, early, set_aside) = s.memory.device.remembered();
        assert!(freed <= 65536 && early <= 4096 && set_aside == 0);
        let (scopes, unscoped) = s.nccl.waiting();
        assert!(scopes <= 4096, "{scopes} scopes");
        assert!(unscoped <= 65536, "{unscoped} unscoped");
        assert_eq!(s.failures.total(), 100_000);
        assert_eq!(
            s.failures.iter().count(),
            MAX_FIRST_FAILURES + MAX_RECENT_FAILURES
        );
        assert_eq!(s.anomalies.count(AnomalyKind::UnknownFree), 100_000);
        assert_eq!(s.anomalies.count(AnomalyKind::DoubleFree), 100_000);
        assert_eq!(s.anomalies.details().len(), MAX_ANOMALY_DETAILS);
    }
}
