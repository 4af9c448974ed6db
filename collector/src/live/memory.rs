//! Pointer allocations, pinned and registered host memory, arrays, IPC mappings and pools.

use std::collections::BTreeMap;

use super::ledger::{Charge, Holder};
use super::objects::{Allocation, Array, Flag, Flags, HostRegistration, IpcMapping, Origin, Pool};
use super::sites::{CallId, SiteTable};
use super::table::{Freed, Inserted, PointerTable};
use super::{AnomalyKind, LiveState, ObjectRef, Store};
use crate::event::{Event, MemKind};

/// The plain (non-VMM) memory objects.
#[derive(Debug, Default)]
pub(super) struct MemoryTables {
    /// Device-side pointer allocations of every kind: a free may name any of them
    /// (`cuMemFreeAsync` frees `cudaMalloc` memory and the other way round).
    pub(super) device: PointerTable,
    /// Pinned host allocations, freed only by the host frees.
    pub(super) host: PointerTable,
    pub(super) host_registrations: BTreeMap<u64, HostRegistration>,
    pub(super) arrays: BTreeMap<u64, Array>,
    pub(super) ipc: BTreeMap<u64, IpcMapping>,
}

/// Where the bytes of an allocation of `kind` made by `call` count, and the pool they came from.
pub(super) fn charge_of(sites: &SiteTable, call: CallId, kind: MemKind) -> Charge {
    let c = sites.call(call);
    let holder = if kind.on_device() {
        Holder::Device { device: c.device }
    } else {
        Holder::Host
    };
    Charge {
        site: c.site,
        holder,
        pool: (kind == MemKind::Async).then_some((c.pool, c.device)),
    }
}

impl LiveState {
    /// Counts a pointer allocation as live (`ADD`) or gone.
    ///
    /// Takes the allocation's fields rather than the allocation: a reference would keep a copy
    /// of it in memory, which the pointer table then copies from with wider loads than the
    /// stores that wrote it (and waits for them).
    #[inline]
    fn change_allocation<const ADD: bool>(&mut self, call: CallId, kind: MemKind, size: u64) {
        if self.detector.is_on() {
            self.observe_allocation::<ADD>(call, size);
        }
        let sites = &self.sites;
        let charge = || charge_of(sites, call, kind);
        self.ledger.change_by_call::<ADD>(call, kind, charge, size);
    }

    /// Gives the step detector a pointer allocation made by `call` that became live (`ADD`) or
    /// went away: out of line, as most traces mark their steps and turn the detector off.
    #[inline(never)]
    fn observe_allocation<const ADD: bool>(&mut self, call: CallId, size: u64) {
        let site = self.sites.call(call).site;
        self.observe_object(site, size, ADD);
    }

    /// Counts a pointer allocation as gone.
    #[inline]
    pub(super) fn discharge_allocation(&mut self, a: &Allocation) {
        self.change_allocation::<false>(a.call, a.kind, a.size);
    }

    /// The origin of a pointer allocation.
    pub(super) fn allocation_origin(&self, a: &Allocation) -> Origin {
        self.sites.call(a.call).origin(a.seq, a.time_ns, a.step)
    }

    /// Applies a pointer allocation that succeeded; `true` when it made a live allocation at
    /// `ptr` (in the device table when `kind` is on the device, else the host table).
    #[inline]
    pub(super) fn on_alloc(
        &mut self,
        e: &Event,
        call: CallId,
        kind: MemKind,
        ptr: u64,
        size: u64,
        pool: u64,
    ) -> bool {
        // A zero-byte request succeeds with a null pointer: nothing was allocated.
        if ptr == 0 {
            return false;
        }
        let on_device = kind.on_device();
        let seq = e.seq;
        // A pool the program did not create is a device's default pool, whether the call named
        // it by its handle (cudaDeviceGetDefaultMemPool + ...FromPoolAsync) or not at all
        // (cudaMallocAsync): one pool, one key, as for trims.
        let pool = if pool != 0 && !self.pools.contains_key(&pool) {
            0
        } else {
            pool
        };
        let call = self.sites.with_pool(call, pool);
        // The event's fields are read where the entry is written: read before the probe, they
        // waited for it on the stack.
        let step = &self.steps;
        let alloc = || Allocation {
            ptr,
            size,
            seq: e.seq,
            time_ns: e.time_ns,
            step: *step,
            call,
            flags: Flags::default(),
            kind,
        };
        let table = if on_device {
            &mut self.memory.device
        } else {
            &mut self.memory.host
        };
        match table.insert_with(ptr, seq, alloc) {
            Inserted::Live { displaced } => {
                self.change_allocation::<true>(call, kind, size);
                if let Some(old) = displaced {
                    self.discharge_allocation(&old);
                    self.anomaly(e, AnomalyKind::AddressReused, ptr, Some(old.seq));
                }
            }
            Inserted::SetAside { live_seq } => {
                // Recorded against the live occupant's reuse, like the in-order case, so the
                // late free that resolves it can take it back.
                let doubtful = self.losses().between(seq.min(live_seq), seq.max(live_seq));
                self.anomalies.record(
                    super::Anomaly {
                        kind: AnomalyKind::AddressReused,
                        seq: live_seq,
                        api: e.api,
                        thread: e.thread,
                        address: ptr,
                        related_seq: Some(seq),
                    },
                    doubtful,
                );
            }
            Inserted::AlreadyFreed { free_seq } => {
                self.anomalies.retract(AnomalyKind::UnknownFree, |a| {
                    a.seq == free_seq && a.address == ptr
                });
                let made = Allocation {
                    ptr,
                    size,
                    seq,
                    time_ns: e.time_ns,
                    step: self.steps,
                    call,
                    flags: Flags::default(),
                    kind,
                };
                self.end_before_made(&made, free_seq);
                return false;
            }
        }
        true
    }

    #[inline]
    pub(super) fn on_free(&mut self, e: &Event, ptr: u64, host: bool) {
        // cudaFree(0) is the idiom for "initialise the context"; it frees nothing.
        if ptr == 0 {
            return;
        }
        let table = if host {
            &mut self.memory.host
        } else {
            &mut self.memory.device
        };
        match table.free(ptr, e.seq) {
            Freed::Live(a) => {
                self.discharge_allocation(&a);
                self.ended_now(&a);
            }
            Freed::SetAside(a) => {
                self.anomalies.retract(AnomalyKind::AddressReused, |x| {
                    x.address == ptr && x.related_seq == Some(a.seq)
                });
                self.ended_now(&a);
            }
            Freed::TornDown => {}
            Freed::Unknown => self.anomaly(e, AnomalyKind::UnknownFree, ptr, None),
        }
    }

    pub(super) fn on_failed_free(&mut self, e: &Event, ptr: u64, host: bool) {
        let table = if host {
            &mut self.memory.host
        } else {
            &mut self.memory.device
        };
        // A failed free of a live pointer (the wrong free for its kind) is only a failure.
        if ptr == 0 || table.live.contains(ptr) {
            return;
        }
        match table.freed_at(ptr) {
            Some(earlier) => self.anomaly(e, AnomalyKind::DoubleFree, ptr, Some(earlier)),
            None => self.anomaly(e, AnomalyKind::InvalidFree, ptr, None),
        }
    }

    pub(super) fn on_host_register(
        &mut self,
        origin: Origin,
        ptr: u64,
        size: u64,
        register_flags: u32,
    ) -> Option<ObjectRef> {
        let seq = origin.seq;
        self.charge(&origin, Holder::Host, None, size);
        let old = self.memory.host_registrations.insert(
            ptr,
            HostRegistration {
                ptr,
                size,
                register_flags,
                flags: Flags::default(),
                origin,
            },
        );
        if let Some(old) = old {
            self.discharge(&old.origin, Holder::Host, None, old.size);
            self.ended_now(&old);
        }
        Some(ObjectRef {
            store: Store::HostRegistration,
            key: ptr,
            seq,
        })
    }

    pub(super) fn on_host_unregister(&mut self, e: &Event, ptr: u64) -> Option<ObjectRef> {
        match self.memory.host_registrations.remove(&ptr) {
            Some(r) => {
                self.discharge(&r.origin, Holder::Host, None, r.size);
                self.ended_now(&r);
            }
            None => self.anomaly(e, AnomalyKind::UnknownHostRegistration, ptr, None),
        }
        None
    }

    pub(super) fn on_array_create(
        &mut self,
        e: &Event,
        origin: Origin,
        array: u64,
        bytes: u64,
    ) -> Option<ObjectRef> {
        let seq = origin.seq;
        let holder = Holder::Device {
            device: origin.device,
        };
        self.charge(&origin, holder, None, bytes);
        let new = Array {
            array,
            bytes,
            flags: Flags::default(),
            origin,
        };
        if let Some(old) = self.memory.arrays.insert(array, new) {
            self.discharge_array(&old);
            self.ended_now(&old);
            self.anomaly(e, AnomalyKind::AddressReused, array, Some(old.origin.seq));
        }
        Some(ObjectRef {
            store: Store::Array,
            key: array,
            seq,
        })
    }

    pub(super) fn on_array_destroy(&mut self, e: &Event, array: u64) -> Option<ObjectRef> {
        match self.memory.arrays.remove(&array) {
            Some(a) => {
                self.discharge_array(&a);
                self.ended_now(&a);
            }
            None => self.anomaly(e, AnomalyKind::UnknownArray, array, None),
        }
        None
    }

    /// Counts an array as gone.
    pub(super) fn discharge_array(&mut self, a: &Array) {
        let holder = Holder::Device {
            device: a.origin.device,
        };
        self.discharge(&a.origin, holder, None, a.bytes);
    }

    pub(super) fn on_ipc_open(&mut self, origin: Origin, ptr: u64) -> Option<ObjectRef> {
        let seq = origin.seq;
        let mapping = IpcMapping {
            ptr,
            flags: Flags::default(),
            origin,
        };
        self.memory.ipc.insert(ptr, mapping);
        Some(ObjectRef {
            store: Store::Ipc,
            key: ptr,
            seq,
        })
    }

    pub(super) fn on_ipc_close(&mut self, e: &Event, ptr: u64) -> Option<ObjectRef> {
        match self.memory.ipc.remove(&ptr) {
            Some(m) => self.ended_now(&m),
            None => self.anomaly(e, AnomalyKind::UnknownIpc, ptr, None),
        }
        None
    }

    pub(super) fn on_pool_create(
        &mut self,
        origin: Origin,
        pool: u64,
        device: i32,
    ) -> Option<ObjectRef> {
        self.pools.insert(
            pool,
            Pool {
                pool,
                device,
                trims: 0,
                origin,
            },
        );
        None
    }

    /// The pool goes; allocations still live from it stay live (the driver frees them only when
    /// the stream work completes, and a program that never frees them leaks them), flagged.
    pub(super) fn on_pool_destroy(&mut self, e: &Event, pool: u64) -> Option<ObjectRef> {
        if self.pools.remove(&pool).is_none() {
            self.anomaly(e, AnomalyKind::UnknownPool, pool, None);
        }
        if pool != 0 {
            let sites = &self.sites;
            for a in self.memory.device.live.values_mut() {
                if sites.call(a.call).pool == pool {
                    a.flags.insert(Flag::PoolDestroyed);
                }
            }
        }

        None
    }

    /// A trim of a pool the program did not create is of a device's default pool (whose handle
    /// comes from `cudaDeviceGetDefaultMemPool`, untraced).
    pub(super) fn on_pool_trim(&mut self, e: &Event, pool: u64, keep: u64) -> Option<ObjectRef> {
        self.pool_trims += 1;
        let key = match self.pools.get_mut(&pool) {
            Some(p) => {
                p.trims += 1;
                (pool, p.device)
            }
            None => (0, e.device),
        };
        self.ledger.trim_pool(key, keep);
        None
    }
}
