//! Listing what is live: every tracked object as a [`LiveObject`], with the flags that depend on
//! the rest of the state (a physical handle nothing maps, a registration whose buffer is gone)
//! worked out at the moment of asking.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::objects::{Category, Flag, Flags, LiveObject, Origin};
use super::pointers::InOrder;
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
        origin: Cow::Borrowed(origin),
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
        let device = m.device.live.in_order();
        let host = m.host.live.in_order();
        // Worked out now, while the sorted allocations are at hand to look buffers up in.
        let registration_flags: Vec<Flags> = n
            .registrations
            .values()
            .map(|r| self.registration_flags(r.flags, r.ptr, &device, &host))
            .collect();
        let window_flags: Vec<Flags> = n
            .windows
            .values()
            .map(|w| self.registration_flags(w.flags, w.ptr, &device, &host))
            .collect();
        let allocations = device.into_iter().chain(host).map(|a| {
            let origin = self.allocation_origin(a);
            LiveObject {
                category: Category::of_kind(a.kind),
                address: a.ptr,
                bytes: a.size,
                device: origin.device,
                handle: None,
                refs: None,
                mappings: None,
                flags: a.flags,
                origin: Cow::Owned(origin),
            }
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
        let registrations = n
            .registrations
            .values()
            .zip(registration_flags)
            .map(|(r, flags)| {
                object(
                    Category::Registration,
                    r.handle,
                    r.size,
                    r.origin.device,
                    flags,
                    &r.origin,
                )
            });
        let windows = n.windows.values().zip(window_flags).map(|(w, flags)| {
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

    fn registration_flags(
        &self,
        mut flags: Flags,
        ptr: u64,
        device: &InOrder<'_>,
        host: &InOrder<'_>,
    ) -> Flags {
        if !self.buffer_live(ptr, device, host) {
            flags.insert(Flag::BufferGone);
        }
        flags
    }

    /// Whether `addr` lies in live memory of any kind a buffer can be registered from; `device`
    /// and `host` are the pointer allocations in address order.
    fn buffer_live(&self, addr: u64, device: &InOrder<'_>, host: &InOrder<'_>) -> bool {
        let m = &self.memory;
        device.covers(addr)
            || host.covers(addr)
            || covers(&m.host_registrations, addr, |r| r.size)
            || covers(&self.vmm.mappings, addr, |mp| mp.size)
            || covers(&self.nccl.buffers, addr, |b| b.size)
    }
}
