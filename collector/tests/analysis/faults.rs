//! Anomalies and fragmentation: a planted double free, an unknown free, an unmap of what was
//! never mapped; a partly mapped reservation, a partly mapped handle, and a pool's reserve.

use vramtrace_collector::analysis::{anomalies, fragmentation};
use vramtrace_collector::event::{Api, Op};
use vramtrace_collector::format::{End, Record, Stats};
use vramtrace_collector::live::AnomalyKind;

use crate::support::*;

#[test]
fn the_planted_double_free_and_nothing_else() {
    let mut b = Builder::new();
    b.malloc(site(1), 0x1000, MIB);
    let first_free = b.free(0x1000);
    let double = b.call(
        Api::CudaFree,
        Op::Free {
            ptr: 0x1000,
            stream: 0,
        },
        1,
    );
    b.free(0xdead_0000);
    b.ok(
        Api::CuMemUnmap,
        Op::Unmap {
            ptr: 0x7000_0000,
            size: MIB,
        },
    );
    b.records.push(Record::End(End {
        stats: Stats {
            dropped: 3,
            ..Stats::default()
        },
        ..End::default()
    }));
    let state = b.replay();
    let a = anomalies(&state);
    assert_eq!(a.total, 3);
    assert_eq!(a.count(AnomalyKind::DoubleFree), 1);
    assert_eq!(a.count(AnomalyKind::UnknownFree), 1);
    assert_eq!(a.count(AnomalyKind::UnmapUnmapped), 1);
    assert_eq!(a.double_frees.len(), 1);
    let d = &a.double_frees[0];
    assert_eq!(
        (d.seq, d.address, d.related_seq),
        (double, 0x1000, Some(first_free))
    );
    assert_eq!(a.dropped_events, Some(3));
}

#[test]
fn reserved_against_mapped_and_pool_reserve_against_use() {
    let mut b = Builder::new();
    b.caller = site(40);
    b.ok(
        Api::CuMemAddressReserve,
        Op::Reserve {
            ptr: 0x7000_0000,
            size: 64 * MIB,
            alignment: 0,
            hint: 0,
        },
    );
    b.ok(
        Api::CuMemCreate,
        Op::Create {
            handle: 0x60,
            size: 8 * MIB,
            device: 0,
            handle_types: 0,
        },
    );
    b.ok(
        Api::CuMemCreate,
        Op::Create {
            handle: 0x61,
            size: 4 * MIB,
            device: 0,
            handle_types: 0,
        },
    );
    // 8 MiB at the start, 2 MiB of the second handle 16 MiB in: gaps of 8 and 46 MiB.
    b.ok(
        Api::CuMemMap,
        Op::Map {
            ptr: 0x7000_0000,
            size: 8 * MIB,
            offset: 0,
            handle: 0x60,
        },
    );
    b.ok(
        Api::CuMemMap,
        Op::Map {
            ptr: 0x7000_0000 + 16 * MIB,
            size: 2 * MIB,
            offset: 0,
            handle: 0x61,
        },
    );
    b.malloc_async(site(41), 0x1000_0000, 10 * MIB);
    b.malloc_async(site(41), 0x1100_0000, 6 * MIB);
    b.ok(
        Api::CudaFreeAsync,
        Op::Free {
            ptr: 0x1000_0000,
            stream: 0,
        },
    );
    let state = b.replay();
    let f = fragmentation(&state);
    let v = &f.address_space;
    assert_eq!(
        (v.reservations, v.reserved_bytes, v.mapped_bytes),
        (1, 64 * MIB, 10 * MIB)
    );
    assert_eq!(v.unmapped_bytes, 54 * MIB);
    assert_eq!(v.by_reservation[0].largest_gap, 46 * MIB);
    let p = &f.physical;
    assert_eq!(
        (p.handles, p.bytes, p.mapped_bytes, p.unmapped_bytes),
        (2, 12 * MIB, 10 * MIB, 2 * MIB)
    );
    let pool = &f.pools[0];
    assert_eq!(
        (
            pool.pool.in_use,
            pool.pool.high_water_since_trim,
            pool.free_bytes
        ),
        (6 * MIB, 16 * MIB, 10 * MIB)
    );
    assert_eq!(f.unusable_bytes, 12 * MIB);
    // Device memory allocated: 12 MiB of handles + 6 MiB in use + 10 MiB held by the pool.
    assert_eq!(f.unusable_share, Some(12.0 / 28.0));
}
