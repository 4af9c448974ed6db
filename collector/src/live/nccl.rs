//! NCCL: communicators, buffers, registrations and windows, and which communicator owns the
//! memory NCCL allocates.
//!
//! Memory made inside an NCCL call carries that call's scope id and arrives before the NCCL event
//! (which is written when the call returns); it waits in a pending scope until the event names the
//! communicator. Memory NCCL's own threads make outside any call is attributed by the thread's
//! history, else to the only live communicator on its device, else to the next communicator
//! initialised there.

use std::collections::{BTreeMap, VecDeque};

use rustc_hash::FxHashMap;

use super::objects::{
    CommState, Communicator, Flag, Flags, NcclBuffer, Origin, Registration, Window,
};
use super::{AnomalyKind, LiveState, ObjectRef};
use crate::event::snapshot::{SnapshotNccl, SnapshotRef};
use crate::event::{CommEnd, Event, Op};

/// Ended communicators remembered for reports.
const MAX_ENDED_COMMUNICATORS: usize = 1024;
/// NCCL calls whose objects may wait for the call's event at once; older ones are dropped (their
/// event was lost).
const MAX_OPEN_SCOPES: usize = 4096;
/// NCCL-made objects waiting for a communicator on their device.
const MAX_UNSCOPED: usize = 65536;

/// Which communicator a thread's NCCL work belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Affinity {
    One(u64),
    /// The thread initialised several communicators in one call.
    Ambiguous,
}

/// The NCCL objects and the bookkeeping that attributes memory to communicators.
#[derive(Debug, Default)]
pub(super) struct NcclTables {
    /// Live and finalized communicators.
    comms: BTreeMap<u64, Communicator>,
    /// Destroyed and aborted communicators, oldest first.
    ended: VecDeque<Communicator>,
    pub(super) buffers: BTreeMap<u64, NcclBuffer>,
    /// Keyed by registration handle.
    pub(super) registrations: BTreeMap<u64, Registration>,
    /// Keyed by window handle.
    pub(super) windows: BTreeMap<u64, Window>,
    scopes: FxHashMap<u64, Vec<ObjectRef>>,
    scope_order: VecDeque<u64>,
    affinity: FxHashMap<u32, Affinity>,
    unscoped: Vec<ObjectRef>,
    /// Objects of NCCL helper threads waiting for the open call (scope) they appeared during.
    deferred: Vec<(u64, u32, ObjectRef)>,
}

impl NcclTables {
    /// Forgets the objects waiting on an NCCL call whose event has arrived.
    pub(super) fn close_scope(&mut self, scope: u64) {
        if scope != 0 {
            self.scopes.remove(&scope);
        }
    }

    fn push_scoped(&mut self, scope: u64, object: ObjectRef) {
        let list = self.scopes.entry(scope).or_default();
        if list.is_empty() {
            self.scope_order.push_back(scope);
        }
        list.push(object);
        while self.scope_order.len() > MAX_OPEN_SCOPES {
            if let Some(old) = self.scope_order.pop_front() {
                self.scopes.remove(&old);
            }
        }
    }

    /// Scopes waiting for their NCCL event, and objects waiting for a communicator.
    #[cfg(test)]
    pub(super) fn waiting(&self) -> (usize, usize) {
        (self.scopes.len(), self.unscoped.len())
    }

    /// Communicators: live and finalized, then ended ones, oldest first.
    pub(super) fn communicators(&self) -> impl Iterator<Item = &Communicator> {
        self.comms.values().chain(self.ended.iter())
    }

    /// A communicator by id: the existing one, else the most recently ended one.
    pub(super) fn find(&self, comm: u64) -> Option<&Communicator> {
        self.comms
            .get(&comm)
            .or_else(|| self.ended.iter().rev().find(|c| c.comm == comm))
    }

    /// The most recently ended communicator with id `comm`.
    pub(super) fn find_ended(&self, comm: u64) -> Option<&Communicator> {
        self.ended.iter().rev().find(|c| c.comm == comm)
    }

    fn is_live(&self, comm: u64) -> bool {
        self.comms
            .get(&comm)
            .is_some_and(|c| c.state == CommState::Live)
    }

    /// The communicator on `device` when it is the only live one there.
    fn only_live_on(&self, device: i32) -> Option<u64> {
        let mut live = self
            .comms
            .values()
            .filter(|c| c.state == CommState::Live && c.device == device);
        let first = live.next()?;
        live.next().is_none().then_some(first.comm)
    }
}

impl NcclTables {
    /// The objects waiting for a communicator, for a snapshot (`object` names each).
    pub(super) fn waiting_snapshot(
        &self,
        object: impl Fn(ObjectRef) -> SnapshotRef,
    ) -> SnapshotNccl {
        let refs = |list: &[ObjectRef]| list.iter().map(|&r| object(r)).collect();
        let mut affinity: Vec<(u32, Option<u64>)> = (self.affinity.iter())
            .map(|(&thread, a)| match a {
                Affinity::One(c) => (thread, Some(*c)),
                Affinity::Ambiguous => (thread, None),
            })
            .collect();
        affinity.sort_unstable();
        let mut scopes: Vec<(u64, Vec<SnapshotRef>)> = (self.scopes.iter())
            .map(|(&s, list)| (s, refs(list)))
            .collect();
        scopes.sort_unstable_by_key(|s| s.0);
        SnapshotNccl {
            scopes,
            scope_order: self.scope_order.iter().copied().collect(),
            affinity,
            unscoped: refs(&self.unscoped),
            deferred: (self.deferred.iter())
                .map(|&(scope, thread, r)| (scope, thread, object(r)))
                .collect(),
        }
    }

    /// Puts back what [`NcclTables::waiting_snapshot`] took (`object` finds each again).
    pub(super) fn restore_waiting(
        &mut self,
        s: &SnapshotNccl,
        object: impl Fn(SnapshotRef) -> Option<ObjectRef>,
    ) {
        self.scopes = (s.scopes.iter())
            .map(|(scope, list)| (*scope, list.iter().filter_map(|&r| object(r)).collect()))
            .collect();
        self.scope_order = s.scope_order.iter().copied().collect();
        for &(thread, comm) in &s.affinity {
            let a = comm.map_or(Affinity::Ambiguous, Affinity::One);
            self.affinity.insert(thread, a);
        }
        self.unscoped = s.unscoped.iter().filter_map(|&r| object(r)).collect();
        self.deferred = (s.deferred.iter())
            .filter_map(|&(scope, thread, r)| Some((scope, thread, object(r)?)))
            .collect();
    }

    /// Puts back a communicator from a snapshot, in the order [`NcclTables::communicators`]
    /// lists them.
    pub(super) fn restore_communicator(&mut self, c: Communicator) {
        if c.state.is_gone() {
            self.ended.push_back(c);
        } else {
            self.comms.insert(c.comm, c);
        }
    }
}

impl LiveState {
    /// Attributes a newly made object: to its NCCL call's scope, or, for memory NCCL made on its
    /// own threads, to a communicator by thread or device.
    pub(super) fn note_created(&mut self, e: &Event, object: ObjectRef) {
        if e.nccl_scope != 0 {
            self.nccl.push_scoped(e.nccl_scope, object);
            return;
        }
        let Some(module) = self.object_module(object) else {
            return;
        };
        if !self
            .owners
            .module_name(module)
            .is_some_and(|n| n.starts_with("libnccl"))
        {
            return;
        }
        let by_thread = match self.nccl.affinity.get(&e.thread) {
            Some(&Affinity::One(c)) if self.nccl.is_live(c) => Some(c),
            _ => None,
        };
        // A thread NCCL has not used before, allocating while an NCCL call is under way on the
        // same device: most likely that call's helper (a proxy thread of a communicator being
        // created). It waits for the call's event instead of going to whatever communicator
        // already lives there.
        if by_thread.is_none() && !self.nccl.affinity.contains_key(&e.thread) {
            if let Some(device) = self.object_device(object) {
                if let Some(scope) = self.open_scope_on(device) {
                    self.nccl.deferred.push((scope, e.thread, object));
                    return;
                }
            }
        }
        let comm = by_thread.or_else(|| {
            self.object_device(object)
                .and_then(|d| self.nccl.only_live_on(d))
        });
        match comm {
            Some(c) => self.assign(object, c),
            None => {
                if self.nccl.unscoped.len() >= MAX_UNSCOPED {
                    let mut kept = std::mem::take(&mut self.nccl.unscoped);
                    kept.retain(|&r| self.is_live(r));
                    if kept.len() >= MAX_UNSCOPED {
                        kept.remove(0);
                    }
                    self.nccl.unscoped = kept;
                }
                self.nccl.unscoped.push(object);
            }
        }
    }

    /// The most recently opened NCCL call whose objects are on `device`.
    fn open_scope_on(&mut self, device: i32) -> Option<u64> {
        let candidates: Vec<(u64, ObjectRef)> = self
            .nccl
            .scope_order
            .iter()
            .rev()
            .filter_map(|s| Some((*s, *self.nccl.scopes.get(s)?.first()?)))
            .collect();
        candidates
            .into_iter()
            .find(|&(_, o)| self.object_device(o) == Some(device))
            .map(|(s, _)| s)
    }

    /// The call `scope` ended: its helper threads' objects go to the communicator it made (and
    /// those threads with them), or, when it made none, to the usual thread and device rules.
    pub(super) fn resolve_deferred(&mut self, scope: u64, comm: Option<u64>) {
        if self.nccl.deferred.is_empty() {
            return;
        }
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.nccl.deferred)
            .into_iter()
            .partition(|&(s, _, _)| s == scope);
        self.nccl.deferred = rest;
        for (_, thread, object) in mine {
            match comm {
                Some(c) => {
                    self.assign(object, c);
                    self.nccl.affinity.insert(thread, Affinity::One(c));
                }
                None => {
                    if let Some(c) = self
                        .object_device(object)
                        .and_then(|d| self.nccl.only_live_on(d))
                    {
                        self.assign(object, c);
                    } else {
                        self.nccl.unscoped.push(object);
                    }
                }
            }
        }
    }

    /// Gives the objects waiting for a communicator on `device` to `comm`.
    fn claim_unscoped(&mut self, device: i32, comm: u64) {
        let waiting = std::mem::take(&mut self.nccl.unscoped);
        let mut kept = Vec::with_capacity(waiting.len());
        for r in waiting {
            match self.object_device(r) {
                None => {}
                Some(d) if d == device => self.assign(r, comm),
                Some(_) => kept.push(r),
            }
        }
        self.nccl.unscoped = kept;
    }

    fn init_comm(
        &mut self,
        origin: Origin,
        comm: u64,
        rank: i32,
        nranks: i32,
        device: i32,
        parent: u64,
    ) {
        self.nccl.comms.insert(
            comm,
            Communicator {
                comm,
                rank,
                nranks,
                device,
                parent,
                state: CommState::Live,
                ended_seq: None,
                origin,
            },
        );
    }

    /// Applies a successful NCCL call (the scope is closed by the caller afterwards).
    pub(super) fn on_nccl_op(&mut self, e: &Event, origin: Origin) {
        match &e.op {
            // ncclCommSplit with NCCL_SPLIT_NOCOLOR succeeds without a communicator.
            &Op::CommInit { comm: 0, .. } => {
                self.resolve_deferred(e.nccl_scope, None);
            }
            &Op::CommInit {
                comm,
                nranks,
                rank,
                parent,
                ..
            } => {
                self.init_comm(origin, comm, rank, nranks, e.device, parent);
                self.resolve_deferred(e.nccl_scope, Some(comm));
                let scoped = self.nccl.scopes.remove(&e.nccl_scope).unwrap_or_default();
                for r in scoped {
                    self.assign(r, comm);
                }
                self.nccl.affinity.insert(e.thread, Affinity::One(comm));
                self.claim_unscoped(e.device, comm);
            }
            Op::CommInitAll { comms, devices } => {
                let nranks = i32::try_from(comms.len()).unwrap_or(i32::MAX);
                for (rank, (&comm, &device)) in comms.iter().zip(devices).enumerate() {
                    let rank = i32::try_from(rank).unwrap_or(i32::MAX);
                    self.init_comm(origin.clone(), comm, rank, nranks, device, 0);
                }
                let scoped = self.nccl.scopes.remove(&e.nccl_scope).unwrap_or_default();
                for r in scoped {
                    let device = self.object_device(r);
                    let comm = devices
                        .iter()
                        .position(|&d| Some(d) == device)
                        .and_then(|i| comms.get(i));
                    if let Some(&comm) = comm {
                        self.assign(r, comm);
                    }
                }
                let affinity = match comms[..] {
                    [only] => Affinity::One(only),
                    _ => Affinity::Ambiguous,
                };
                self.nccl.affinity.insert(e.thread, affinity);
                for (&comm, &device) in comms.iter().zip(devices) {
                    self.claim_unscoped(device, comm);
                }
            }
            &Op::CommEnd { comm, how } => self.end_comm(e, comm, how),
            &Op::NcclMemAlloc { ptr, size } => {
                let buffer = NcclBuffer {
                    ptr,
                    size,
                    flags: Flags::default(),
                    origin,
                };
                if let Some(old) = self.nccl.buffers.insert(ptr, buffer) {
                    self.ended_now(&old);
                }
            }
            &Op::NcclMemFree { ptr } => {
                let removed = self.nccl.buffers.remove(&ptr);
                if let Some(b) = &removed {
                    self.ended_now(b);
                }
                self.expect_known(removed.is_some(), e, AnomalyKind::UnknownNcclBuffer, ptr);
            }
            &Op::Register {
                comm,
                ptr,
                size,
                handle,
            } => {
                let mut origin = origin;
                origin.communicator = Some(comm);
                let flags = self.flags_for_new_registration(comm);
                let registration = Registration {
                    comm,
                    ptr,
                    size,
                    handle,
                    flags,
                    origin,
                };
                if let Some(old) = self.nccl.registrations.insert(handle, registration) {
                    self.ended_now(&old);
                }
            }
            &Op::Deregister { handle, .. } => {
                let removed = self.nccl.registrations.remove(&handle);
                if let Some(r) = &removed {
                    self.ended_now(r);
                }
                let known = removed.is_some();
                self.expect_known(known, e, AnomalyKind::UnknownRegistration, handle);
            }
            &Op::WindowRegister {
                comm,
                ptr,
                size,
                window,
                flags: window_flags,
            } => {
                let mut origin = origin;
                origin.communicator = Some(comm);
                let flags = self.flags_for_new_registration(comm);
                let w = Window {
                    comm,
                    ptr,
                    size,
                    window,
                    window_flags,
                    flags,
                    origin,
                };
                if let Some(old) = self.nccl.windows.insert(window, w) {
                    self.ended_now(&old);
                }
            }
            &Op::WindowDeregister { window, .. } => {
                let removed = self.nccl.windows.remove(&window);
                if let Some(w) = &removed {
                    self.ended_now(w);
                }
                let known = removed.is_some();
                self.expect_known(known, e, AnomalyKind::UnknownWindow, window);
            }
            _ => {}
        }
    }

    /// A registration with a communicator already gone is born orphaned.
    fn flags_for_new_registration(&self, comm: u64) -> Flags {
        let gone = !self.nccl.comms.contains_key(&comm) && self.nccl.find_ended(comm).is_some();
        let mut flags = Flags::default();
        if gone {
            flags.insert(Flag::CommunicatorGone);
        }
        flags
    }

    fn end_comm(&mut self, e: &Event, comm: u64, how: CommEnd) {
        let state = match how {
            CommEnd::Finalize => {
                match self.nccl.comms.get_mut(&comm) {
                    Some(c) => c.state = CommState::Finalized,
                    None => self.anomaly(e, AnomalyKind::UnknownCommunicator, comm, None),
                }
                return;
            }
            CommEnd::Destroy => CommState::Destroyed,
            CommEnd::Abort => CommState::Aborted,
        };
        match self.nccl.comms.remove(&comm) {
            Some(mut c) => {
                c.state = state;
                c.ended_seq = Some(e.seq);
                self.nccl.ended.push_back(c);
                if self.nccl.ended.len() > MAX_ENDED_COMMUNICATORS {
                    self.nccl.ended.pop_front();
                }
            }
            None => self.anomaly(e, AnomalyKind::UnknownCommunicator, comm, None),
        }
        // Whatever it still owns is orphaned; the flag stays with the object even if the
        // communicator's id is reused later.
        self.for_each_tracked_mut(|o, sites| {
            if o.communicator(sites) == Some(comm) {
                o.flags_mut().insert(Flag::CommunicatorGone);
            }
        });
        self.nccl.affinity.retain(|_, a| *a != Affinity::One(comm));
    }
}
