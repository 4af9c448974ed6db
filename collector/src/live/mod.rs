//! The live-allocation state: what a process holds at one point of its trace.
//!
//! [`LiveState::apply`] takes the records of a trace in file order and keeps every object that is
//! live (pointer allocations, arrays, pinned and registered host memory, IPC mappings,
//! reservations, physical handles, mappings, NCCL buffers, registrations and windows) with the
//! [`Origin`] of the call that made it. Memory use is proportional to what is live plus bounded
//! history (recent frees, the first anomalies and failures), never to the length of the trace.
//!
//! The work is split by domain: `table` and `memory` hold pointer allocations and the other
//! plain objects, `vmm` the virtual memory management objects, `context` context teardown,
//! `nccl` communicators and attribution, and `listing` / `summary` answer the queries.

mod anomaly;
mod context;
mod device_memory;
mod failure;
mod ledger;
mod listing;
mod memory;
mod nccl;
mod objects;
mod oom;
mod origin;
mod query;
mod series;
mod sites;
mod steps;
mod summary;
mod table;
mod vmm;

use std::collections::BTreeMap;

use serde::Serialize;

use self::ledger::{Charge, Ledger};
use self::sites::SiteTable;
use self::steps::StepDetector;

pub use anomaly::{Anomalies, Anomaly, AnomalyKind, MAX_ANOMALY_DETAILS};
pub use device_memory::DeviceAccount;
pub use failure::{Failure, Failures, MAX_FIRST_FAILURES, MAX_RECENT_FAILURES};
pub use ledger::{Holder, PeakPoint, PoolUse};
pub use objects::{
    Accounting, Allocation, Array, Category, CommState, Communicator, Context, Flag, Flags,
    HostRegistration, IpcMapping, LiveObject, Mapping, NcclBuffer, Origin, PhysicalHandle, Pool,
    Registration, Reservation, Window,
};
pub use oom::{OomLog, OomSnapshot, RecentSeries, SiteHolding, MAX_FIRST_OOMS, MAX_RECENT_OOMS};
pub use origin::{CodeLocation, Owner, OwnerResolver};
pub use query::{HolderState, SampleAxis};
pub use sites::{SiteId, SiteKey};
pub use steps::{StepPattern, StepSource};
pub use summary::{
    CallSite, CategoryTotals, CommunicatorTotals, DeviceTotals, ModuleTotals, Summary, Totals,
};

use self::memory::MemoryTables;
use self::nccl::NcclTables;
use self::objects::{api_name, Tracked};
pub(crate) use self::objects::{hex, hex_opt};
use self::vmm::VmmTables;
use crate::event::{Api, Event, Layer, Op};
use crate::format::{End, Lookup, Record, Stats};
use crate::modules::ModuleMap;
use crate::python::PythonStacks;

/// Lookups and warnings kept in detail; the rest are counted.
pub const MAX_TRACER_NOTES: usize = 1000;

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
}

/// Which store a tracked object lives in; with its key and creating seq, an [`ObjectRef`] finds
/// it again (or finds that it is gone, even if its key was reused since).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Store {
    Device,
    Host,
    HostRegistration,
    Array,
    Ipc,
    Reservation,
    Handle,
    Mapping,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ObjectRef {
    store: Store,
    key: u64,
    seq: u64,
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
    detector: StepDetector,
    anomalies: Anomalies,
    failures: Failures,
    calls: BTreeMap<Api, u64>,
    teardown: Teardown,
    events: u64,
    last_seq: u64,
    steps: u64,
    marks: u64,
    pool_trims: u64,
    primary_releases: u64,
    /// References to each device's primary context seen taken and not yet released.
    primary_refs: BTreeMap<i32, u32>,
    notes: TracerNotes,
    /// Driver-reported used memory per device against the traced live bytes.
    devices: BTreeMap<i32, DeviceAccount>,
}

impl LiveState {
    /// An empty state; steps come from the program's step marks.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty state whose steps come from `source` (see [`LiveState::step_pattern`]).
    pub fn with_step_source(source: StepSource) -> Self {
        LiveState {
            step_source: source,
            ..Self::default()
        }
    }

    /// Applies one record; records must come in file order.
    pub fn apply(&mut self, record: &Record) {
        match record {
            Record::Event(e) => self.apply_event(e),
            Record::Module(m) => self.owners.add_module(m.clone()),
            Record::Stack(s) => self.owners.add_stack(s),
            Record::Stats(s) => self.notes.stats = Some(s.clone()),
            Record::Lookup(l) => {
                self.notes.lookups_total += 1;
                if self.notes.lookups.len() < MAX_TRACER_NOTES {
                    self.notes.lookups.push(l.clone());
                }
            }
            Record::Warning(w) => {
                self.notes.warnings_total += 1;
                if self.notes.warnings.len() < MAX_TRACER_NOTES {
                    self.notes.warnings.push(w.clone());
                }
            }
            Record::End(end) => {
                self.notes.stats = Some(end.stats.clone());
                self.notes.end = Some(end.clone());
            }
            Record::PyCode(c) => self.python.add_code(c),
            Record::PyStack(s) => self.python.add_stack(s),
        }
    }

    fn apply_event(&mut self, e: &Event) {
        self.events += 1;
        self.last_seq = self.last_seq.max(e.seq);
        *self.calls.entry(e.api).or_default() += 1;
        if let StepSource::Allocation { site, bytes } = self.step_source {
            if let Op::Alloc {
                kind, ptr, size, ..
            } = e.op
            {
                let starts_step = e.ok()
                    && ptr != 0
                    && kind.on_device()
                    && size == bytes
                    && SiteKey::of(e.caller, e.stack) == site;
                if starts_step {
                    self.step_boundary();
                }
            }
        }
        self.ledger.begin_event(e.seq, e.time_ns, self.steps);
        self.apply_event_body(e);
        self.ledger.end_event();
    }

    /// A step begins: series take their samples.
    fn step_boundary(&mut self) {
        self.ledger.step_boundary(self.steps);
        self.steps += 1;
    }

    fn apply_event_body(&mut self, e: &Event) {
        let owner = self.owners.owner(e.caller, e.stack);
        let site = self.sites.intern(e.caller, e.stack);
        let origin = Origin::new(e, owner.module, self.steps, site);
        let nccl_call = e.api.layer() == Layer::Nccl;
        if !e.ok() {
            self.on_failure(e, origin);
            if nccl_call {
                self.nccl.close_scope(e.nccl_scope);
                self.resolve_deferred(e.nccl_scope, None);
            }
            return;
        }
        let created = match &e.op {
            &Op::Alloc {
                kind,
                ptr,
                size,
                stream,
                pool,
                pitch,
                ..
            } => self.on_alloc(e, origin, kind, ptr, size, stream, pool, pitch),
            &Op::Free { ptr, .. } => self.on_free(e, ptr, false),
            &Op::FreeHost { ptr } => self.on_free(e, ptr, true),
            &Op::HostRegister { ptr, size, flags } => {
                self.on_host_register(origin, ptr, size, flags)
            }
            &Op::HostUnregister { ptr } => self.on_host_unregister(e, ptr),
            &Op::ArrayCreate { array, bytes, .. } => self.on_array_create(e, origin, array, bytes),
            &Op::ArrayDestroy { array } => self.on_array_destroy(e, array),
            &Op::IpcOpen { ptr, .. } => self.on_ipc_open(origin, ptr),
            &Op::IpcClose { ptr } => self.on_ipc_close(e, ptr),
            &Op::PoolCreate { pool, device } => self.on_pool_create(origin, pool, device),
            &Op::PoolDestroy { pool } => self.on_pool_destroy(e, pool),
            &Op::PoolTrim { pool, keep } => self.on_pool_trim(e, pool, keep),
            &Op::Reserve {
                ptr,
                size,
                alignment,
                ..
            } => self.on_reserve(e, origin, ptr, size, alignment),
            &Op::ReserveFree { ptr, .. } => self.on_reserve_free(e, ptr),
            &Op::Create {
                handle,
                size,
                device,
                ..
            } => self.on_create(e, origin, handle, size, device),
            &Op::Release { handle } => self.on_release(e, handle),
            &Op::Retain { handle, ptr } => self.on_retain(e, handle, ptr),
            &Op::Import { handle, .. } => self.on_import(origin, handle),
            &Op::Map {
                ptr,
                size,
                offset,
                handle,
            } => self.on_map(e, origin, ptr, size, offset, handle),
            &Op::Unmap { ptr, size } => self.on_unmap(e, ptr, size),
            &Op::CtxCreate { ctx, device, .. } => self.on_ctx_create(origin, ctx, device),
            &Op::CtxDestroy { ctx } => self.on_ctx_destroy(e, ctx),
            &Op::PrimaryCtxRetain { device, .. } => {
                *self.primary_refs.entry(device).or_default() += 1;
                None
            }
            &Op::PrimaryCtxRelease { device } => {
                self.primary_releases += 1;
                self.on_primary_release(e, device)
            }
            &Op::PrimaryCtxReset { device } | &Op::DeviceReset { device } => {
                self.on_device_reset(e, device)
            }
            &Op::MarkStep { .. } => {
                self.marks += 1;
                self.detector.marked();
                if self.step_source == StepSource::Marks {
                    self.step_boundary();
                }
                None
            }
            Op::RangePush { .. } | Op::RangePop | Op::Mark { .. } => None,
            &Op::DeviceMemory { free, total } => {
                self.on_device_memory(e, free, total);
                None
            }
            Op::CommInit { .. }
            | Op::CommInitAll { .. }
            | Op::CommEnd { .. }
            | Op::NcclMemAlloc { .. }
            | Op::NcclMemFree { .. }
            | Op::Register { .. }
            | Op::Deregister { .. }
            | Op::WindowRegister { .. }
            | Op::WindowDeregister { .. } => {
                self.on_nccl_op(e, origin);
                None
            }
        };
        if let Some(object) = created {
            self.note_created(e, object);
        }
        if nccl_call {
            self.nccl.close_scope(e.nccl_scope);
            self.resolve_deferred(e.nccl_scope, None);
        }
    }

    fn on_failure(&mut self, e: &Event, origin: Origin) {
        match e.op {
            Op::Free { ptr, .. } => self.on_failed_free(e, ptr, false),
            Op::FreeHost { ptr } => self.on_failed_free(e, ptr, true),
            _ => {}
        }
        let ledger = &self.ledger;
        let failure = Failure::new(e, origin, |d| {
            ledger.holder_totals(Holder::Device { device: d }).0
        });
        if failure.out_of_memory {
            let snapshot = self.oom_snapshot(failure.clone());
            self.ooms.record(snapshot);
        }
        self.failures.record(failure);
    }

    fn anomaly(&mut self, e: &Event, kind: AnomalyKind, address: u64, related_seq: Option<u64>) {
        self.anomalies.record(Anomaly {
            kind,
            seq: e.seq,
            api: e.api,
            thread: e.thread,
            address,
            related_seq,
        });
    }

    /// Records an anomaly of `kind` unless the object an event named was `known`.
    fn expect_known(&mut self, known: bool, e: &Event, kind: AnomalyKind, address: u64) {
        if !known {
            self.anomaly(e, kind, address, None);
        }
    }

    /// Counts `bytes` of an object made at `origin`'s site as live on `holder`.
    fn charge(&mut self, origin: &Origin, holder: Holder, pool: Option<(u64, i32)>, bytes: u64) {
        self.charge_site(origin.site, holder, pool, bytes);
    }

    /// Counts `bytes` of an object made at call site `site` as live on `holder`.
    fn charge_site(&mut self, site: SiteId, holder: Holder, pool: Option<(u64, i32)>, bytes: u64) {
        let c = Charge { site, holder, pool };
        self.ledger.charge(c, bytes);
    }

    /// Undoes [`LiveState::charge`] for an object that is gone.
    fn discharge(&mut self, origin: &Origin, holder: Holder, pool: Option<(u64, i32)>, bytes: u64) {
        let c = Charge {
            site: origin.site,
            holder,
            pool,
        };
        self.ledger.discharge(c, bytes);
    }

    /// The tracked object `r` names, if it is still the same object.
    fn tracked_mut(&mut self, r: ObjectRef) -> Option<&mut dyn Tracked> {
        let m = &mut self.memory;
        let v = &mut self.vmm;
        let object: &mut dyn Tracked = match r.store {
            Store::Device => m.device.live.get_mut(&r.key)?,
            Store::Host => m.host.live.get_mut(&r.key)?,
            Store::HostRegistration => m.host_registrations.get_mut(&r.key)?,
            Store::Array => m.arrays.get_mut(&r.key)?,
            Store::Ipc => m.ipc.get_mut(&r.key)?,
            Store::Reservation => v.reservations.get_mut(&r.key)?,
            Store::Handle => v.handles.get_mut(&r.key)?,
            Store::Mapping => v.mappings.get_mut(&r.key)?,
        };
        (object.origin().seq == r.seq).then_some(object)
    }

    /// The device the bytes of object `r` are on.
    fn object_device(&mut self, r: ObjectRef) -> Option<i32> {
        if r.store == Store::Handle {
            let h = self.vmm.handles.get(&r.key)?;
            return (h.origin.seq == r.seq).then_some(h.device);
        }
        self.tracked_mut(r).map(|o| o.origin().device)
    }

    /// Calls `f` on every tracked object.
    fn for_each_tracked_mut(&mut self, mut f: impl FnMut(&mut dyn Tracked)) {
        let m = &mut self.memory;
        m.device.live.values_mut().for_each(|o| f(o));
        m.host.live.values_mut().for_each(|o| f(o));
        m.host_registrations.values_mut().for_each(|o| f(o));
        m.arrays.values_mut().for_each(|o| f(o));
        m.ipc.values_mut().for_each(|o| f(o));
        let v = &mut self.vmm;
        v.reservations.values_mut().for_each(|o| f(o));
        v.handles.values_mut().for_each(|o| f(o));
        v.mappings.values_mut().for_each(|o| f(o));
        let n = &mut self.nccl;
        n.buffers.values_mut().for_each(|o| f(o));
        n.registrations.values_mut().for_each(|o| f(o));
        n.windows.values_mut().for_each(|o| f(o));
    }

    // ---- queries -------------------------------------------------------------------------

    /// Device memory live on `device` now.
    pub fn device_bytes(&self, device: i32) -> u64 {
        self.ledger.holder_totals(Holder::Device { device }).0
    }

    /// Device accounting from the tracer's `cuMemGetInfo` samples, per device.
    pub fn device_accounts(&self) -> impl Iterator<Item = &DeviceAccount> {
        self.devices.values()
    }

    fn on_device_memory(&mut self, e: &Event, free: u64, total: u64) {
        if e.device < 0 {
            return;
        }
        let traced = self.device_bytes(e.device);
        self.devices
            .entry(e.device)
            .or_insert_with(|| DeviceAccount {
                device: e.device,
                ..DeviceAccount::default()
            })
            .sample(total.saturating_sub(free), total, traced, e.seq, e.time_ns);
    }

    /// Calls and failures per entry point, for the entry points called.
    pub fn calls(&self) -> Vec<ApiCount> {
        self.calls
            .iter()
            .map(|(&api, &calls)| ApiCount {
                api,
                calls,
                failed: self.failures.count(api),
            })
            .collect()
    }

    /// Calls of one entry point.
    pub fn call_count(&self, api: Api) -> u64 {
        self.calls.get(&api).copied().unwrap_or(0)
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

    /// Steps begun: step marks applied, or occurrences of the step allocation when the state
    /// was made with [`StepSource::Allocation`].
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Step marks applied, whatever the step source.
    pub fn marks(&self) -> u64 {
        self.marks
    }

    /// Where steps come from.
    pub fn step_source(&self) -> StepSource {
        self.step_source
    }

    /// In a trace without step marks: the allocation that repeats once per step, if one does.
    /// Replaying with its [`StepPattern::source`] then gives steps.
    pub fn step_pattern(&self) -> Option<StepPattern> {
        self.detector.detect(&self.sites)
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

    /// Driver entry points handed out without a wrapper (the first [`MAX_TRACER_NOTES`]).
    pub fn lookups(&self) -> &[Lookup] {
        &self.notes.lookups
    }

    /// All lookup records, including those not kept.
    pub fn lookups_total(&self) -> u64 {
        self.notes.lookups_total
    }

    /// The tracer's warnings (the first [`MAX_TRACER_NOTES`]).
    pub fn warnings(&self) -> &[String] {
        &self.notes.warnings
    }

    /// All warning records, including those not kept.
    pub fn warnings_total(&self) -> u64 {
        self.notes.warnings_total
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::MemKind;
    use crate::format::{Module, Segment};

    fn event(seq: u64, op: Op, result: i32, caller: u64, scope: u64) -> Record {
        Record::Event(Event {
            seq,
            time_ns: seq,
            thread: 1,
            api: Api::CudaMalloc,
            inner: None,
            outer: None,
            result,
            device: 0,
            context: 0,
            caller,
            stack: 0,
            py_stack: 0,
            py_inferred: false,
            nccl_scope: scope,
            op,
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
