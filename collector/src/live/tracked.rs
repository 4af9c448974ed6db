//! Finding a live object again from a reference to it, whatever store it is in, and reading or
//! changing what attribution and teardown need of every object alike: its device, owner module,
//! communicator and flags.

use super::objects::{
    Allocation, Array, Flags, HostRegistration, IpcMapping, Mapping, NcclBuffer, PhysicalHandle,
    Registration, Reservation, Window,
};
use super::sites::SiteTable;
use super::LiveState;

/// Which store a tracked object lives in; with its key and creating seq, an [`ObjectRef`] finds
/// it again (or finds that it is gone, even if its key was reused since).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Store {
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
pub(super) struct ObjectRef {
    pub(super) store: Store,
    pub(super) key: u64,
    pub(super) seq: u64,
}

/// What every tracked object has. Most keep their whole [`super::Origin`]; pointer allocations
/// keep an interned call instead, read through `sites`.
pub(crate) trait Tracked {
    /// Sequence number of the creating event.
    fn seq(&self) -> u64;
    fn flags_mut(&mut self) -> &mut Flags;
    /// Device current at the creating call.
    fn device(&self, sites: &SiteTable) -> i32;
    /// The owner module.
    fn module(&self, sites: &SiteTable) -> Option<u32>;
    fn communicator(&self, sites: &SiteTable) -> Option<u64>;
    fn set_communicator(&mut self, comm: u64, sites: &mut SiteTable);
}

impl Tracked for Allocation {
    fn seq(&self) -> u64 {
        self.seq
    }
    fn flags_mut(&mut self) -> &mut Flags {
        &mut self.flags
    }
    fn device(&self, sites: &SiteTable) -> i32 {
        sites.call(self.call).device
    }
    fn module(&self, sites: &SiteTable) -> Option<u32> {
        sites.call(self.call).module
    }
    fn communicator(&self, sites: &SiteTable) -> Option<u64> {
        sites.call(self.call).communicator
    }
    fn set_communicator(&mut self, comm: u64, sites: &mut SiteTable) {
        self.call = sites.with_communicator(self.call, comm);
    }
}

macro_rules! tracked_with_origin {
    ($($t:ty),*) => {$(
        impl Tracked for $t {
            fn seq(&self) -> u64 {
                self.origin.seq
            }
            fn flags_mut(&mut self) -> &mut Flags {
                &mut self.flags
            }
            fn device(&self, _: &SiteTable) -> i32 {
                self.origin.device
            }
            fn module(&self, _: &SiteTable) -> Option<u32> {
                self.origin.module
            }
            fn communicator(&self, _: &SiteTable) -> Option<u64> {
                self.origin.communicator
            }
            fn set_communicator(&mut self, comm: u64, _: &mut SiteTable) {
                self.origin.communicator = Some(comm);
            }
        }
    )*};
}

tracked_with_origin!(
    HostRegistration,
    Array,
    IpcMapping,
    Reservation,
    PhysicalHandle,
    Mapping,
    NcclBuffer,
    Registration,
    Window
);

impl LiveState {
    /// The tracked object `r` names, if it is still the same object, with the call table its
    /// origin is read through.
    pub(super) fn tracked_mut(
        &mut self,
        r: ObjectRef,
    ) -> Option<(&mut dyn Tracked, &mut SiteTable)> {
        let m = &mut self.memory;
        let v = &mut self.vmm;
        let object: &mut dyn Tracked = match r.store {
            Store::Device => m.device.live.get_mut(r.key)?,
            Store::Host => m.host.live.get_mut(r.key)?,
            Store::HostRegistration => m.host_registrations.get_mut(&r.key)?,
            Store::Array => m.arrays.get_mut(&r.key)?,
            Store::Ipc => m.ipc.get_mut(&r.key)?,
            Store::Reservation => v.reservations.get_mut(&r.key)?,
            Store::Handle => v.handles.get_mut(&r.key)?,
            Store::Mapping => v.mappings.get_mut(&r.key)?,
        };
        (object.seq() == r.seq).then_some((object, &mut self.sites))
    }

    /// Whether the object `r` names is still live.
    pub(super) fn is_live(&mut self, r: ObjectRef) -> bool {
        self.tracked_mut(r).is_some()
    }

    /// The owner module of object `r`.
    pub(super) fn object_module(&mut self, r: ObjectRef) -> Option<u32> {
        self.tracked_mut(r).and_then(|(o, sites)| o.module(sites))
    }

    /// The device the bytes of object `r` are on.
    pub(super) fn object_device(&mut self, r: ObjectRef) -> Option<i32> {
        if r.store == Store::Handle {
            let h = self.vmm.handles.get(&r.key)?;
            return (h.origin.seq == r.seq).then_some(h.device);
        }
        self.tracked_mut(r).map(|(o, sites)| o.device(sites))
    }

    /// Sets an object's communicator, if it is still live.
    pub(super) fn assign(&mut self, object: ObjectRef, comm: u64) {
        if let Some((o, sites)) = self.tracked_mut(object) {
            o.set_communicator(comm, sites);
        }
    }

    /// Calls `f` on every tracked object.
    pub(super) fn for_each_tracked_mut(&mut self, mut f: impl FnMut(&mut dyn Tracked, &SiteTable)) {
        let s = &self.sites;
        let m = &mut self.memory;
        m.device.live.values_mut().for_each(|o| f(o, s));
        m.host.live.values_mut().for_each(|o| f(o, s));
        m.host_registrations.values_mut().for_each(|o| f(o, s));
        m.arrays.values_mut().for_each(|o| f(o, s));
        m.ipc.values_mut().for_each(|o| f(o, s));
        let v = &mut self.vmm;
        v.reservations.values_mut().for_each(|o| f(o, s));
        v.handles.values_mut().for_each(|o| f(o, s));
        v.mappings.values_mut().for_each(|o| f(o, s));
        let n = &mut self.nccl;
        n.buffers.values_mut().for_each(|o| f(o, s));
        n.registrations.values_mut().for_each(|o| f(o, s));
        n.windows.values_mut().for_each(|o| f(o, s));
    }
}
