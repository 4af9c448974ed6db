//! The live state as a snapshot ([`crate::event::snapshot`]), and back: what a segment of a
//! trace starts from, so that it reads alone.
//!
//! [`LiveState::snapshot_records`] gives the records a segment begins with: the definitions the
//! snapshot names (modules, the stacks and Python code of its sites and calls), the tracer's
//! notes kept so far (lookups, warnings, counters, alerts), then the snapshot. Applied to an
//! empty state in that order they give a state that reads every later event exactly as the
//! state they were taken from: the same live objects with the same origins, flags and site ids,
//! the same running totals, and what a replay keeps to read events written out of order (see
//! the module doc of `event/snapshot.rs`). What is history — failures, anomalies, growth series,
//! peaks, calls counted — starts again at the snapshot.

use std::collections::BTreeSet;

use super::ledger::{Charge, Holder};
use super::objects::{
    Allocation, Array, Communicator, Context, Flags, HostRegistration, IpcMapping, Mapping,
    NcclBuffer, Origin, PhysicalHandle, Pool, Registration, Reservation, Window,
};
use super::recent::Removal;
use super::sites::{Call, CallId, ProgramLine, SiteKey};
use super::snapshot_rows::{
    allocation, device_account, device_row, object, object_ref, removals, store_ref, Calls,
    COMM_STATES,
};
use super::LiveState;
use crate::event::snapshot::{
    Snapshot, SnapshotCommunicator, SnapshotContext, SnapshotObject, SnapshotPool, SnapshotSite,
    SnapshotThing,
};
use crate::format::{PyStackDef, Record, StackDef};

/// What a state restored from a snapshot started from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Restored {
    /// Events before the snapshot (the replay numbers events on from there).
    pub events: u64,
    pub last_seq: u64,
    pub time_ns: u64,
    /// Time of the trace's first event.
    pub first_time_ns: u64,
    pub steps: u64,
    /// Whether the snapshot held the live set (`false`: the writer had none to write).
    pub complete: bool,
}

impl LiveState {
    /// The live state as a snapshot (see the module doc).
    pub fn snapshot(&self) -> Snapshot {
        let mut calls = Calls::default();
        let mut objects = Vec::new();
        let m = &self.memory;
        for (table, host) in [(&m.device, false), (&m.host, true)] {
            let mut live: Vec<&Allocation> = table.live.values().collect();
            live.sort_unstable_by_key(|a| a.seq);
            objects.extend(
                live.into_iter()
                    .map(|a| allocation(&mut calls, self, a, host)),
            );
        }
        let mut set_aside = Vec::new();
        let mut removed = Vec::new();
        for (table, host) in [(&m.device, false), (&m.host, true)] {
            set_aside.extend(
                table
                    .waiting_for_free()
                    .map(|a| allocation(&mut calls, self, a, host)),
            );
            let (freed, early) = table.removals();
            removed.extend(removals(host, false, freed));
            removed.extend(removals(host, true, early));
        }
        for r in m.host_registrations.values() {
            let thing = SnapshotThing::HostRegistration {
                ptr: r.ptr,
                size: r.size,
                register_flags: r.register_flags,
            };
            objects.push(object(&mut calls, &r.origin, r.flags, thing));
        }
        for a in m.arrays.values() {
            let thing = SnapshotThing::Array {
                array: a.array,
                bytes: a.bytes,
            };
            objects.push(object(&mut calls, &a.origin, a.flags, thing));
        }
        for i in m.ipc.values() {
            let thing = SnapshotThing::Ipc { ptr: i.ptr };
            objects.push(object(&mut calls, &i.origin, i.flags, thing));
        }
        let v = &self.vmm;
        for r in v.reservations.values() {
            let thing = SnapshotThing::Reservation {
                ptr: r.ptr,
                size: r.size,
                alignment: r.alignment,
            };
            objects.push(object(&mut calls, &r.origin, r.flags, thing));
        }
        for h in v.handles.values() {
            let thing = SnapshotThing::Handle {
                handle: h.handle,
                size: h.size,
                device: h.device,
                refs: h.refs,
                mappings: h.mappings,
            };
            objects.push(object(&mut calls, &h.origin, h.flags, thing));
        }
        for mp in v.mappings.values() {
            let thing = SnapshotThing::Mapping {
                ptr: mp.ptr,
                size: mp.size,
                offset: mp.offset,
                handle: mp.handle,
            };
            objects.push(object(&mut calls, &mp.origin, mp.flags, thing));
        }
        let n = &self.nccl;
        for b in n.buffers.values() {
            let thing = SnapshotThing::NcclBuffer {
                ptr: b.ptr,
                size: b.size,
            };
            objects.push(object(&mut calls, &b.origin, b.flags, thing));
        }
        for r in n.registrations.values() {
            let thing = SnapshotThing::Registration {
                comm: r.comm,
                ptr: r.ptr,
                size: r.size,
                handle: r.handle,
            };
            objects.push(object(&mut calls, &r.origin, r.flags, thing));
        }
        for w in n.windows.values() {
            let thing = SnapshotThing::Window {
                comm: w.comm,
                ptr: w.ptr,
                size: w.size,
                window: w.window,
                window_flags: w.window_flags,
            };
            objects.push(object(&mut calls, &w.origin, w.flags, thing));
        }
        let communicators = (n.communicators())
            .map(|c| SnapshotCommunicator {
                call: calls.of_origin(&c.origin),
                seq: c.origin.seq,
                time_ns: c.origin.time_ns,
                step: c.origin.step,
                comm: c.comm,
                rank: c.rank,
                nranks: c.nranks,
                device: c.device,
                parent: c.parent,
                state: COMM_STATES.iter().position(|&s| s == c.state).unwrap_or(0) as u8,
                ended_seq: c.ended_seq,
            })
            .collect();
        let contexts = (self.contexts.values())
            .map(|c| SnapshotContext {
                call: calls.of_origin(&c.origin),
                seq: c.origin.seq,
                time_ns: c.origin.time_ns,
                step: c.origin.step,
                ctx: c.ctx,
                device: c.device,
            })
            .collect();
        let pools = (self.pools.values())
            .map(|p| SnapshotPool {
                call: calls.of_origin(&p.origin),
                seq: p.origin.seq,
                time_ns: p.origin.time_ns,
                step: p.origin.step,
                pool: p.pool,
                device: p.device,
                trims: p.trims,
            })
            .collect();
        let nccl = n.waiting_snapshot(store_ref);
        let sites = (self.sites.rows())
            .map(|(key, first, (py_stack, several))| SnapshotSite {
                stack: key.stack,
                caller: key.caller,
                code: key.line.code,
                line: key.line.line,
                first_caller: first,
                py_stack,
                several_py_stacks: several,
            })
            .collect();
        let mut context_devices: Vec<(u64, i32)> = self.sites.context_devices().collect();
        context_devices.sort_unstable();
        let mut snapshot = Snapshot {
            complete: true,
            events: self.events,
            last_seq: self.last_seq,
            time_ns: self.ledger.time_ns(),
            first_time_ns: self.trace_start_ns(),
            // Steps a live reader follows from a pattern are its own: a segment starts, as
            // the run did, without marks, and its reader finds the pattern itself.
            steps: self.marked_steps(),
            marks: self.marks,
            step_times: self.step_times.filter(|_| !self.following),
            pool_trims: self.pool_trims,
            primary_releases: self.primary_releases,
            primary_refs: self.primary_refs.iter().map(|(&d, &n)| (d, n)).collect(),
            gaps: self.losses.gaps().to_vec(),
            sites,
            calls: calls.list,
            context_devices,
            objects,
            set_aside,
            removed,
            communicators,
            contexts,
            pools,
            devices: self.devices.values().map(device_row).collect(),
            nccl,
        };
        if self.marks == 0 && self.iteration_steps == 0 {
            // Without marks, steps are a live reader's own (a pattern it follows or let go):
            // the objects were made at no step a reader of the segment knows.
            let s = &mut snapshot;
            for o in s.objects.iter_mut().chain(s.set_aside.iter_mut()) {
                o.step = 0;
            }
            s.communicators.iter_mut().for_each(|c| c.step = 0);
            s.contexts.iter_mut().for_each(|c| c.step = 0);
            s.pools.iter_mut().for_each(|p| p.step = 0);
        }
        snapshot
    }

    /// The records a segment starts with: the definitions `snapshot` names, the tracer's notes
    /// kept so far, then the snapshot itself (see the module doc).
    pub fn snapshot_records(&self, snapshot: Snapshot) -> Vec<Record> {
        let mut records: Vec<Record> = (self.owners.modules().modules().iter())
            .map(|m| Record::Module(m.clone()))
            .collect();
        let mut stacks = BTreeSet::new();
        let mut py_stacks = BTreeSet::new();
        let mut codes = BTreeSet::new();
        for s in &snapshot.sites {
            stacks.insert(s.stack);
            py_stacks.insert(s.py_stack);
            codes.insert(s.code);
        }
        for c in &snapshot.calls {
            stacks.insert(c.stack);
            py_stacks.insert(c.py_stack);
        }
        for &id in stacks.iter().filter(|&&id| id != 0) {
            if let Some(frames) = self.owners.stack(id) {
                records.push(Record::Stack(StackDef {
                    id,
                    frames: frames.to_vec(),
                }));
            }
        }
        let mut py_records = Vec::new();
        for &id in py_stacks.iter().filter(|&&id| id != 0) {
            if let Some(frames) = self.python.raw_frames(id) {
                codes.extend(frames.iter().map(|f| f.code));
                py_records.push(Record::PyStack(PyStackDef {
                    id,
                    frames: frames.to_vec(),
                }));
            }
        }
        for &id in codes.iter().filter(|&&id| id != 0) {
            if let Some(code) = self.python.code(id) {
                records.push(Record::PyCode(code.clone()));
            }
        }
        records.extend(py_records);
        let notes = &self.notes;
        records.extend(notes.lookups.iter().cloned().map(Record::Lookup));
        records.extend(notes.warnings.iter().cloned().map(Record::Warning));
        records.extend(notes.stats.iter().cloned().map(Record::Stats));
        records.extend(
            notes
                .alerts
                .iter()
                .map(|a| Record::Alert(Box::new(a.clone()))),
        );
        records.push(Record::Snapshot(Box::new(snapshot)));
        records
    }

    /// What the state was restored from, when it started from a snapshot.
    pub fn restored(&self) -> Option<Restored> {
        self.restored
    }

    /// Applies a snapshot: the state becomes the one it was taken from, with the definitions
    /// and notes applied so far kept. A state that had applied events already loses them (a
    /// reader that finds a segment missing starts again from the next one's snapshot).
    pub(super) fn restore(&mut self, s: &Snapshot) {
        if self.events > 0 || self.restored.is_some() {
            let mut fresh = LiveState::with_step_source(self.step_source.clone());
            std::mem::swap(&mut fresh.owners, &mut self.owners);
            std::mem::swap(&mut fresh.python, &mut self.python);
            std::mem::swap(&mut fresh.notes, &mut self.notes);
            std::mem::swap(&mut fresh.attachments, &mut self.attachments);
            if !self.detector.is_on() {
                fresh.detector.turn_off();
            }
            *self = fresh;
        }
        self.restored = Some(Restored {
            events: s.events,
            last_seq: s.last_seq,
            time_ns: s.time_ns,
            first_time_ns: s.first_time_ns,
            steps: s.steps,
            complete: s.complete,
        });
        self.events = s.events;
        self.last_seq = s.last_seq;
        self.steps = s.steps;
        self.marks = s.marks;
        if s.marks > 0 {
            self.detector.turn_off();
        }
        self.step_times = s.step_times;
        self.pool_trims = s.pool_trims;
        self.primary_releases = s.primary_releases;
        self.primary_refs = s.primary_refs.iter().copied().collect();
        for &(a, b) in &s.gaps {
            self.losses.gap(a, b);
        }
        let sites: Vec<_> = (s.sites.iter())
            .map(|row| {
                // The path to the line is not stored: the site's first Python stack has it.
                let line = ProgramLine {
                    code: row.code,
                    line: row.line,
                    callers: match row.code {
                        0 => 0,
                        _ => ProgramLine::of(&self.python, row.py_stack).callers,
                    },
                };
                let key = SiteKey {
                    stack: row.stack,
                    caller: row.caller,
                    line,
                };
                let python = (row.py_stack, row.several_py_stacks);
                self.sites.restore_site((key, row.first_caller, python))
            })
            .collect();
        for &(context, device) in &s.context_devices {
            self.sites.restore_context_device(context, device);
        }
        let calls: Vec<CallId> = (s.calls.iter())
            .filter_map(|c| {
                let site = *sites.get(c.site as usize)?;
                Some(self.sites.restore_call(Call {
                    caller: c.caller,
                    context: c.context,
                    pool: c.pool,
                    communicator: c.communicator,
                    module: c.module,
                    stack: c.stack,
                    py_stack: c.py_stack,
                    thread: c.thread,
                    device: c.device,
                    site,
                    api: c.api,
                }))
            })
            .collect();
        let call = |i: u32| calls.get(i as usize).copied();
        for d in &s.devices {
            self.devices.insert(d.device, device_account(d));
        }
        for c in &s.contexts {
            if let Some(origin) = self.restored_origin(call(c.call), c.seq, c.time_ns, c.step) {
                let (ctx, device) = (c.ctx, c.device);
                self.contexts.insert(
                    ctx,
                    Context {
                        ctx,
                        device,
                        origin,
                    },
                );
            }
        }
        for p in &s.pools {
            if let Some(origin) = self.restored_origin(call(p.call), p.seq, p.time_ns, p.step) {
                let pool = Pool {
                    pool: p.pool,
                    device: p.device,
                    trims: p.trims,
                    origin,
                };
                self.pools.insert(p.pool, pool);
            }
        }
        for c in &s.communicators {
            let (Some(origin), Some(&state)) = (
                self.restored_origin(call(c.call), c.seq, c.time_ns, c.step),
                COMM_STATES.get(usize::from(c.state)),
            ) else {
                continue;
            };
            self.nccl.restore_communicator(Communicator {
                comm: c.comm,
                rank: c.rank,
                nranks: c.nranks,
                device: c.device,
                parent: c.parent,
                state,
                ended_seq: c.ended_seq,
                origin,
            });
        }
        // The objects' bytes count from the last event before the snapshot.
        if s.events > 0 {
            self.ledger
                .begin_restore(s.events, s.last_seq, s.time_ns, s.steps);
        }
        for o in &s.objects {
            if let Some(c) = call(o.call) {
                self.restore_object(c, o);
            }
        }
        if s.events > 0 {
            self.ledger.end_event();
        }
        self.ledger.note_restored();
        for o in &s.set_aside {
            if let (
                Some(c),
                SnapshotThing::Allocation {
                    host,
                    kind,
                    ptr,
                    size,
                },
            ) = (call(o.call), &o.thing)
            {
                let a = Allocation {
                    ptr: *ptr,
                    size: *size,
                    seq: o.seq,
                    time_ns: o.time_ns,
                    step: o.step,
                    call: c,
                    flags: Flags::from_bits(o.flags),
                    kind: *kind,
                };
                self.pointer_table(*host).restore_set_aside(a);
            }
        }
        for r in &s.removed {
            let how = if r.teardown {
                Removal::Teardown
            } else {
                Removal::Free
            };
            let removal = (r.ptr != 0).then_some((r.ptr, r.seq, how));
            self.pointer_table(r.host).restore_removal(r.early, removal);
        }
        self.nccl.restore_waiting(&s.nccl, object_ref);
    }

    fn pointer_table(&mut self, host: bool) -> &mut super::table::PointerTable {
        if host {
            &mut self.memory.host
        } else {
            &mut self.memory.device
        }
    }

    /// The origin of an object made by restored call `call`.
    fn restored_origin(
        &self,
        call: Option<CallId>,
        seq: u64,
        time_ns: u64,
        step: u64,
    ) -> Option<Origin> {
        Some(self.sites.call(call?).origin(seq, time_ns, step))
    }

    /// Puts back one live object made by restored call `call`, charging its bytes as its
    /// creation did.
    fn restore_object(&mut self, call: CallId, o: &SnapshotObject) {
        let flags = Flags::from_bits(o.flags);
        let origin = self.sites.call(call).origin(o.seq, o.time_ns, o.step);
        let site = origin.site;
        let charge = |holder| Charge {
            site,
            holder,
            pool: None,
        };
        let on_device = Holder::Device {
            device: origin.device,
        };
        match o.thing {
            SnapshotThing::Allocation {
                host,
                kind,
                ptr,
                size,
            } => {
                let a = Allocation {
                    ptr,
                    size,
                    seq: o.seq,
                    time_ns: o.time_ns,
                    step: o.step,
                    call,
                    flags,
                    kind,
                };
                if self
                    .pointer_table(host)
                    .live
                    .get_or_insert(ptr, || a)
                    .is_none()
                {
                    let sites = &self.sites;
                    let charge = || super::memory::charge_of(sites, call, kind);
                    self.ledger.change_by_call::<true>(call, kind, charge, size);
                }
            }
            SnapshotThing::HostRegistration {
                ptr,
                size,
                register_flags,
            } => {
                self.ledger.charge(charge(Holder::Host), size);
                let r = HostRegistration {
                    ptr,
                    size,
                    register_flags,
                    flags,
                    origin,
                };
                self.memory.host_registrations.insert(ptr, r);
            }
            SnapshotThing::Array { array, bytes } => {
                self.ledger.charge(charge(on_device), bytes);
                let a = Array {
                    array,
                    bytes,
                    flags,
                    origin,
                };
                self.memory.arrays.insert(array, a);
            }
            SnapshotThing::Ipc { ptr } => {
                self.memory
                    .ipc
                    .insert(ptr, IpcMapping { ptr, flags, origin });
            }
            SnapshotThing::Reservation {
                ptr,
                size,
                alignment,
            } => {
                let r = Reservation {
                    ptr,
                    size,
                    alignment,
                    flags,
                    origin,
                };
                self.vmm.reservations.insert(ptr, r);
            }
            SnapshotThing::Handle {
                handle,
                size,
                device,
                refs,
                mappings,
            } => {
                let h = PhysicalHandle {
                    handle,
                    size,
                    device,
                    refs,
                    mappings,
                    flags,
                    origin,
                };
                if h.charged() {
                    self.ledger.charge(charge(Holder::Device { device }), size);
                }
                self.vmm.handles.insert(handle, h);
            }
            SnapshotThing::Mapping {
                ptr,
                size,
                offset,
                handle,
            } => {
                let m = Mapping {
                    ptr,
                    size,
                    offset,
                    handle,
                    flags,
                    origin,
                };
                self.vmm.mappings.insert(ptr, m);
            }
            SnapshotThing::NcclBuffer { ptr, size } => {
                let b = NcclBuffer {
                    ptr,
                    size,
                    flags,
                    origin,
                };
                self.nccl.buffers.insert(ptr, b);
            }
            SnapshotThing::Registration {
                comm,
                ptr,
                size,
                handle,
            } => {
                let r = Registration {
                    comm,
                    ptr,
                    size,
                    handle,
                    flags,
                    origin,
                };
                self.nccl.registrations.insert(handle, r);
            }
            SnapshotThing::Window {
                comm,
                ptr,
                size,
                window,
                window_flags,
            } => {
                let w = Window {
                    comm,
                    ptr,
                    size,
                    window,
                    window_flags,
                    flags,
                    origin,
                };
                self.nccl.windows.insert(window, w);
            }
        }
    }
}
