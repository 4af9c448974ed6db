//! Orphans: one planted case of each kind, and nothing else.

use vramtrace_collector::analysis::OrphanKind;
use vramtrace_collector::analysis::{leaks, orphans};
use vramtrace_collector::event::{Api, CommEnd, MemKind, Op};
use vramtrace_collector::live::Category;

use crate::support::*;

fn workload() -> Builder {
    let mut b = Builder::new();
    // A buffer NCCL allocates inside the init of a communicator later destroyed, and one of a
    // communicator later aborted.
    for (comm, scope, ptr, size, how) in [
        (0xc1, 1, 0x1000_0000, MIB, CommEnd::Destroy),
        (0xc2, 2, 0x1100_0000, 2 * MIB, CommEnd::Abort),
    ] {
        b.scope = scope;
        b.malloc(site(30), ptr, size);
        b.ok(Api::NcclCommInitRank, comm_init(comm));
        b.scope = 0;
        b.ok(Api::NcclCommDestroy, comm_end(comm, how));
    }
    // VMM memory made in a context that is then destroyed: reservation, handle and mapping.
    b.ok(
        Api::CuCtxCreateV2,
        Op::CtxCreate {
            ctx: 0xc7,
            device: 0,
            flags: 0,
        },
    );
    b.context = 0xc7;
    b.caller = site(31);
    b.ok(
        Api::CuMemAddressReserve,
        Op::Reserve {
            ptr: 0x7000_0000,
            size: 32 * MIB,
            alignment: 0,
            hint: 0,
        },
    );
    b.ok(
        Api::CuMemCreate,
        Op::Create {
            handle: 0x50,
            size: 16 * MIB,
            device: 0,
            handle_types: 0,
        },
    );
    b.ok(
        Api::CuMemMap,
        Op::Map {
            ptr: 0x7000_0000,
            size: 16 * MIB,
            offset: 0,
            handle: 0x50,
        },
    );
    b.ok(Api::CuCtxDestroy, Op::CtxDestroy { ctx: 0xc7 });
    b.context = 0xc0;
    // An allocation from a pool later destroyed.
    b.ok(
        Api::CudaMemPoolCreate,
        Op::PoolCreate {
            pool: 0x9,
            device: 0,
        },
    );
    b.caller = site(32);
    b.ok(
        Api::CudaMallocFromPoolAsync,
        alloc(MemKind::Async, 0x1200_0000, 4 * MIB, 0x9),
    );
    b.ok(Api::CudaMemPoolDestroy, Op::PoolDestroy { pool: 0x9 });
    // A physical handle nothing maps.
    b.caller = site(33);
    b.ok(
        Api::CuMemCreate,
        Op::Create {
            handle: 0x51,
            size: 8 * MIB,
            device: 0,
            handle_types: 0,
        },
    );
    // A mapping whose reservation is freed under it (the handle's reference released: the
    // mapping keeps the memory alive).
    b.caller = site(34);
    b.ok(
        Api::CuMemAddressReserve,
        Op::Reserve {
            ptr: 0x9000_0000,
            size: 2 * MIB,
            alignment: 0,
            hint: 0,
        },
    );
    b.ok(
        Api::CuMemCreate,
        Op::Create {
            handle: 0x52,
            size: 2 * MIB,
            device: 0,
            handle_types: 0,
        },
    );
    b.ok(
        Api::CuMemMap,
        Op::Map {
            ptr: 0x9000_0000,
            size: 2 * MIB,
            offset: 0,
            handle: 0x52,
        },
    );
    b.ok(Api::CuMemRelease, Op::Release { handle: 0x52 });
    b.ok(
        Api::CuMemAddressFree,
        Op::ReserveFree {
            ptr: 0x9000_0000,
            size: 2 * MIB,
        },
    );
    // A registration whose buffer is freed, on a live communicator.
    b.ok(Api::NcclCommInitRank, comm_init(0xc3));
    b.malloc(site(35), 0x1300_0000, MIB);
    b.ok(
        Api::NcclCommRegister,
        Op::Register {
            comm: 0xc3,
            ptr: 0x1300_0000,
            size: MIB,
            handle: 0xa1,
        },
    );
    b.free(0x1300_0000);
    // A registration whose communicator is destroyed, its buffer live.
    b.ok(Api::NcclCommInitRank, comm_init(0xc4));
    b.malloc(site(36), 0x1400_0000, MIB);
    b.caller = site(37);
    b.ok(
        Api::NcclCommRegister,
        Op::Register {
            comm: 0xc4,
            ptr: 0x1400_0000,
            size: MIB,
            handle: 0xa2,
        },
    );
    b.ok(Api::NcclCommDestroy, comm_end(0xc4, CommEnd::Destroy));
    b
}

#[test]
fn every_orphan_kind_is_found_and_nothing_else() {
    let state = workload().replay();
    let o = orphans(&state);
    let kinds: Vec<(OrphanKind, u64, u64)> = o
        .by_kind
        .iter()
        .map(|k| (k.kind, k.count, k.bytes))
        .collect();
    assert_eq!(
        kinds,
        [
            (OrphanKind::CommunicatorDestroyed, 1, MIB),
            (OrphanKind::CommunicatorAborted, 1, 2 * MIB),
            (OrphanKind::ContextGone, 3, 16 * MIB),
            (OrphanKind::PoolDestroyed, 1, 4 * MIB),
            (OrphanKind::UnmappedHandle, 1, 8 * MIB),
            (OrphanKind::MappingWithoutReservation, 1, 0),
            (OrphanKind::RegistrationBufferGone, 1, 0),
            (OrphanKind::RegistrationCommunicatorGone, 1, 0),
        ]
    );
    assert_eq!((o.total.count, o.total.bytes), (10, 31 * MIB));
    let context: Vec<Category> = o
        .objects
        .iter()
        .filter(|x| x.kind == OrphanKind::ContextGone)
        .map(|x| x.category)
        .collect();
    assert_eq!(
        context,
        [
            Category::Physical,
            Category::ReservationVa,
            Category::Mapping
        ]
    );
    let largest = &o.objects[0];
    assert_eq!(
        (largest.address, largest.site.site.as_str()),
        (0x50, name(site(31)).as_str())
    );
    let aborted = o
        .objects
        .iter()
        .find(|x| x.kind == OrphanKind::CommunicatorAborted)
        .unwrap();
    assert_eq!(aborted.communicator, Some(0xc2));
    // The buffer registered on the destroyed communicator is live, but not an orphan.
    let l = leaks(&state);
    let buffer = l
        .sites
        .iter()
        .find(|s| s.site.site == name(site(36)))
        .unwrap();
    assert_eq!((buffer.count, buffer.bytes, buffer.orphans), (1, MIB, 0));
}
