//! Listing what is live: every tracked object as a [`LiveObject`], with the flags that depend on
//! the rest of the state (a physical handle nothing maps, a registration whose buffer is gone)
//! worked out at the moment of asking.

use std::collections::BTreeMap;

use super::endings::Listed;
use super::objects::{Flag, Flags, LiveObject};
use super::pointers::InOrder;
use super::LiveState;

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
        let allocations = device.into_iter().chain(host).map(|a| a.listed(self));
        let arrays = m.arrays.values().map(|a| a.listed(self));
        // Worked out at the moment of asking: whether anything maps a handle or holds it.
        let physical = v.handles.values().map(|h| {
            let mut o = h.listed(self);
            if h.mappings == 0 {
                o.flags.insert(Flag::Unmapped);
            }
            if h.refs == 0 {
                o.flags.insert(Flag::Released);
            }
            o
        });
        let host_registered = m.host_registrations.values().map(|r| r.listed(self));
        let ipc = m.ipc.values().map(|i| i.listed(self));
        let reservations = v.reservations.values().map(|r| r.listed(self));
        let mappings = v.mappings.values().map(|mp| mp.listed(self));
        let labels = n.buffers.values().map(|b| b.listed(self));
        let registrations = n
            .registrations
            .values()
            .zip(registration_flags)
            .map(|(r, flags)| LiveObject {
                flags,
                ..r.listed(self)
            });
        let windows = n
            .windows
            .values()
            .zip(window_flags)
            .map(|(w, flags)| LiveObject {
                flags,
                ..w.listed(self)
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
