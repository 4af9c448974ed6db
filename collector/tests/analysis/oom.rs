//! Out-of-memory forensics: three planted failures, with the live set, the pool's unused memory
//! and the growth that led to each.

use vramtrace_collector::analysis::{ooms, GrowthConfig};
use vramtrace_collector::event::{Api, MemKind, Op};

use crate::support::*;

const A: u64 = site(10);
const B: u64 = site(11);
const REQUESTER: u64 = site(12);
const SCRATCH: u64 = site(13);
const OUT_OF_MEMORY: i32 = 2;

fn workload() -> Builder {
    let mut b = Builder::new();
    for step in 1..=3u64 {
        b.mark(step);
        b.malloc(A, 0x1000_0000 * step, 256 * MIB);
    }
    b.malloc(B, 0x5000_0000, 100 * MIB);
    b.mark(4);
    // 200 MiB through the default pool, freed: the pool keeps it until trimmed.
    b.malloc_async(SCRATCH, 0x6000_0000, 200 * MIB);
    b.ok(
        Api::CudaFreeAsync,
        Op::Free {
            ptr: 0x6000_0000,
            stream: 0,
        },
    );
    b.caller = REQUESTER;
    b.call(
        Api::CudaMalloc,
        alloc(MemKind::Device, 0, 512 * MIB, 0),
        OUT_OF_MEMORY,
    );
    b.call(
        Api::CudaMalloc,
        alloc(MemKind::Device, 0, 128 * MIB, 0),
        OUT_OF_MEMORY,
    );
    b.ok(
        Api::CudaMemPoolTrimTo,
        Op::PoolTrim {
            pool: 0x77,
            keep: 0,
        },
    );
    b.call(
        Api::CudaMalloc,
        alloc(MemKind::Device, 0, 128 * MIB, 0),
        OUT_OF_MEMORY,
    );
    // A failure that is not out of memory is no OOM.
    b.call(Api::CudaMalloc, alloc(MemKind::Device, 0, MIB, 0), 1);
    b
}

#[test]
fn each_oom_has_its_request_live_set_and_free_but_unusable_memory() {
    let state = workload().replay();
    let r = ooms(&state, &GrowthConfig::default());
    assert_eq!((r.total, r.omitted, r.failures.len()), (3, 0, 3));
    let requests: Vec<(u64, u64, bool)> = r
        .failures
        .iter()
        .map(|f| {
            (
                f.failure.request_bytes,
                f.pool_free_bytes,
                f.request_fits_in_unusable,
            )
        })
        .collect();
    assert_eq!(
        requests,
        [
            (512 * MIB, 200 * MIB, false),
            (128 * MIB, 200 * MIB, true),
            (128 * MIB, 0, false),
        ]
    );
    let first = &r.failures[0];
    assert_eq!(first.requester.site, name(REQUESTER));
    assert_eq!((first.failure.device, first.failure.origin.step), (0, 4));
    assert_eq!((first.live.count, first.live.bytes), (4, 868 * MIB));
    assert_eq!(first.failure.live_device_bytes, 868 * MIB);
    let by_site: Vec<(String, u64, u64)> = first
        .by_site
        .iter()
        .map(|s| (s.site.site.clone(), s.count, s.bytes))
        .collect();
    assert_eq!(by_site, [(name(A), 3, 768 * MIB), (name(B), 1, 100 * MIB)]);
    assert_eq!(first.other_sites.count, 0);
    assert_eq!(first.unmapped_physical_bytes, 0);
    let pool = &first.pools[0];
    assert_eq!(
        (pool.pool, pool.in_use, pool.high_water_since_trim),
        (0, 0, 200 * MIB)
    );
    // Samples at the start of each step (none before the first), then the failure's instant.
    let points: Vec<(u64, u64)> = first.growth.series.points.clone();
    assert_eq!(
        points,
        [
            (0, 0),
            (1, 256 * MIB),
            (2, 512 * MIB),
            (3, 868 * MIB),
            (4, 868 * MIB)
        ]
    );
    assert_eq!(first.growth.series.axis, "steps");
    assert!(first.growth.fit.unwrap().slope > 0.0);
    let a = &first.growth_by_site[0];
    assert_eq!(a.site.site, name(A));
    assert_eq!(
        a.growth.series.points,
        [
            (0, 0),
            (1, 256 * MIB),
            (2, 512 * MIB),
            (3, 768 * MIB),
            (4, 768 * MIB)
        ]
    );
}
