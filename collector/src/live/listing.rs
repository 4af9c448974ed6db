//! Listing what is live: every tracked object as a [`LiveObject`], with the flags that depend on
//! the rest of the state (a physical handle nothing maps, a registration whose buffer is gone)
//! worked out at the moment of asking.

use std::collections::BTreeMap;

use super::objects::{Category, Flag, Flags, LiveObject, Origin};
use super::LiveState;

fn object(
    category: Category,
    address: u64,
    bytes: u64,
    device: i32,
    flags: Flags,
    origin: &Origin,
) -> LiveObject<'_> {
    LiveObject {
        category,
        address,
        bytes,
        device,
        handle: None,
        refs: None,
        mappings: None,
        flags,
        origin,
    }
}

/// Whether a range in `map` (keyed by start) contains `addr`.
fn covers<T>(map: &BTreeMap<u64, T>, addr: u64, len: impl Fn(&T) -> u64) -> bool {
    map.range(..=addr)
        .next_back()
        .is_some_and(|(&start, v)| addr - start < len(v).max(1))
}

impl LiveState {
    /// Every live object, store by store, each in address order.
    pub fn live_objects(&self) -> impl Iterator<Item = LiveObject<'_>> {
        let m = &self.memory;
        let v = &self.vmm;
        let n = &self.nccl;
        let allocations = m.device.live.values().chain(m.host.live.values()).map(|a| {
            let category = Category::of_kind(a.kind);
            object(category, a.ptr, a.size, a.origin.device, a.flags, &a.origin)
        });
        let arrays = m.arrays.values().map(|a| {
            object(
                Category::Array,
                a.array,
                a.bytes,
                a.origin.device,
                a.flags,
                &a.origin,
            )
        });
        let physical = v.handles.values().map(|h| {
            let mut flags = h.flags;
            if h.mappings == 0 {
                flags.insert(Flag::Unmapped);
            }
            if h.refs == 0 {
                flags.insert(Flag::Released);
            }
            LiveObject {
                refs: Some(h.refs),
                mappings: Some(h.mappings),
                ..object(
                    Category::Physical,
                    h.handle,
                    h.size,
                    h.device,
                    flags,
                    &h.origin,
                )
            }
        });
        let host_registered = m.host_registrations.values().map(|r| {
            let category = Category::HostRegistered;
            object(category, r.ptr, r.size, r.origin.device, r.flags, &r.origin)
        });
        let ipc = m
            .ipc
            .values()
            .map(|i| object(Category::Ipc, i.ptr, 0, i.origin.device, i.flags, &i.origin));
        let reservations = v.reservations.values().map(|r| {
            let category = Category::ReservationVa;
            object(category, r.ptr, r.size, r.origin.device, r.flags, &r.origin)
        });
        let mappings = v.mappings.values().map(|mp| {
            let device = v
                .handles
                .get(&mp.handle)
                .map_or(mp.origin.device, |h| h.device);
            LiveObject {
                handle: Some(mp.handle),
                ..object(
                    Category::Mapping,
                    mp.ptr,
                    mp.size,
                    device,
                    mp.flags,
                    &mp.origin,
                )
            }
        });
        let labels = n.buffers.values().map(|b| {
            let category = Category::NcclBufferLabel;
            object(category, b.ptr, b.size, b.origin.device, b.flags, &b.origin)
        });
        let registrations = n.registrations.values().map(|r| {
            let flags = self.registration_flags(r.flags, r.ptr);
            object(
                Category::Registration,
                r.handle,
                r.size,
                r.origin.device,
                flags,
                &r.origin,
            )
        });
        let windows = n.windows.values().map(|w| {
            let flags = self.registration_flags(w.flags, w.ptr);
            object(
                Category::Window,
                w.window,
                w.size,
                w.origin.device,
                flags,
                &w.origin,
            )
        });
        allocations
            .chain(arrays)
            .chain(physical)
            .chain(host_registered)
            .chain(ipc)
            .chain(reservations)
            .chain(mappings)
            .chain(labels)
            .chain(registrations)
            .chain(windows)
    }

    /// Live objects whose owner is gone (see [`Flag::is_orphan`]).
    pub fn orphans(&self) -> impl Iterator<Item = LiveObject<'_>> {
        self.live_objects().filter(|o| o.flags.is_orphan())
    }

    fn registration_flags(&self, mut flags: Flags, ptr: u64) -> Flags {
        if !self.buffer_live(ptr) {
            flags.insert(Flag::BufferGone);
        }
        flags
    }

    /// Whether `addr` lies in live memory of any kind a buffer can be registered from.
    fn buffer_live(&self, addr: u64) -> bool {
        let m = &self.memory;
        covers(&m.device.live, addr, |a| a.size)
            || covers(&m.host.live, addr, |a| a.size)
            || covers(&m.host_registrations, addr, |r| r.size)
            || covers(&self.vmm.mappings, addr, |mp| mp.size)
            || covers(&self.nccl.buffers, addr, |b| b.size)
    }
}
