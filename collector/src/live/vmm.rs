//! Virtual memory management: reservations, physical handles and the mappings between them.
//!
//! A physical handle's memory exists while the program holds a reference to it or a mapping
//! uses it: `cuMemCreate`, `cuMemMap`, `cuMemRelease` keeps the memory until `cuMemUnmap`. Only
//! physical handles count as memory; reservations are address space and mappings are views.

use std::collections::BTreeMap;

use super::ledger::Holder;
use super::objects::{Flag, Flags, Mapping, Origin, PhysicalHandle, Reservation};
use super::{AnomalyKind, LiveState, ObjectRef, Store};
use crate::event::Event;

/// The VMM objects, each keyed by address or handle value.
#[derive(Debug, Default)]
pub(super) struct VmmTables {
    pub(super) reservations: BTreeMap<u64, Reservation>,
    pub(super) handles: BTreeMap<u64, PhysicalHandle>,
    pub(super) mappings: BTreeMap<u64, Mapping>,
}

impl VmmTables {
    /// The reservation wholly containing `[ptr, ptr+size)`.
    fn reservation_containing(&self, ptr: u64, size: u64) -> Option<&Reservation> {
        let (_, r) = self.reservations.range(..=ptr).next_back()?;
        let end = ptr.checked_add(size)?;
        (end <= r.ptr.saturating_add(r.size)).then_some(r)
    }
}

impl LiveState {
    pub(super) fn on_reserve(
        &mut self,
        e: &Event,
        origin: Origin,
        ptr: u64,
        size: u64,
        alignment: u64,
    ) -> Option<ObjectRef> {
        let seq = origin.seq;
        let new = Reservation {
            ptr,
            size,
            alignment,
            flags: Flags::default(),
            origin,
        };
        if let Some(old) = self.vmm.reservations.insert(ptr, new) {
            self.anomaly(e, AnomalyKind::AddressReused, ptr, Some(old.origin.seq));
            self.ended_now(&old);
        }
        Some(ObjectRef {
            store: Store::Reservation,
            key: ptr,
            seq,
        })
    }

    /// The reservation goes; mappings still inside it stay (their memory is still mapped),
    /// flagged.
    pub(super) fn on_reserve_free(&mut self, e: &Event, ptr: u64) -> Option<ObjectRef> {
        let Some(r) = self.vmm.reservations.remove(&ptr) else {
            self.anomaly(e, AnomalyKind::UnknownReservation, ptr, None);
            return None;
        };
        let end = r.ptr.saturating_add(r.size);
        for m in self.vmm.mappings.range_mut(r.ptr..end).map(|(_, m)| m) {
            m.flags.insert(Flag::ReservationGone);
        }
        self.ended_now(&r);
        None
    }

    pub(super) fn on_create(
        &mut self,
        e: &Event,
        origin: Origin,
        handle: u64,
        size: u64,
        device: i32,
    ) -> Option<ObjectRef> {
        let seq = origin.seq;
        self.charge(&origin, Holder::Device { device }, None, size);
        let new = PhysicalHandle {
            handle,
            size,
            device,
            refs: 1,
            mappings: 0,
            flags: Flags::default(),
            origin,
        };
        if let Some(old) = self.vmm.handles.insert(handle, new) {
            self.discharge_handle(&old);
            self.ended_now(&old);
            self.anomaly(e, AnomalyKind::HandleReused, handle, Some(old.origin.seq));
            // Mappings of the old handle now count against the new one: the handle value is all
            // a mapping records.
            self.vmm
                .handles
                .get_mut(&handle)
                .expect("just inserted")
                .mappings = old.mappings;
        }
        Some(ObjectRef {
            store: Store::Handle,
            key: handle,
            seq,
        })
    }

    pub(super) fn on_release(&mut self, e: &Event, handle: u64) -> Option<ObjectRef> {
        let Some(h) = self.vmm.handles.get_mut(&handle) else {
            self.anomaly(e, AnomalyKind::UnknownHandle, handle, None);
            return None;
        };
        if h.refs == 0 {
            self.anomaly(e, AnomalyKind::HandleOverRelease, handle, None);
            return None;
        }
        h.refs -= 1;
        self.drop_handle_if_unused(handle);
        None
    }

    pub(super) fn on_retain(&mut self, e: &Event, handle: u64, ptr: u64) -> Option<ObjectRef> {
        // The driver hands back the handle mapped at `ptr`; fall back to the mapping when the
        // handle value itself is not known.
        let key = if self.vmm.handles.contains_key(&handle) {
            Some(handle)
        } else {
            self.vmm.mappings.get(&ptr).map(|m| m.handle)
        };
        match key.and_then(|k| self.vmm.handles.get_mut(&k)) {
            Some(h) => h.refs += 1,
            None => self.anomaly(e, AnomalyKind::UnknownHandle, handle, None),
        }
        None
    }

    pub(super) fn on_import(&mut self, origin: Origin, handle: u64) -> Option<ObjectRef> {
        if let Some(h) = self.vmm.handles.get_mut(&handle) {
            h.refs += 1;
            return None;
        }
        let seq = origin.seq;
        let device = origin.device;
        self.vmm.handles.insert(
            handle,
            PhysicalHandle {
                handle,
                size: 0,
                device,
                refs: 1,
                mappings: 0,
                flags: Flags::default().with(Flag::Imported),
                origin,
            },
        );
        Some(ObjectRef {
            store: Store::Handle,
            key: handle,
            seq,
        })
    }

    pub(super) fn on_map(
        &mut self,
        e: &Event,
        origin: Origin,
        ptr: u64,
        size: u64,
        offset: u64,
        handle: u64,
    ) -> Option<ObjectRef> {
        if self.vmm.reservation_containing(ptr, size).is_none() {
            self.anomaly(e, AnomalyKind::MapOutsideReservation, ptr, None);
        }
        if !self.vmm.handles.contains_key(&handle) {
            // The handle's creation was missed. Keep a placeholder so the mapping has a handle,
            // without inventing bytes that were never seen.
            self.anomaly(e, AnomalyKind::UnknownHandle, handle, None);
            let placeholder = PhysicalHandle {
                handle,
                size: 0,
                device: origin.device,
                refs: 0,
                mappings: 0,
                flags: Flags::default().with(Flag::Unseen),
                origin: origin.clone(),
            };
            self.vmm.handles.insert(handle, placeholder);
        }
        let seq = origin.seq;
        let mapping = Mapping {
            ptr,
            size,
            offset,
            handle,
            flags: Flags::default(),
            origin,
        };
        let old = self.vmm.mappings.insert(ptr, mapping);
        if let Some(h) = self.vmm.handles.get_mut(&handle) {
            h.mappings += 1;
        }
        // Counted after the new mapping, so a remap onto the same handle never drops it.
        if let Some(old) = old {
            self.anomaly(e, AnomalyKind::AddressReused, ptr, Some(old.origin.seq));
            self.unmap_one(old);
        }
        Some(ObjectRef {
            store: Store::Mapping,
            key: ptr,
            seq,
        })
    }

    /// Removes every mapping inside `[ptr, ptr+size)`. A range that cuts a mapping removes
    /// nothing: the driver rejects such a call, so a successful one means the trace missed
    /// something.
    pub(super) fn on_unmap(&mut self, e: &Event, ptr: u64, size: u64) -> Option<ObjectRef> {
        let end = ptr.saturating_add(size);
        let cut_before = self
            .vmm
            .mappings
            .range(..ptr)
            .next_back()
            .is_some_and(|(_, m)| m.ptr.saturating_add(m.size) > ptr);
        let inside: Vec<u64> = self.vmm.mappings.range(ptr..end).map(|(&p, _)| p).collect();
        let cut_after = inside
            .last()
            .and_then(|p| self.vmm.mappings.get(p))
            .is_some_and(|m| m.ptr.saturating_add(m.size) > end);
        if cut_before || cut_after {
            self.anomaly(e, AnomalyKind::PartialUnmap, ptr, None);
            return None;
        }
        if inside.is_empty() {
            self.anomaly(e, AnomalyKind::UnmapUnmapped, ptr, None);
            return None;
        }
        for p in inside {
            if let Some(m) = self.vmm.mappings.remove(&p) {
                self.unmap_one(m);
            }
        }
        None
    }

    /// Drops a removed mapping's use of its handle.
    fn unmap_one(&mut self, mapping: Mapping) {
        // Noted while its handle is still there to say the device.
        self.ended_now(&mapping);
        if let Some(h) = self.vmm.handles.get_mut(&mapping.handle) {
            h.mappings = h.mappings.saturating_sub(1);
            self.drop_handle_if_unused(mapping.handle);
        }
    }

    /// A handle with neither references nor mappings is gone, and its memory with it.
    fn drop_handle_if_unused(&mut self, handle: u64) {
        let unused = self
            .vmm
            .handles
            .get(&handle)
            .is_some_and(|h| h.refs == 0 && h.mappings == 0);
        if unused {
            if let Some(h) = self.vmm.handles.remove(&handle) {
                self.discharge_handle(&h);
                self.ended_now(&h);
            }
        }
    }

    /// Counts a physical handle's memory as gone, if it was counted: imported handles and
    /// placeholders for unseen ones never were.
    fn discharge_handle(&mut self, h: &PhysicalHandle) {
        if h.charged() {
            let holder = Holder::Device { device: h.device };
            self.discharge(&h.origin, holder, None, h.size);
        }
    }
}
