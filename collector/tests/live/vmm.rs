//! Reservations, physical handles and mappings.

use vramtrace_collector::event::{Api, Op};
use vramtrace_collector::live::{AnomalyKind, Category, Flag, Totals};

use crate::support::*;

const VA: u64 = 0x7000_0000;

fn release(handle: u64) -> Op {
    Op::Release { handle }
}

fn unmap(ptr: u64, size: u64) -> Op {
    Op::Unmap { ptr, size }
}

#[test]
fn a_released_handle_lives_until_unmapped() {
    let mut t = Trace::new();
    t.ok(Api::CuMemAddressReserve, reserve(VA, 1 << 20));
    t.ok(Api::CuMemCreate, create(0x11, 4096, 0));
    t.ok(Api::CuMemMap, map(VA, 4096, 0x11));
    t.ok(Api::CuMemRelease, release(0x11));
    let s = t.state.summary();
    assert_eq!(
        s.device_memory,
        Totals {
            count: 1,
            bytes: 4096
        }
    );
    assert_eq!(
        s.reserved_va,
        Totals {
            count: 1,
            bytes: 1 << 20
        }
    );
    let h = find(&t.state, Category::Physical, 0x11).unwrap();
    assert_eq!((h.refs, h.mappings), (Some(0), Some(1)));
    assert!(h.flags.contains(Flag::Released));
    let m = find(&t.state, Category::Mapping, VA).unwrap();
    assert_eq!((m.handle, m.bytes), (Some(0x11), 4096));
    t.ok(Api::CuMemUnmap, unmap(VA, 4096));
    assert_eq!(t.state.summary().device_memory, Totals::default());
    assert_eq!(t.state.device_bytes(0), 0);
    t.ok(
        Api::CuMemAddressFree,
        Op::ReserveFree {
            ptr: VA,
            size: 1 << 20,
        },
    );
    assert_eq!(t.state.live_objects().count(), 0);
    assert_eq!(t.state.anomalies().total(), 0);
}

#[test]
fn a_handle_never_mapped_goes_on_release() {
    let mut t = Trace::new();
    t.ok(Api::CuMemCreate, create(0x11, 4096, 1));
    let h = find(&t.state, Category::Physical, 0x11).unwrap();
    assert_eq!((h.device, h.refs, h.mappings), (1, Some(1), Some(0)));
    assert!(
        h.flags.contains(Flag::Unmapped),
        "an orphan: nothing maps it"
    );
    assert_eq!(t.state.device_bytes(1), 4096);
    t.ok(Api::CuMemRelease, release(0x11));
    assert_eq!(t.state.live_objects().count(), 0);
    assert_eq!(t.state.device_bytes(1), 0);
}

#[test]
fn one_unmap_may_cover_several_mappings() {
    let mut t = Trace::new();
    t.ok(Api::CuMemAddressReserve, reserve(VA, 0x10000));
    for (i, h) in [0x21u64, 0x22, 0x23].into_iter().enumerate() {
        t.ok(Api::CuMemCreate, create(h, 0x1000, 0));
        t.ok(Api::CuMemMap, map(VA + i as u64 * 0x1000, 0x1000, h));
        t.ok(Api::CuMemRelease, release(h));
    }
    t.ok(Api::CuMemUnmap, unmap(VA, 0x2000));
    assert_eq!(
        listing(&t.state),
        vec![
            ("physical", 0x23, 0x1000),
            ("reservation-va", VA, 0x10000),
            ("mapping", VA + 0x2000, 0x1000)
        ]
    );
    assert_eq!(t.state.anomalies().total(), 0);
}

#[test]
fn an_unmap_that_cuts_a_mapping_removes_nothing() {
    let mut t = Trace::new();
    t.ok(Api::CuMemAddressReserve, reserve(VA, 0x10000));
    t.ok(Api::CuMemCreate, create(0x21, 0x2000, 0));
    t.ok(Api::CuMemMap, map(VA, 0x2000, 0x21));
    t.ok(Api::CuMemUnmap, unmap(VA, 0x1000));
    t.ok(Api::CuMemUnmap, unmap(VA + 0x1000, 0x1000));
    t.ok(Api::CuMemUnmap, unmap(VA + 0x4000, 0x1000));
    let a = t.state.anomalies();
    assert_eq!(a.count(AnomalyKind::PartialUnmap), 2);
    assert_eq!(a.count(AnomalyKind::UnmapUnmapped), 1);
    assert_eq!(a.details()[0].address, VA);
    assert!(find(&t.state, Category::Mapping, VA).is_some());
}

#[test]
fn a_map_outside_any_reservation_is_an_anomaly_but_still_maps() {
    let mut t = Trace::new();
    t.ok(Api::CuMemAddressReserve, reserve(VA, 0x1000));
    t.ok(Api::CuMemCreate, create(0x21, 0x2000, 0));
    t.ok(Api::CuMemMap, map(VA, 0x2000, 0x21)); // runs past the reservation
    t.ok(Api::CuMemMap, map(0x100, 0x10, 0x21));
    assert_eq!(
        t.state
            .anomalies()
            .count(AnomalyKind::MapOutsideReservation),
        2
    );
    let h = find(&t.state, Category::Physical, 0x21).unwrap();
    assert_eq!(h.mappings, Some(2));
}

#[test]
fn unknown_and_over_released_handles() {
    let mut t = Trace::new();
    t.ok(Api::CuMemRelease, release(0x99));
    t.ok(Api::CuMemAddressReserve, reserve(VA, 0x1000));
    t.ok(Api::CuMemMap, map(VA, 0x1000, 0x98));
    let h = find(&t.state, Category::Physical, 0x98).unwrap();
    assert!(h.flags.contains(Flag::Unseen));
    assert_eq!((h.bytes, h.refs, h.mappings), (0, Some(0), Some(1)));
    t.ok(Api::CuMemRelease, release(0x98));
    let a = t.state.anomalies();
    assert_eq!(a.count(AnomalyKind::UnknownHandle), 2);
    assert_eq!(a.count(AnomalyKind::HandleOverRelease), 1);
    t.ok(Api::CuMemUnmap, unmap(VA, 0x1000));
    assert!(find(&t.state, Category::Physical, 0x98).is_none());
}

#[test]
fn retain_adds_a_reference() {
    let mut t = Trace::new();
    t.ok(Api::CuMemAddressReserve, reserve(VA, 0x1000));
    t.ok(Api::CuMemCreate, create(0x21, 0x1000, 0));
    t.ok(Api::CuMemMap, map(VA, 0x1000, 0x21));
    t.ok(
        Api::CuMemRetainAllocationHandle,
        Op::Retain {
            handle: 0x21,
            ptr: VA,
        },
    );
    // A retain naming an unknown handle value finds the handle through the mapping.
    t.ok(
        Api::CuMemRetainAllocationHandle,
        Op::Retain {
            handle: 0x5,
            ptr: VA,
        },
    );
    assert_eq!(
        find(&t.state, Category::Physical, 0x21).unwrap().refs,
        Some(3)
    );
    t.ok(Api::CuMemUnmap, unmap(VA, 0x1000));
    for _ in 0..3 {
        t.ok(Api::CuMemRelease, release(0x21));
    }
    assert_eq!(
        t.state
            .live_objects()
            .filter(|o| o.category == Category::Physical)
            .count(),
        0
    );
    assert_eq!(t.state.anomalies().total(), 0);
}

#[test]
fn an_imported_handle_has_no_known_size() {
    let mut t = Trace::new();
    let import = Op::Import {
        handle: 0x31,
        shareable: 7,
        handle_type: 1,
    };
    t.ok(Api::CuMemImportFromShareableHandle, import.clone());
    let h = find(&t.state, Category::Physical, 0x31).unwrap();
    assert_eq!((h.bytes, h.refs), (0, Some(1)));
    assert!(h.flags.contains(Flag::Imported));
    // Importing a handle already known takes a reference and keeps its size.
    t.ok(Api::CuMemCreate, create(0x32, 512, 0));
    t.ok(
        Api::CuMemImportFromShareableHandle,
        Op::Import {
            handle: 0x32,
            shareable: 8,
            handle_type: 1,
        },
    );
    let h = find(&t.state, Category::Physical, 0x32).unwrap();
    assert_eq!((h.bytes, h.refs), (512, Some(2)));
}

#[test]
fn freeing_a_reservation_under_mappings_flags_them() {
    let mut t = Trace::new();
    t.ok(Api::CuMemAddressReserve, reserve(VA, 0x2000));
    t.ok(Api::CuMemCreate, create(0x21, 0x1000, 0));
    t.ok(Api::CuMemMap, map(VA + 0x1000, 0x1000, 0x21));
    t.ok(
        Api::CuMemAddressFree,
        Op::ReserveFree {
            ptr: VA,
            size: 0x2000,
        },
    );
    t.ok(
        Api::CuMemAddressFree,
        Op::ReserveFree {
            ptr: VA,
            size: 0x2000,
        },
    );
    let m = find(&t.state, Category::Mapping, VA + 0x1000).unwrap();
    assert!(m.flags.contains(Flag::ReservationGone));
    assert_eq!(t.state.summary().reserved_va, Totals::default());
    assert_eq!(
        t.state.anomalies().count(AnomalyKind::UnknownReservation),
        1
    );
}

#[test]
fn a_reused_handle_value_replaces_the_old_handle() {
    let mut t = Trace::new();
    t.ok(Api::CuMemCreate, create(0x21, 100, 0));
    t.ok(Api::CuMemCreate, create(0x21, 30, 0));
    assert_eq!(t.state.device_bytes(0), 30);
    assert_eq!(t.state.anomalies().count(AnomalyKind::HandleReused), 1);
}
