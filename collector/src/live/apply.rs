//! Applying records: each event is counted, stepped, charged and dispatched to the handler of its
//! operation; the other records feed the owner resolver, the Python stacks and the tracer's notes.
//!
//! This runs once per event of a trace of hundreds of millions, so the common operations take a
//! short way: an allocation or a free never builds an [`Origin`] (its call is interned and its
//! objects keep the call's id), and an event like one seen before finds its call with one hash
//! lookup.

use super::failures::means_shutting_down;
use super::ledger::{Charge, Holder};
use super::objects::Origin;
use super::sites::CallId;
use super::steps::{TokenEvent, TokenKey};
use super::{
    Anomaly, AnomalyKind, Failure, LiveState, ObjectRef, StepSource, Store, MAX_TRACER_NOTES,
};
use crate::event::{Api, Event, Layer, Op};
use crate::format::{Record, RecordRef, RecordSource};

impl LiveState {
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
            Record::Attachment(a) => self.attachments.add(a),
            // A segment begins with the alerts raised before it: one read already (a reading
            // that found the segment between missing starts again there) is not a second.
            Record::Alert(a)
                if (self.notes.alerts.iter())
                    .any(|k| k.time_ns == a.time_ns && k.after_seq == a.after_seq) => {}
            Record::Alert(a) => {
                self.notes.alerts_total += 1;
                if self.notes.alerts.len() < MAX_TRACER_NOTES {
                    // Its step as this reading counts marked steps (the one rule every output
                    // applies), where the tracer counted a loop's iterations before the
                    // optimizer's step marks as steps too; a pattern's steps as the tracer
                    // numbered them (as the report does, from the whole trace). Which one is
                    // known only at the end: marks among events lost before it were not counted
                    // here ([`LiveState::alerts`]).
                    // An alert that follows events this reading has not applied (raised in a
                    // segment that is missing, and written again at the next one's start) has
                    // the tracer's step.
                    let counted = (self.marks > 0 || self.iteration_steps > 0)
                        .then_some(self.steps)
                        .filter(|_| a.after_seq <= self.last_seq);
                    self.notes.alert_steps.push(counted);
                    let a = (**a).clone();
                    self.notes.alerts.push(a);
                }
            }
            Record::Snapshot(s) => self.restore(s),
            // What a segment held: for readers choosing where to start, nothing to apply.
            Record::SegmentEnd(_) => {}
        }
    }

    /// Applies every record `reader` has left: the fast way to replay a whole trace.
    pub fn replay<S: RecordSource>(&mut self, reader: &mut S) {
        self.replay_visiting(reader, |_, _| true, |_| {});
    }

    /// Applies the records `reader` has left, asking `visit` before each event whether to apply
    /// it (reading stops at the first it refuses: `true` is returned) and calling `after` after
    /// each record, e.g. to show progress. The same loop as [`LiveState::replay`].
    pub fn replay_visiting<S: RecordSource>(
        &mut self,
        reader: &mut S,
        visit: impl FnMut(&LiveState, &Event) -> bool,
        after: impl FnMut(&S),
    ) -> bool {
        self.replay_observing(reader, visit, |_, _| {}, after)
    }

    /// [`LiveState::replay_visiting`], calling `applied` with each event just applied, before
    /// any other record: what the event alone did (the objects it ended, the step it began).
    pub fn replay_observing<S: RecordSource>(
        &mut self,
        reader: &mut S,
        mut visit: impl FnMut(&LiveState, &Event) -> bool,
        mut applied: impl FnMut(&LiveState, &Event),
        mut after: impl FnMut(&S),
    ) -> bool {
        while let Some(record) = reader.next_event_or_record() {
            match record {
                RecordRef::Event(e) => {
                    if !visit(self, e) {
                        return true;
                    }
                    self.apply_event(e);
                    applied(self, e);
                }
                RecordRef::Other(r) => self.apply(&r),
            }
            after(reader);
        }
        false
    }

    /// Applies one event (the same as [`LiveState::apply`] of `Record::Event`).
    #[inline]
    pub fn apply_event(&mut self, e: &Event) {
        self.events += 1;
        self.begin_endings(e);
        if e.seq != self.last_seq + 1 {
            self.sequence_break(e.seq);
        }
        self.last_seq = self.last_seq.max(e.seq);
        self.count_call(e.api);
        if e.seq == self.next_boundary.seq || self.next_boundary.anchor && self.is_anchor(e) {
            self.pattern_boundary(e.seq, e.time_ns);
        }
        self.ledger.begin_event(e.seq, e.time_ns, self.steps);
        self.apply_event_body(e);
        self.ledger.end_event();
    }

    #[inline]
    fn count_call(&mut self, api: Api) {
        self.calls.0[api as usize] += 1;
    }

    /// A step begins at `time_ns`: series take their samples.
    pub(super) fn step_boundary(&mut self, time_ns: u64) {
        self.ledger.step_boundary(self.steps);
        self.steps += 1;
        let first = self.step_times.map_or(time_ns, |t| t.0);
        self.step_times = Some((first, time_ns));
    }

    /// The event about to be applied begins a step of the pattern the state replays with.
    #[cold]
    fn pattern_boundary(&mut self, seq: u64, time_ns: u64) {
        self.step_boundary(time_ns);
        if !self.following {
            self.applied_boundaries.push(seq);
        }
        if let StepSource::Pattern(p) = &self.step_source {
            self.next_boundary = super::NextBoundary::of(p, self.next_boundary.index + 1);
        }
    }

    /// Whether event `e`, about to be applied, is the anchor of the pattern the state replays
    /// with (asked past the pattern's last known boundary): an allocation or handle of its size
    /// at its site, a free of a live allocation of its size made there, or its NVTX range.
    /// Asked before the event is applied (its objects belong to the step it begins), this
    /// foresees the token the detector will note; a reader checks at the end that the steps
    /// applied are the boundaries the detector found ([`LiveState::unapplied_steps`]).
    #[cold]
    fn is_anchor(&self, e: &Event) -> bool {
        let StepSource::Pattern(p) = &self.step_source else {
            return false;
        };
        let Some(key) = p.key else {
            return false;
        };
        if !e.ok() {
            return false;
        }
        let made = |size: u64| size == key.bytes && key.event == TokenEvent::Alloc;
        match &e.op {
            &Op::Alloc { ptr, size, .. } if ptr != 0 && made(size) => {
                self.sites
                    .site_of(&self.python, e.caller, e.stack, e.py_stack)
                    == Some(key.site)
            }
            &Op::Create { size, .. } if made(size) => {
                self.sites
                    .site_of(&self.python, e.caller, e.stack, e.py_stack)
                    == Some(key.site)
            }
            &Op::Free { ptr, .. } | &Op::FreeHost { ptr } if key.event == TokenEvent::Free => {
                let host = matches!(e.op, Op::FreeHost { .. });
                let table = if host {
                    &self.memory.host
                } else {
                    &self.memory.device
                };
                table.live.get(ptr).is_some_and(|a| {
                    a.size == key.bytes && self.sites.call(a.call).site == key.site
                })
            }
            Op::RangePush { name } => key == TokenKey::range(name),
            _ => false,
        }
    }

    /// The origin of an object that `call` makes in event `e`.
    fn origin_of(&self, call: CallId, e: &Event) -> Origin {
        self.sites.call(call).origin(e.seq, e.time_ns, self.steps)
    }

    #[inline]
    fn apply_event_body(&mut self, e: &Event) {
        self.apply_call(e);
        // An NCCL call's scope ends with it.
        if e.api.layer() == Layer::Nccl {
            self.nccl.close_scope(e.nccl_scope);
            self.resolve_deferred(e.nccl_scope, None);
        }
    }

    /// Applies what the call of `e` did, or its failure.
    #[inline]
    fn apply_call(&mut self, e: &Event) {
        // A free that succeeded makes nothing, so it needs no call: half the events of a
        // training loop skip its lookup, and only note their site.
        if e.ok() {
            let freed = match e.op {
                Op::Free { ptr, .. } => Some((ptr, false)),
                Op::FreeHost { ptr } => Some((ptr, true)),
                _ => None,
            };
            if let Some((ptr, host)) = freed {
                self.sites
                    .note_free(&self.python, e.caller, e.stack, e.py_stack);
                self.on_free(e, ptr, host);
                return;
            }
        }
        let call = self.sites.call_of(e, &mut self.owners, &self.python);
        if !e.ok() {
            let origin = self.origin_of(call.id, e);
            self.on_failure(e, origin);
            return;
        }
        // Only objects made inside an NCCL call or by NCCL's library get a communicator. Each arm
        // hands its object on itself: one `Option` merged from all the arms is kept in memory,
        // and reading it back waits on the byte-wide store of its tag.
        let by_nccl = e.nccl_scope != 0 || call.nccl;
        match e.op {
            Op::Alloc {
                kind,
                ptr,
                size,
                pool,
                ..
            } => {
                // The object is named only for NCCL: built on every allocation, it went
                // through memory.
                if self.on_alloc(e, call.id, kind, ptr, size, pool) && by_nccl {
                    let store = if kind.on_device() {
                        Store::Device
                    } else {
                        Store::Host
                    };
                    let object = ObjectRef {
                        store,
                        key: ptr,
                        seq: e.seq,
                    };
                    self.note_created(e, object);
                }
            }
            // Frees that succeeded were applied above.
            Op::Free { .. } | Op::FreeHost { .. } => {}
            _ => {
                let origin = self.origin_of(call.id, e);
                if let Some(object) = self.apply_op(e, origin) {
                    if by_nccl {
                        self.note_created(e, object);
                    }
                }
            }
        }
    }

    /// Applies a successful operation other than an allocation or a free; returns the object it
    /// made, if any.
    fn apply_op(&mut self, e: &Event, origin: Origin) -> Option<super::ObjectRef> {
        match &e.op {
            // Applied by `apply_event_body` without an origin.
            Op::Alloc { .. } | Op::Free { .. } | Op::FreeHost { .. } => None,
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
                self.detector.turn_off();
                self.stop_following();
                if matches!(self.step_source, StepSource::Marks | StepSource::StepMarks) {
                    self.step_boundary(e.time_ns);
                }
                None
            }
            &Op::MarkIteration { .. } => {
                self.iterations += 1;
                self.detector.turn_off();
                self.stop_following();
                if self.step_source == StepSource::Marks && self.marks == 0 {
                    self.iteration_steps += 1;
                    self.step_boundary(e.time_ns);
                }
                None
            }
            Op::RangePush { name } => {
                self.detector.observe_range(name, e.seq, e.time_ns);
                None
            }
            Op::RangePop | Op::Mark { .. } => None,
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
        }
    }

    fn on_failure(&mut self, e: &Event, origin: Origin) {
        match e.op {
            Op::Free { ptr, .. } => self.on_failed_free(e, ptr, false),
            Op::FreeHost { ptr } => self.on_failed_free(e, ptr, true),
            _ => {}
        }
        if means_shutting_down(e) {
            self.failures.record_shutting_down(e.api);
            return;
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

    /// Records an anomaly, apart from the others when an event lost since the last one the
    /// tracer saw of the object (`related_seq`, else the start) could explain it.
    pub(super) fn anomaly(
        &mut self,
        e: &Event,
        kind: AnomalyKind,
        address: u64,
        related_seq: Option<u64>,
    ) {
        let doubtful = self.losses().between(related_seq.unwrap_or(0), e.seq);
        self.anomalies.record(
            Anomaly {
                kind,
                seq: e.seq,
                api: e.api,
                thread: e.thread,
                address,
                related_seq,
            },
            doubtful,
        );
    }

    /// Records an anomaly of `kind` unless the object an event named was `known`.
    pub(super) fn expect_known(&mut self, known: bool, e: &Event, kind: AnomalyKind, address: u64) {
        if !known {
            self.anomaly(e, kind, address, None);
        }
    }

    /// Counts `bytes` of an object made at `origin`'s site as live on `holder`.
    pub(super) fn charge(
        &mut self,
        origin: &Origin,
        holder: Holder,
        pool: Option<(u64, i32)>,
        bytes: u64,
    ) {
        let c = Charge {
            site: origin.site,
            holder,
            pool,
        };
        self.observe_object(origin.site, bytes, true);
        self.ledger.charge(c, bytes);
    }

    /// Undoes [`LiveState::charge`] for an object that is gone.
    pub(super) fn discharge(
        &mut self,
        origin: &Origin,
        holder: Holder,
        pool: Option<(u64, i32)>,
        bytes: u64,
    ) {
        let c = Charge {
            site: origin.site,
            holder,
            pool,
        };
        self.observe_object(origin.site, bytes, false);
        self.ledger.discharge(c, bytes);
    }

    /// Gives the step detector an object of `bytes` made at `site` that became live (`live`)
    /// or went away, at the current event.
    #[inline]
    pub(super) fn observe_object(&mut self, site: super::SiteId, bytes: u64, live: bool) {
        let (seq, time_ns) = (self.ledger.seq(), self.ledger.time_ns());
        self.detector
            .observe(TokenKey::object(site, bytes, live), seq, time_ns);
    }
}
