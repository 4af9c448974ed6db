//! Communicators, attribution of NCCL's memory, buffers, registrations and windows.

use vramtrace_collector::event::{Api, CommEnd, MemKind, Op};
use vramtrace_collector::live::{AnomalyKind, Category, CommState, Flag, Totals};

use crate::support::*;

/// The communicator of the live object at `address` of `category`.
fn comm_of(t: &Trace, category: Category, address: u64) -> Option<u64> {
    find(&t.state, category, address)
        .expect("object is live")
        .origin
        .communicator
}

#[test]
fn memory_made_inside_an_init_belongs_to_its_communicator() {
    let mut t = Trace::new();
    t.caller = NCCL + 0x10;
    t.scope = 11;
    t.malloc(0x1000, 100);
    t.ok(Api::CuMemCreate, create(0x41, 2048, 0));
    t.malloc(0x2000, 7); // a temporary, freed inside the call
    t.free(0x2000);
    t.caller = APP + 0x10;
    t.ok(Api::NcclCommInitRank, comm_init(0xc0ffee, 1, 4));
    t.scope = 0;
    assert_eq!(comm_of(&t, Category::Device, 0x1000), Some(0xc0ffee));
    assert_eq!(comm_of(&t, Category::Physical, 0x41), Some(0xc0ffee));
    let c = t.state.communicators().next().unwrap();
    assert_eq!(
        (c.comm, c.rank, c.nranks, c.device, c.state),
        (0xc0ffee, 1, 4, 0, CommState::Live)
    );
    let s = t.state.summary();
    assert_eq!(s.by_communicator.len(), 1);
    let bc = &s.by_communicator[0];
    assert_eq!(
        (bc.comm, bc.state, bc.count, bc.bytes),
        (0xc0ffee, Some(CommState::Live), 2, 2148)
    );
    assert_eq!(s.without_communicator, Totals::default());
    // The scope is closed: later memory with the same scope id is not attributed.
    t.scope = 11;
    t.malloc(0x3000, 1);
    t.scope = 0;
    assert_eq!(comm_of(&t, Category::Device, 0x3000), None);
}

#[test]
fn init_all_attributes_by_device() {
    let mut t = Trace::new();
    t.caller = NCCL + 0x10;
    t.scope = 12;
    t.malloc(0x1000, 10);
    t.device = 1;
    t.malloc(0x2000, 20);
    t.ok(Api::CuMemCreate, create(0x41, 30, 1));
    t.device = 0;
    t.ok(
        Api::NcclCommInitAll,
        Op::CommInitAll {
            comms: vec![0xa, 0xb],
            devices: vec![0, 1],
        },
    );
    assert_eq!(comm_of(&t, Category::Device, 0x1000), Some(0xa));
    assert_eq!(comm_of(&t, Category::Device, 0x2000), Some(0xb));
    assert_eq!(comm_of(&t, Category::Physical, 0x41), Some(0xb));
    let comms: Vec<_> = t
        .state
        .communicators()
        .map(|c| (c.comm, c.rank, c.nranks, c.device))
        .collect();
    assert_eq!(comms, vec![(0xa, 0, 2, 0), (0xb, 1, 2, 1)]);
}

#[test]
fn other_nccl_calls_leave_their_memory_unattributed_and_labels_add_no_bytes() {
    let mut t = Trace::new();
    t.ok(Api::NcclCommInitRank, comm_init(0xa, 0, 2));
    t.caller = NCCL + 0x10;
    t.scope = 13;
    t.ok(Api::CuMemCreate, create(0x51, 4096, 0));
    t.caller = APP + 0x10;
    t.ok(
        Api::NcclMemAlloc,
        Op::NcclMemAlloc {
            ptr: 0x9000,
            size: 4096,
        },
    );
    t.scope = 0;
    assert_eq!(comm_of(&t, Category::Physical, 0x51), None);
    let s = t.state.summary();
    assert_eq!(
        s.device_memory,
        Totals {
            count: 1,
            bytes: 4096
        }
    );
    let label = s
        .by_category
        .iter()
        .find(|c| c.category == Category::NcclBufferLabel)
        .unwrap();
    assert_eq!((label.count, label.bytes), (1, 4096));
    t.ok(Api::NcclMemFree, Op::NcclMemFree { ptr: 0x9000 });
    t.ok(Api::NcclMemFree, Op::NcclMemFree { ptr: 0x9000 });
    assert!(find(&t.state, Category::NcclBufferLabel, 0x9000).is_none());
    assert_eq!(t.state.anomalies().count(AnomalyKind::UnknownNcclBuffer), 1);
}

#[test]
fn memory_from_nccls_own_threads_is_attributed() {
    let mut t = Trace::new();
    let init = |t: &mut Trace, thread, device, scope, comm| {
        let (old_thread, old_device) = (t.thread, t.device);
        t.thread = thread;
        t.device = device;
        t.scope = scope;
        t.caller = APP + 0x10;
        t.ok(Api::NcclCommInitRank, comm_init(comm, 0, 1));
        t.scope = 0;
        t.thread = old_thread;
        t.device = old_device;
    };
    let nccl_alloc = |t: &mut Trace, thread, device, ptr| {
        t.thread = thread;
        t.device = device;
        t.caller = NCCL + 0x20;
        t.malloc(ptr, 8);
    };
    // Before any communicator: waits for the next one on its device.
    nccl_alloc(&mut t, 200, 0, 0x100);
    init(&mut t, 100, 0, 21, 0xa1);
    assert_eq!(comm_of(&t, Category::Device, 0x100), Some(0xa1));
    // The thread that initialised a communicator.
    nccl_alloc(&mut t, 100, 0, 0x200);
    assert_eq!(comm_of(&t, Category::Device, 0x200), Some(0xa1));
    // Two communicators on device 0: a thread without history cannot be placed.
    init(&mut t, 101, 0, 22, 0xa2);
    nccl_alloc(&mut t, 200, 0, 0x300);
    assert_eq!(comm_of(&t, Category::Device, 0x300), None);
    nccl_alloc(&mut t, 101, 0, 0x400);
    assert_eq!(comm_of(&t, Category::Device, 0x400), Some(0xa2));
    // The only communicator on device 1.
    init(&mut t, 102, 1, 23, 0xb1);
    nccl_alloc(&mut t, 300, 1, 0x500);
    assert_eq!(comm_of(&t, Category::Device, 0x500), Some(0xb1));
    // Memory the application asked for is never NCCL's.
    t.thread = 100;
    t.device = 0;
    t.caller = APP + 0x30;
    t.malloc(0x600, 8);
    assert_eq!(comm_of(&t, Category::Device, 0x600), None);
    // The waiting allocation goes to the next communicator on device 0.
    init(&mut t, 103, 0, 24, 0xa3);
    assert_eq!(comm_of(&t, Category::Device, 0x300), Some(0xa3));
    assert_eq!(comm_of(&t, Category::Device, 0x600), None);
}

#[test]
fn a_destroyed_communicators_remaining_memory_is_orphaned() {
    let mut t = Trace::new();
    t.caller = NCCL + 0x10;
    t.scope = 31;
    t.malloc(0x1000, 100);
    t.malloc(0x2000, 200);
    t.caller = APP;
    t.ok(Api::NcclCommInitRank, comm_init(0xa, 0, 2));
    t.caller = NCCL + 0x10;
    t.scope = 32;
    t.free(0x1000);
    t.caller = APP;
    t.ok(Api::NcclCommDestroy, comm_end(0xa, CommEnd::Destroy));
    t.scope = 0;
    let o = find(&t.state, Category::Device, 0x2000).unwrap();
    assert!(o.flags.contains(Flag::CommunicatorGone));
    let orphans: Vec<_> = t.state.orphans().map(|o| (o.address, o.bytes)).collect();
    assert_eq!(orphans, vec![(0x2000, 200)]);
    let c = t.state.communicators().next().unwrap();
    assert_eq!(c.state, CommState::Destroyed);
    assert!(c.ended_seq.is_some());
    let s = t.state.summary();
    let bc = &s.by_communicator[0];
    assert_eq!(
        (bc.comm, bc.state, bc.count, bc.bytes),
        (0xa, Some(CommState::Destroyed), 1, 200)
    );
    assert_eq!(
        s.orphaned,
        Totals {
            count: 1,
            bytes: 200
        }
    );
    // The id is reused by a new communicator: the old one's memory stays apart.
    t.ok(Api::NcclCommInitRank, comm_init(0xa, 0, 2));
    let s = t.state.summary();
    let states: Vec<_> = s
        .by_communicator
        .iter()
        .map(|c| (c.state, c.bytes))
        .collect();
    assert_eq!(
        states,
        vec![
            (Some(CommState::Destroyed), 200),
            (Some(CommState::Live), 0)
        ]
    );
}

#[test]
fn finalize_abort_and_unknown_communicators() {
    let mut t = Trace::new();
    t.ok(Api::NcclCommInitRank, comm_init(0xa, 0, 2));
    t.ok(Api::NcclCommInitRank, comm_init(0xb, 1, 2));
    t.ok(Api::NcclCommFinalize, comm_end(0xa, CommEnd::Finalize));
    t.ok(Api::NcclCommAbort, comm_end(0xb, CommEnd::Abort));
    t.ok(Api::NcclCommDestroy, comm_end(0xc, CommEnd::Destroy));
    let states: Vec<_> = t.state.communicators().map(|c| (c.comm, c.state)).collect();
    assert_eq!(
        states,
        vec![(0xa, CommState::Finalized), (0xb, CommState::Aborted)]
    );
    assert_eq!(
        t.state.anomalies().count(AnomalyKind::UnknownCommunicator),
        1
    );
}

#[test]
fn registrations_and_windows_track_their_buffer_and_communicator() {
    let mut t = Trace::new();
    t.ok(Api::NcclCommInitRank, comm_init(0xa, 0, 2));
    t.ok(Api::CudaMalloc, alloc(MemKind::Device, 0x1000, 4096));
    t.ok(
        Api::NcclCommRegister,
        Op::Register {
            comm: 0xa,
            ptr: 0x1000,
            size: 4096,
            handle: 0x71,
        },
    );
    t.ok(
        Api::NcclCommWindowRegister,
        Op::WindowRegister {
            comm: 0xa,
            ptr: 0x1010,
            size: 16,
            window: 0x81,
            flags: 0,
        },
    );
    let r = find(&t.state, Category::Registration, 0x71).unwrap();
    assert!(r.flags.is_empty());
    assert_eq!((r.bytes, r.origin.communicator), (4096, Some(0xa)));
    let s = t.state.summary();
    assert_eq!(
        (
            s.by_communicator[0].registrations,
            s.by_communicator[0].windows
        ),
        (1, 1)
    );
    assert_eq!(
        s.device_memory,
        Totals {
            count: 1,
            bytes: 4096
        },
        "registrations add no bytes"
    );
    t.free(0x1000);
    assert!(find(&t.state, Category::Registration, 0x71)
        .unwrap()
        .flags
        .contains(Flag::BufferGone));
    assert!(find(&t.state, Category::Window, 0x81)
        .unwrap()
        .flags
        .contains(Flag::BufferGone));
    t.ok(Api::NcclCommDestroy, comm_end(0xa, CommEnd::Destroy));
    let r = find(&t.state, Category::Registration, 0x71).unwrap();
    assert!(r.flags.contains(Flag::CommunicatorGone));
    t.ok(
        Api::NcclCommDeregister,
        Op::Deregister {
            comm: 0xa,
            handle: 0x71,
        },
    );
    t.ok(
        Api::NcclCommDeregister,
        Op::Deregister {
            comm: 0xa,
            handle: 0x71,
        },
    );
    t.ok(
        Api::NcclCommWindowDeregister,
        Op::WindowDeregister {
            comm: 0xa,
            window: 0x81,
        },
    );
    t.ok(
        Api::NcclCommWindowDeregister,
        Op::WindowDeregister {
            comm: 0xa,
            window: 0x99,
        },
    );
    assert_eq!(t.state.live_objects().count(), 0);
    assert_eq!(
        t.state.anomalies().count(AnomalyKind::UnknownRegistration),
        1
    );
    assert_eq!(t.state.anomalies().count(AnomalyKind::UnknownWindow), 1);
}

#[test]
fn a_failed_init_leaves_its_memory_unattributed() {
    let mut t = Trace::new();
    t.caller = NCCL;
    t.scope = 41;
    t.malloc(0x1000, 10);
    t.fail(Api::NcclCommInitRank, comm_init(0, 0, 2), 1);
    t.scope = 0;
    assert_eq!(comm_of(&t, Category::Device, 0x1000), None);
    assert_eq!(t.state.communicators().count(), 0);
}
