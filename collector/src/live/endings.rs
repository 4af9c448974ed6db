//! Every object's end, event by event, for a reader that keeps the whole life of a trace (the
//! Parquet export's `allocations` table): the objects the last event applied removed from the
//! live set, each as the queries list it, with the call that ended it.
//!
//! Off by default: the replay keeps only what is live, and a report never pays for this. Turned
//! on ([`LiveState::record_endings`]), each event first forgets the previous event's endings, so
//! memory stays bounded by what one event ends (a context teardown: everything made in it).
//!
//! An object ends when its free, release, unregister or destroy is applied, when its context is
//! destroyed or its device reset, or when a newer object takes its key without one (a handle or
//! array value reused, a registration made again). Not listed: an allocation displaced at its
//! address by a newer one whose late free never arrives (the address-reused anomaly), which the
//! live set never shows either.

use std::borrow::Cow;

use super::objects::{
    Allocation, Array, Category, HostRegistration, IpcMapping, LiveObject, Mapping, NcclBuffer,
    Origin, PhysicalHandle, Registration, Reservation, Window,
};
use super::LiveState;
use crate::event::{Api, Event};

/// An object that left the live set.
#[derive(Clone, Debug)]
pub struct Ended {
    /// The object as it was when it ended (flags as recorded; those the listing of live objects
    /// works out at the moment of asking are not added).
    pub object: LiveObject<'static>,
    /// Sequence number of the event that ended it.
    pub seq: u64,
    /// That event, when it is the one being applied; `None` for an allocation whose free was
    /// written before it (a late write): only the free's sequence number is known.
    pub by: Option<EndingCall>,
}

/// The call that ended an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndingCall {
    pub api: Api,
    /// When the call returned (`CLOCK_MONOTONIC` ns).
    pub time_ns: u64,
    /// Steps begun then.
    pub step: u64,
}

/// The endings of the event being applied.
#[derive(Debug, Default)]
pub(super) struct Endings {
    on: bool,
    /// The event being applied: sequence number, time, entry point.
    event: (u64, u64, Option<Api>),
    ended: Vec<Ended>,
}

impl LiveState {
    /// Keeps the objects each event ends, for [`LiveState::ended`].
    pub fn record_endings(&mut self) {
        self.endings.on = true;
    }

    /// The objects the last event applied ended (always empty unless
    /// [`LiveState::record_endings`] was called), in the order they ended.
    pub fn ended(&self) -> &[Ended] {
        &self.endings.ended
    }

    /// Forgets the previous event's endings as event `e` begins.
    #[inline]
    pub(super) fn begin_endings(&mut self, e: &Event) {
        if self.endings.on {
            self.endings.ended.clear();
            self.endings.event = (e.seq, e.time_ns, Some(e.api));
        }
    }

    /// Notes that `object` ended with the event being applied.
    #[inline]
    pub(super) fn ended_now<T: Listed>(&mut self, object: &T) {
        if self.endings.on {
            self.note_end(object);
        }
    }

    #[inline(never)]
    fn note_end<T: Listed>(&mut self, object: &T) {
        let (seq, time_ns, api) = self.endings.event;
        let by = api.map(|api| EndingCall {
            api,
            time_ns,
            step: self.steps,
        });
        let object = owned(object.listed(self));
        self.endings.ended.push(Ended { object, seq, by });
    }

    /// Notes an allocation that ended before it began: its free (`free_seq`) was applied first.
    pub(super) fn end_before_made(&mut self, a: &Allocation, free_seq: u64) {
        if self.endings.on {
            let object = owned(a.listed(self));
            self.endings.ended.push(Ended {
                object,
                seq: free_seq,
                by: None,
            });
        }
    }
}

fn owned(o: LiveObject<'_>) -> LiveObject<'static> {
    LiveObject {
        origin: Cow::Owned(o.origin.into_owned()),
        ..o
    }
}

/// A tracked object as the queries list it.
pub(super) trait Listed {
    fn listed<'a>(&'a self, state: &'a LiveState) -> LiveObject<'a>;
}

/// The object as listed, with no handle, reference or mapping counts.
fn plain(
    category: Category,
    address: u64,
    bytes: u64,
    flags: super::Flags,
    origin: &Origin,
) -> LiveObject<'_> {
    LiveObject {
        category,
        address,
        bytes,
        device: origin.device,
        handle: None,
        refs: None,
        mappings: None,
        flags,
        origin: Cow::Borrowed(origin),
    }
}

impl Listed for Allocation {
    fn listed<'a>(&'a self, state: &'a LiveState) -> LiveObject<'a> {
        let origin = state.allocation_origin(self);
        LiveObject {
            category: Category::of_kind(self.kind),
            address: self.ptr,
            bytes: self.size,
            device: origin.device,
            handle: None,
            refs: None,
            mappings: None,
            flags: self.flags,
            origin: Cow::Owned(origin),
        }
    }
}

impl Listed for Array {
    fn listed<'a>(&'a self, _: &'a LiveState) -> LiveObject<'a> {
        plain(
            Category::Array,
            self.array,
            self.bytes,
            self.flags,
            &self.origin,
        )
    }
}

impl Listed for HostRegistration {
    fn listed<'a>(&'a self, _: &'a LiveState) -> LiveObject<'a> {
        let category = Category::HostRegistered;
        plain(category, self.ptr, self.size, self.flags, &self.origin)
    }
}

impl Listed for IpcMapping {
    fn listed<'a>(&'a self, _: &'a LiveState) -> LiveObject<'a> {
        plain(Category::Ipc, self.ptr, 0, self.flags, &self.origin)
    }
}

impl Listed for Reservation {
    fn listed<'a>(&'a self, _: &'a LiveState) -> LiveObject<'a> {
        let category = Category::ReservationVa;
        plain(category, self.ptr, self.size, self.flags, &self.origin)
    }
}

impl Listed for PhysicalHandle {
    fn listed<'a>(&'a self, _: &'a LiveState) -> LiveObject<'a> {
        LiveObject {
            device: self.device,
            refs: Some(self.refs),
            mappings: Some(self.mappings),
            ..plain(
                Category::Physical,
                self.handle,
                self.size,
                self.flags,
                &self.origin,
            )
        }
    }
}

impl Listed for Mapping {
    /// On the device of the handle it maps (when the handle is known).
    fn listed<'a>(&'a self, state: &'a LiveState) -> LiveObject<'a> {
        let device = state
            .vmm
            .handles
            .get(&self.handle)
            .map_or(self.origin.device, |h| h.device);
        LiveObject {
            device,
            handle: Some(self.handle),
            ..plain(
                Category::Mapping,
                self.ptr,
                self.size,
                self.flags,
                &self.origin,
            )
        }
    }
}

impl Listed for NcclBuffer {
    fn listed<'a>(&'a self, _: &'a LiveState) -> LiveObject<'a> {
        let category = Category::NcclBufferLabel;
        plain(category, self.ptr, self.size, self.flags, &self.origin)
    }
}

impl Listed for Registration {
    fn listed<'a>(&'a self, _: &'a LiveState) -> LiveObject<'a> {
        let category = Category::Registration;
        plain(category, self.handle, self.size, self.flags, &self.origin)
    }
}

impl Listed for Window {
    fn listed<'a>(&'a self, _: &'a LiveState) -> LiveObject<'a> {
        plain(
            Category::Window,
            self.window,
            self.size,
            self.flags,
            &self.origin,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{MemKind, Op};

    fn event(seq: u64, api: Api, context: u64, op: Op) -> Event {
        Event {
            time_ns: seq * 10,
            thread: 1,
            context,
            caller: 0x100,
            ..Event::new(seq, api, op)
        }
    }

    fn malloc(seq: u64, ptr: u64, size: u64, context: u64) -> Event {
        let op = Op::Alloc {
            kind: MemKind::Async,
            ptr,
            size,
            stream: 0,
            pool: 0,
            flags: 0,
            pitch: 0,
        };
        event(seq, Api::CudaMallocAsync, context, op)
    }

    fn free(seq: u64, ptr: u64) -> Event {
        event(seq, Api::CudaFree, 0, Op::Free { ptr, stream: 0 })
    }

    /// One ending: sequence number, address, bytes, ending call.
    type Seen = (u64, u64, u64, Option<EndingCall>);

    /// What each event ended.
    fn endings(events: &[Event]) -> Vec<Vec<Seen>> {
        let mut s = LiveState::new();
        s.record_endings();
        events
            .iter()
            .map(|e| {
                s.apply_event(e);
                s.ended()
                    .iter()
                    .map(|x| (x.seq, x.object.address, x.object.bytes, x.by))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn each_event_lists_what_it_ended_and_nothing_else() {
        let events = [
            malloc(1, 0x10, 100, 0xc1),
            event(2, Api::CuMemAlloc, 0, Op::MarkStep { step: 1 }),
            malloc(3, 0x20, 200, 0xc1),
            free(4, 0x10),
            malloc(5, 0x30, 300, 0xc2),
            event(6, Api::CuCtxDestroy, 0, Op::CtxDestroy { ctx: 0xc1 }),
        ];
        let got = endings(&events);
        let call = |api, seq: u64, step| EndingCall {
            api,
            time_ns: seq * 10,
            step,
        };
        assert_eq!(got[0], []);
        assert_eq!(got[1], []);
        assert_eq!(got[2], []);
        assert_eq!(got[3], [(4, 0x10, 100, Some(call(Api::CudaFree, 4, 1)))]);
        assert_eq!(got[4], []);
        // The teardown ends what was made in the context, not the rest.
        assert_eq!(
            got[5],
            [(6, 0x20, 200, Some(call(Api::CuCtxDestroy, 6, 1)))]
        );
    }

    #[test]
    fn a_free_written_before_its_allocation_ends_it_at_the_free() {
        // The free (seq 2) reaches the file before the allocation it frees (seq 1).
        let got = endings(&[free(2, 0x10), malloc(1, 0x10, 100, 0)]);
        assert_eq!(got[0], []);
        assert_eq!(got[1], [(2, 0x10, 100, None)]);
    }

    #[test]
    fn nothing_is_kept_unless_asked() {
        let mut s = LiveState::new();
        s.apply_event(&malloc(1, 0x10, 100, 0));
        s.apply_event(&free(2, 0x10));
        assert!(s.ended().is_empty());
    }
}
