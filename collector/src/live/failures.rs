//! Calls that failed, as the replay records them: what was asked, how much was live on that
//! device at that instant, and for each that ran out of memory a snapshot of what held the
//! device. The post-mortem built on them is `analysis::oom`.
//!
//! An out-of-memory failure is only understood next to what held the memory, so each failure
//! keeps the live device bytes when it happened. The list is bounded: the first
//! [`MAX_FIRST_FAILURES`] and the last [`MAX_RECENT_FAILURES`] are kept (a run that ends in an OOM
//! after thousands of harmless failures still shows that OOM), the rest are counted.
//!
//! An out-of-memory snapshot holds what was live on that device by call site, what the pools there
//! held unused, physical memory nothing mapped, and the recent course of live bytes. It costs a
//! pass over the call sites, so only the first [`MAX_FIRST_OOMS`] and the last
//! [`MAX_RECENT_OOMS`] are kept (a run that fails the same way ten thousand times in a retry loop
//! is explained by its first and its last failure); all are counted.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

use super::ledger::{Holder, PoolUse};
use super::objects::{api_name, Origin};
use super::summary::Totals;
use crate::event::{Api, Event, Layer, Op};
use crate::ids::SiteId;

/// Failures kept from the start of the trace.
pub(crate) const MAX_FIRST_FAILURES: usize = 1000;
/// Failures kept from the end of the trace, once the first are full.
pub(crate) const MAX_RECENT_FAILURES: usize = 100;

/// `cudaErrorMemoryAllocation` and `CUDA_ERROR_OUT_OF_MEMORY` share the value 2.
const CUDA_OUT_OF_MEMORY: i32 = 2;
/// `CUDA_ERROR_DEINITIALIZED` and `cudaErrorCudartUnloading` share the value 4: the driver or
/// the runtime is shutting down.
const CUDA_SHUTTING_DOWN: i32 = 4;

/// One failed call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Failure {
    #[serde(serialize_with = "api_name")]
    pub api: Api,
    /// The raw return code.
    pub result: i32,
    /// Whether the code means "out of memory".
    pub out_of_memory: bool,
    /// Bytes the call asked for (0 for calls that ask for none).
    pub request_bytes: u64,
    /// Device the request was for.
    pub device: i32,
    /// Device memory live on that device when the call failed.
    pub live_device_bytes: u64,
    pub seq: u64,
    pub time_ns: u64,
    pub origin: Origin,
}

impl Failure {
    /// Builds the failure record of a failed `event`.
    pub(crate) fn new(
        event: &Event,
        origin: Origin,
        live_device_bytes: impl Fn(i32) -> u64,
    ) -> Self {
        let device = match event.op {
            Op::Create { device, .. } => device,
            _ => event.device,
        };
        let out_of_memory = means_out_of_memory(event);
        Failure {
            api: event.api,
            result: event.result,
            out_of_memory,
            request_bytes: requested_bytes(&event.op),
            device,
            live_device_bytes: live_device_bytes(device),
            seq: event.seq,
            time_ns: event.time_ns,
            origin,
        }
    }
}

/// Whether a failed `event` only reports the driver or the runtime shutting down (a context
/// released while the process exits): noise of the exit, not a failure of the program.
pub(crate) fn means_shutting_down(event: &Event) -> bool {
    event.result == CUDA_SHUTTING_DOWN
        && matches!(event.api.layer(), Layer::Runtime | Layer::Driver)
}

/// Whether a failed `event` ran out of memory: the runtime's and the driver's out-of-memory code
/// (NCCL's codes mean other things).
pub(crate) fn means_out_of_memory(event: &Event) -> bool {
    event.result == CUDA_OUT_OF_MEMORY
        && matches!(event.api.layer(), Layer::Runtime | Layer::Driver)
}

/// Bytes an operation asks for.
fn requested_bytes(op: &Op) -> u64 {
    match *op {
        Op::Alloc { size, .. }
        | Op::HostRegister { size, .. }
        | Op::Reserve { size, .. }
        | Op::Create { size, .. }
        | Op::Map { size, .. }
        | Op::NcclMemAlloc { size, .. }
        | Op::Register { size, .. }
        | Op::WindowRegister { size, .. } => size,
        Op::ArrayCreate { bytes, .. } => bytes,
        _ => 0,
    }
}

/// The first `FIRST` items of a stream and the last `RECENT` after them, with a count of all.
#[derive(Clone, Debug)]
struct FirstAndRecent<T, const FIRST: usize, const RECENT: usize> {
    first: Vec<T>,
    recent: VecDeque<T>,
    total: u64,
}

impl<T, const FIRST: usize, const RECENT: usize> Default for FirstAndRecent<T, FIRST, RECENT> {
    fn default() -> Self {
        FirstAndRecent {
            first: Vec::new(),
            recent: VecDeque::new(),
            total: 0,
        }
    }
}

impl<T, const FIRST: usize, const RECENT: usize> FirstAndRecent<T, FIRST, RECENT> {
    fn record(&mut self, item: T) {
        self.total += 1;
        if self.first.len() < FIRST {
            self.first.push(item);
        } else {
            if self.recent.len() == RECENT {
                self.recent.pop_front();
            }
            self.recent.push_back(item);
        }
    }

    /// The items kept, in order (the first ones, then the most recent ones).
    fn iter(&self) -> impl Iterator<Item = &T> {
        self.first.iter().chain(self.recent.iter())
    }

    /// Items left out (between the first and the recent ones).
    fn omitted(&self) -> u64 {
        self.total - (self.first.len() + self.recent.len()) as u64
    }
}

/// The failures of a trace. Calls refused because the driver or the runtime was shutting down
/// ([`means_shutting_down`]) are counted apart and are not failures.
#[derive(Clone, Debug, Default)]
pub struct Failures {
    kept: FirstAndRecent<Failure, MAX_FIRST_FAILURES, MAX_RECENT_FAILURES>,
    by_api: BTreeMap<Api, u64>,
    shutting_down: BTreeMap<Api, u64>,
}

impl Failures {
    pub(crate) fn record(&mut self, failure: Failure) {
        *self.by_api.entry(failure.api).or_default() += 1;
        self.kept.record(failure);
    }

    /// Counts a call refused because the driver or the runtime was shutting down.
    pub(crate) fn record_shutting_down(&mut self, api: Api) {
        *self.shutting_down.entry(api).or_default() += 1;
    }

    /// Calls refused because the driver or the runtime was shutting down (not failures).
    pub fn shutting_down(&self) -> u64 {
        self.shutting_down.values().sum()
    }

    /// Those calls per entry point.
    pub fn shutting_down_by_api(&self) -> impl Iterator<Item = (Api, u64)> + '_ {
        self.shutting_down.iter().map(|(&a, &n)| (a, n))
    }

    /// The failures kept, in trace order (the first ones, then the most recent ones).
    pub fn iter(&self) -> impl Iterator<Item = &Failure> {
        self.kept.iter()
    }

    /// All failed calls.
    pub fn total(&self) -> u64 {
        self.kept.total
    }

    /// Failed calls not kept in detail (between the first and the recent ones).
    pub fn omitted(&self) -> u64 {
        self.kept.omitted()
    }

    /// Failed calls of one entry point.
    pub fn count(&self, api: Api) -> u64 {
        self.by_api.get(&api).copied().unwrap_or(0)
    }

    /// Failed calls per entry point, for those that failed.
    pub fn by_api(&self) -> impl Iterator<Item = (Api, u64)> + '_ {
        self.by_api.iter().map(|(&a, &n)| (a, n))
    }
}

/// Out-of-memory snapshots kept from the start of the trace.
pub(crate) const MAX_FIRST_OOMS: usize = 8;
/// Out-of-memory snapshots kept from the end of the trace.
pub(crate) const MAX_RECENT_OOMS: usize = 8;
/// Call sites listed in a snapshot; the rest are summed.
pub(crate) const OOM_SITES: usize = 32;
/// Call sites whose recent series a snapshot keeps.
pub(crate) const OOM_SERIES_SITES: usize = 8;
/// Recent sample points a snapshot keeps per series.
pub(crate) const OOM_SERIES_POINTS: usize = 32;

/// What one call site held at a moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SiteHolding {
    pub site: SiteId,
    pub count: u64,
    pub bytes: u64,
}

/// Recent samples of live bytes: `(x, bytes)` with x a step number or nanoseconds since the
/// first event, the last point being the moment of the snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RecentSeries {
    /// `steps` or `time`.
    pub axis: &'static str,
    pub points: Vec<(u64, u64)>,
}

/// The live set at one out-of-memory failure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OomSnapshot {
    pub failure: Failure,
    pub holder: Holder,
    /// Live device memory on the failing device.
    pub live: Totals,
    /// The largest call sites there (at most `OOM_SITES`, 32).
    pub by_site: Vec<SiteHolding>,
    /// The rest.
    pub other_sites: Totals,
    /// Pools on the device.
    pub pools: Vec<PoolUse>,
    /// Bytes of physical handles on the device that no mapping covers.
    pub unmapped_physical_bytes: u64,
    /// Live bytes on the device over the recent samples.
    pub recent: RecentSeries,
    /// The same for the largest sites (at most `OOM_SERIES_SITES`, 8).
    pub recent_by_site: Vec<(SiteId, RecentSeries)>,
}

/// The snapshots of a trace.
#[derive(Clone, Debug, Default)]
pub struct OomLog {
    kept: FirstAndRecent<OomSnapshot, MAX_FIRST_OOMS, MAX_RECENT_OOMS>,
}

impl OomLog {
    /// Counts a snapshot and keeps it when it is among the first or the most recent.
    pub(crate) fn record(&mut self, snapshot: OomSnapshot) {
        self.kept.record(snapshot);
    }

    /// The snapshots kept, in trace order.
    pub fn iter(&self) -> impl Iterator<Item = &OomSnapshot> {
        self.kept.iter()
    }

    /// Out-of-memory failures in all.
    pub fn total(&self) -> u64 {
        self.kept.total
    }
}
