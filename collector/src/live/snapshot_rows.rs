//! A snapshot's rows and the live state's objects, one into the other: object references by
//! store, calls numbered as they are first named, pointer allocations, removals kept for late
//! events, devices' accounts. [`super::snapshot`] walks the state with them.

use rustc_hash::FxHashMap;

use super::objects::{Allocation, CommState, Flags, Origin};
use super::recent::Removal;
use super::sites::Call;
use super::{DeviceAccount, LiveState, ObjectRef, Store};
use crate::event::snapshot::{
    SnapshotCall, SnapshotDevice, SnapshotObject, SnapshotRef, SnapshotRemoval, SnapshotThing,
};

pub(super) const STORES: [Store; 8] = [
    Store::Device,
    Store::Host,
    Store::HostRegistration,
    Store::Array,
    Store::Ipc,
    Store::Reservation,
    Store::Handle,
    Store::Mapping,
];

pub(super) fn store_ref(r: ObjectRef) -> SnapshotRef {
    let store = STORES.iter().position(|&s| s == r.store).unwrap_or(0) as u8;
    SnapshotRef {
        store,
        key: r.key,
        seq: r.seq,
    }
}

pub(super) fn object_ref(r: SnapshotRef) -> Option<ObjectRef> {
    Some(ObjectRef {
        store: *STORES.get(usize::from(r.store))?,
        key: r.key,
        seq: r.seq,
    })
}

pub(super) const COMM_STATES: [CommState; 4] = [
    CommState::Live,
    CommState::Finalized,
    CommState::Destroyed,
    CommState::Aborted,
];

/// The calls of a snapshot being built, numbered as they are first named.
#[derive(Default)]
pub(super) struct Calls {
    pub(super) list: Vec<SnapshotCall>,
    index: FxHashMap<Call, u32>,
}

impl Calls {
    /// The number of `c` (a call of the state, or an origin put as one).
    pub(super) fn of(&mut self, c: &Call) -> u32 {
        let next = self.list.len() as u32;
        *self.index.entry(*c).or_insert_with(|| {
            self.list.push(SnapshotCall {
                site: c.site,
                api: c.api,
                thread: c.thread,
                caller: c.caller,
                stack: c.stack,
                py_stack: c.py_stack,
                device: c.device,
                context: c.context,
                module: c.module,
                communicator: c.communicator,
                pool: c.pool,
            });
            next
        })
    }

    /// The number of the call an origin was made by.
    pub(super) fn of_origin(&mut self, o: &Origin) -> u32 {
        self.of(&call_of_origin(o))
    }
}

/// The call of an object that keeps its whole origin.
pub(super) fn call_of_origin(o: &Origin) -> Call {
    Call {
        caller: o.caller,
        context: o.context,
        pool: 0,
        communicator: o.communicator,
        module: o.module,
        stack: o.stack,
        py_stack: o.py_stack,
        thread: o.thread,
        device: o.device,
        site: o.site,
        api: o.api,
    }
}

/// A snapshot object made at `origin`.
pub(super) fn object(
    calls: &mut Calls,
    origin: &Origin,
    flags: Flags,
    thing: SnapshotThing,
) -> SnapshotObject {
    SnapshotObject {
        call: calls.of_origin(origin),
        seq: origin.seq,
        time_ns: origin.time_ns,
        step: origin.step,
        flags: flags.bits(),
        thing,
    }
}

/// A snapshot object of a pointer allocation.
pub(super) fn allocation(
    calls: &mut Calls,
    state: &LiveState,
    a: &Allocation,
    host: bool,
) -> SnapshotObject {
    SnapshotObject {
        call: calls.of(state.sites.call(a.call)),
        seq: a.seq,
        time_ns: a.time_ns,
        step: a.step,
        flags: a.flags.bits(),
        thing: SnapshotThing::Allocation {
            host,
            kind: a.kind,
            ptr: a.ptr,
            size: a.size,
        },
    }
}

pub(super) fn removals(
    host: bool,
    early: bool,
    window: Vec<Option<(u64, u64, Removal)>>,
) -> impl Iterator<Item = SnapshotRemoval> {
    window.into_iter().map(move |r| {
        let (ptr, seq, how) = r.unwrap_or((0, 0, Removal::Free));
        SnapshotRemoval {
            host,
            early,
            ptr,
            seq,
            teardown: how == Removal::Teardown,
        }
    })
}

pub(super) fn device_row(d: &DeviceAccount) -> SnapshotDevice {
    SnapshotDevice {
        device: d.device,
        total: d.total,
        samples: d.samples,
        first_used: d.first_used,
        first_traced: d.first_traced,
        last_used: d.last_used,
        last_traced: d.last_traced,
        last_seq: d.last_seq,
        last_time_ns: d.last_time_ns,
    }
}

pub(super) fn device_account(d: &SnapshotDevice) -> DeviceAccount {
    DeviceAccount {
        device: d.device,
        total: d.total,
        samples: d.samples,
        first_used: d.first_used,
        first_traced: d.first_traced,
        last_used: d.last_used,
        last_traced: d.last_traced,
        last_seq: d.last_seq,
        last_time_ns: d.last_time_ns,
    }
}
