//! Pools, contexts and device resets: what goes with them and what outlives them.

use vramtrace_collector::event::{Api, MemKind, Op};
use vramtrace_collector::live::{AnomalyKind, Category, Flag, Totals};

use crate::support::*;

#[test]
fn context_destroy_and_device_reset_free_what_they_own() {
    let mut t = Trace::new();
    t.ok(
        Api::CuCtxCreateV2,
        Op::CtxCreate {
            ctx: 0xc1,
            device: 0,
            flags: 0,
        },
    );
    t.context = 0xc1;
    t.malloc(0x1000, 100);
    t.ok(Api::CuMemCreate, create(0x77, 2048, 0));
    t.context = 0xc0; // the primary context
    t.malloc(0x2000, 200);
    t.ok(Api::CudaMallocHost, alloc(MemKind::HostPinned, 0x8000, 50));
    t.device = 1;
    t.malloc(0x3000, 300);
    t.device = 0;
    t.context = 0xc1;
    t.ok(Api::CuCtxDestroy, Op::CtxDestroy { ctx: 0xc1 });
    assert_eq!(
        t.state.teardown().by_context_destroy,
        Totals {
            count: 1,
            bytes: 100
        }
    );
    assert_eq!(t.state.contexts().count(), 0);
    let handle = find(&t.state, Category::Physical, 0x77).unwrap();
    assert!(
        handle.flags.contains(Flag::ContextGone),
        "physical handles outlive contexts"
    );
    t.context = 0xc0;
    let reset = t.ok(Api::CudaDeviceReset, Op::DeviceReset { device: 0 });
    assert_eq!(
        t.state.teardown().by_device_reset,
        Totals {
            count: 2,
            bytes: 250
        }
    );
    assert_eq!(
        listing(&t.state),
        vec![("device", 0x3000, 300), ("physical", 0x77, 2048)]
    );
    assert_eq!(t.state.device_bytes(0), 2048);
    // A free written after the reset that removed its allocation is not an anomaly.
    t.at(
        reset - 1,
        Api::CudaFree,
        Op::Free {
            ptr: 0x2000,
            stream: 0,
        },
    );
    assert_eq!(t.state.anomalies().total(), 0);
    // One written after it is.
    t.free(0x2000);
    assert_eq!(t.state.anomalies().count(AnomalyKind::UnknownFree), 1);
}

#[test]
fn primary_context_reset_spares_created_contexts() {
    let mut t = Trace::new();
    t.ok(
        Api::CuCtxCreateV3,
        Op::CtxCreate {
            ctx: 0xc1,
            device: 0,
            flags: 0,
        },
    );
    t.context = 0xc1;
    t.malloc(0x1000, 100);
    t.context = 0;
    t.malloc(0x2000, 200);
    t.ok(
        Api::CuDevicePrimaryCtxReset,
        Op::PrimaryCtxReset { device: 0 },
    );
    t.ok(
        Api::CuDevicePrimaryCtxRelease,
        Op::PrimaryCtxRelease { device: 0 },
    );
    assert_eq!(listing(&t.state), vec![("device", 0x1000, 100)]);
    assert_eq!(t.state.primary_context_releases(), 1);
}

#[test]
fn a_destroyed_pool_leaves_its_allocations_flagged() {
    let mut t = Trace::new();
    t.ok(
        Api::CudaMemPoolCreate,
        Op::PoolCreate {
            pool: 0x9,
            device: 0,
        },
    );
    let from_pool = |ptr| Op::Alloc {
        kind: MemKind::Async,
        ptr,
        size: 10,
        stream: 1,
        pool: 0x9,
        flags: 0,
        pitch: 0,
    };
    t.ok(Api::CudaMallocFromPoolAsync, from_pool(0x100));
    t.ok(Api::CudaMallocFromPoolAsync, from_pool(0x200));
    t.malloc(0x300, 10);
    t.ok(Api::CudaMemPoolTrimTo, Op::PoolTrim { pool: 0x9, keep: 0 });
    assert_eq!(t.state.pools().next().unwrap().trims, 1);
    t.free(0x100);
    t.ok(Api::CudaMemPoolDestroy, Op::PoolDestroy { pool: 0x9 });
    t.ok(Api::CudaMemPoolDestroy, Op::PoolDestroy { pool: 0x9 });
    assert_eq!(t.state.pools().count(), 0);
    assert_eq!(t.state.pool_trims(), 1);
    let flagged: Vec<_> = t
        .state
        .live_objects()
        .map(|o| (o.address, o.flags.contains(Flag::PoolDestroyed)))
        .collect();
    assert_eq!(flagged, vec![(0x200, true), (0x300, false)]);
    assert_eq!(
        t.state.summary().orphaned,
        Totals {
            count: 1,
            bytes: 10
        }
    );
    assert_eq!(t.state.anomalies().count(AnomalyKind::UnknownPool), 1);
}
