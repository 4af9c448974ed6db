//! `wl_runtime`: every CUDA runtime entry point through the plain symbol path. Each runtime call
//! is ONE event carrying the driver call it made as `inner`, never a second driver event; the
//! leaks, failures and anomalies are the ones planted (tests/standins/README.md, "wl_runtime").

use vramtrace_collector::event::Api::{self, *};
use vramtrace_collector::live::AnomalyKind;
use vramtrace_tests::trace::{call, live, Call, Hex, ANY};
use vramtrace_tests::traced::Workload;

use crate::MIB;

fn rt(api: Api, inner: Api, result: i32, object: u64, size: u64) -> Call {
    call(api, Some(inner), result, object, size)
}

/// Every event of the run, in program order (a single thread: the sequence is the program's).
#[rustfmt::skip]
fn planted_calls() -> Vec<Call> {
    vec![
        rt(CudaMalloc, CuMemAlloc, 0, 0x7000_0000_0000, MIB), // L1
        rt(CudaMalloc, CuMemAlloc, 0, 0x7000_0010_0000, 4096),
        rt(CudaFree, CuMemFree, 0, 0x7000_0010_0000, 0),
        rt(CudaMalloc, CuMemAlloc, 0, 0x7000_0010_0000, 4096), // the freed address again
        rt(CudaFree, CuMemFree, 0, 0x7000_0010_0000, 0),
        // A failed call keeps the request; the out-pointer is not reported.
        rt(CudaMalloc, CuMemAlloc, 2, 0, 2048 * MIB),
        rt(CudaFree, CuMemFree, 1, 0x7000_dead_be00, 0),
        rt(CudaMalloc, CuMemAlloc, 0, 0x7000_0010_0000, 8192),
        rt(CudaFree, CuMemFree, 0, 0x7000_0010_0000, 0),
        rt(CudaFree, CuMemFree, 1, 0x7000_0010_0000, 0), // the double free
        // cudaMalloc(0) and cudaFree(NULL) never reach the driver: nothing merged.
        call(CudaMalloc, None, 0, 0, 0),
        call(CudaFree, None, 0, 0, 0),
        rt(
            CudaMallocManaged,
            CuMemAllocManaged,
            0,
            0x7000_0010_0000,
            65536,
        ), // L2
        rt(
            CudaMallocManaged,
            CuMemAllocManaged,
            0,
            0x7000_0011_0000,
            4096,
        ),
        rt(CudaFree, CuMemFree, 0, 0x7000_0011_0000, 0),
        rt(CudaMallocHost, CuMemAllocHost, 0, 0x4000_0000_0000, 4096), // L3
        rt(CudaHostAlloc, CuMemHostAlloc, 0, 0x4000_0000_1000, 8192),
        rt(CudaFreeHost, CuMemFreeHost, 0, 0x4000_0000_1000, 0),
        rt(CudaHostRegister, CuMemHostRegister, 0, ANY, 65536),
        rt(CudaHostRegister, CuMemHostRegister, 712, ANY, 65536),
        rt(CudaHostUnregister, CuMemHostUnregister, 0, ANY, 0),
        rt(CudaHostUnregister, CuMemHostUnregister, 713, ANY, 0),
        rt(
            CudaMallocPitch,
            CuMemAllocPitch,
            0,
            0x7000_0011_0000,
            1024 * 10,
        ), // L4
        rt(
            CudaMallocPitch,
            CuMemAllocPitch,
            0,
            0x7000_0011_2800,
            512 * 3,
        ),
        rt(CudaFree, CuMemFree, 0, 0x7000_0011_2800, 0),
        rt(
            CudaMalloc3D,
            CuMemAllocPitch,
            0,
            0x7000_0011_2800,
            512 * 4 * 3,
        ),
        rt(CudaFree, CuMemFree, 0, 0x7000_0011_2800, 0),
        rt(
            CudaMallocArray,
            CuArrayCreate,
            0,
            0x7000_0011_2800,
            256 * 256 * 4,
        ), // L5
        rt(
            CudaMallocArray,
            CuArrayCreate,
            0,
            0x7000_0015_2800,
            64 * 16 * 4,
        ),
        rt(CudaFreeArray, CuArrayDestroy, 0, 0x7000_0015_2800, 0),
        rt(
            CudaMalloc3DArray,
            CuArray3DCreate,
            0,
            0x7000_0015_2800,
            16 * 16 * 4 * 16,
        ),
        rt(CudaFreeArray, CuArrayDestroy, 0, 0x7000_0015_2800, 0),
        rt(CudaMallocAsync, CuMemAllocAsync, 0, 0x7000_0015_2800, 65536),
        rt(CudaFreeAsync, CuMemFreeAsync, 0, 0x7000_0015_2800, 0),
        rt(CudaMallocAsync, CuMemAllocAsync, 0, 0x7000_0015_2800, 65536), // the pool's cache
        rt(CudaFreeAsync, CuMemFreeAsync, 0, 0x7000_0015_2800, 0),
        rt(CudaMemPoolTrimTo, CuMemPoolTrimTo, 0, 0xcd00_0000, 0),
        rt(CudaMemPoolCreate, CuMemPoolCreate, 0, 0xcd00_0200, 0), // P1
        rt(
            CudaMallocFromPoolAsync,
            CuMemAllocFromPoolAsync,
            0,
            0x7000_0015_2800,
            131072,
        ), // L6
        rt(
            CudaMallocFromPoolAsync,
            CuMemAllocFromPoolAsync,
            0,
            0x7000_0017_2800,
            4096,
        ),
        rt(CudaFreeAsync, CuMemFreeAsync, 0, 0x7000_0017_2800, 0),
        rt(CudaMemPoolTrimTo, CuMemPoolTrimTo, 0, 0xcd00_0200, 0),
        rt(CudaMemPoolCreate, CuMemPoolCreate, 0, 0xcd00_0300, 0), // P2
        rt(CudaMemPoolDestroy, CuMemPoolDestroy, 0, 0xcd00_0300, 0),
        // Through the pointer cudaGetDriverEntryPoint("cuMemAlloc") handed out: a driver event.
        call(CuMemAlloc, None, 0, 0x7000_0017_2800, 12288),
        rt(CudaFree, CuMemFree, 0, 0x7000_0017_2800, 0),
        rt(CudaMalloc, CuMemAlloc, 0, 0x7100_0000_0000, 2 * MIB), // L7, device 1
        rt(CudaDeviceReset, CuDevicePrimaryCtxReset, 0, 1, 0),
        rt(CudaFree, CuMemFree, 1, 0x7100_0000_0000, 0),
    ]
}

// The program cannot tell it is traced, and every runtime call is one event with the driver
// call beneath it merged in: no separate driver events.
captest!(wl_runtime_every_call_once_with_its_driver_call, |dir| {
    let trace = Workload::new("wl_runtime").run_both(dir).single_trace();
    trace.assert_clean("exit");
    // The runtime retains each device's primary context once, lazily, on first use of the
    // device: device 0, then device 1 (the second phase), each as its own driver event.
    let retained: Vec<(i32, u64)> = trace
        .retains
        .iter()
        .map(|e| match e.op {
            vramtrace_collector::event::Op::PrimaryCtxRetain { device, ctx } => (device, ctx),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(retained, [(0, 0xcc00_0000), (1, 0xcc00_0100)]);
    trace.assert_counts(&[
        (CudaMalloc, 7),
        (CudaFree, 11),
        (CudaMallocManaged, 2),
        (CudaMallocHost, 1),
        (CudaHostAlloc, 1),
        (CudaFreeHost, 1),
        (CudaHostRegister, 2),
        (CudaHostUnregister, 2),
        (CudaMallocPitch, 2),
        (CudaMalloc3D, 1),
        (CudaMallocArray, 2),
        (CudaMalloc3DArray, 1),
        (CudaFreeArray, 2),
        (CudaMallocAsync, 2),
        (CudaFreeAsync, 3),
        (CudaMallocFromPoolAsync, 2),
        (CudaMemPoolCreate, 2),
        (CudaMemPoolDestroy, 1),
        (CudaMemPoolTrimTo, 2),
        (CudaDeviceReset, 1),
        (CuMemAlloc, 1),
    ]);
    trace.assert_calls(&planted_calls());
    for e in &trace.events {
        assert_eq!(
            trace.owner(e).as_deref(),
            Some("wl_runtime"),
            "owner of {e:?}"
        );
        assert_eq!(e.outer, None, "{e:?}");
    }
    assert_eq!(trace.events.len(), 49);
});

// The live set at exit is the README's leak table L1-L6; device 1's buffer went with
// cudaDeviceReset; the six failures and the three bad frees are reported as planted.
captest!(wl_runtime_leaks_failures_and_anomalies, |dir| {
    let trace = Workload::new("wl_runtime").run_traced(dir).single_trace();
    let state = &trace.state;
    let o = "wl_runtime";
    assert_eq!(
        trace.live(),
        vec![
            live("array", 0x7000_0011_2800, 262144, 0, o, &[]),
            live("async", 0x7000_0015_2800, 131072, 0, o, &[]),
            live("device", 0x7000_0000_0000, MIB, 0, o, &[]),
            live("host-pinned", 0x4000_0000_0000, 4096, 0, o, &[]),
            live("managed", 0x7000_0010_0000, 65536, 0, o, &[]),
            live("pitched", 0x7000_0011_0000, 10240, 0, o, &[]),
        ]
    );
    let s = state.summary();
    assert_eq!((s.device_memory.count, s.device_memory.bytes), (5, 1517568));
    assert_eq!((s.host_memory.count, s.host_memory.bytes), (1, 4096));
    let by_device: Vec<_> = s
        .by_device
        .iter()
        .map(|d| (d.device, d.count, d.bytes))
        .collect();
    assert_eq!(by_device, [(0, 5, 1517568)]);
    assert_eq!(state.device_bytes(1), 0);
    let reset = state.teardown().by_device_reset;
    assert_eq!((reset.count, reset.bytes), (1, 2 * MIB));
    let pools: Vec<u64> = state.pools().map(|p| p.pool).collect();
    assert_eq!(pools, [0xcd00_0200], "P1 is never destroyed, P2 is");

    let failures: Vec<_> = state
        .failures()
        .iter()
        .map(|f| (f.api, f.result, f.request_bytes, f.out_of_memory))
        .collect();
    assert_eq!(
        failures,
        [
            (CudaMalloc, 2, 2048 * MIB, true),
            (CudaFree, 1, 0, false),
            (CudaFree, 1, 0, false),
            (CudaHostRegister, 712, 65536, false),
            (CudaHostUnregister, 713, 0, false),
            (CudaFree, 1, 0, false),
        ]
    );
    let anomalies: Vec<_> = state
        .anomalies()
        .details()
        .iter()
        .map(|a| (a.kind, a.api, Hex(a.address)))
        .collect();
    assert_eq!(
        anomalies,
        [
            (AnomalyKind::InvalidFree, CudaFree, Hex(0x7000_dead_be00)),
            (AnomalyKind::DoubleFree, CudaFree, Hex(0x7000_0010_0000)),
            (AnomalyKind::InvalidFree, CudaFree, Hex(0x7100_0000_0000)),
        ]
    );
    let double = &state.anomalies().details()[1];
    let first_free = trace
        .events
        .iter()
        .filter(|e| e.api == CudaFree && e.ok() && Call::of(e).object == 0x7000_0010_0000)
        .map(|e| e.seq)
        .max();
    assert_eq!(
        double.related_seq, first_free,
        "the double free points at the first free"
    );
});

// Device accounting ends at exit: the tracer's last `cuMemGetInfo` sample comes after the
// program's last call (an `atexit` handler, while the runtime is still up), and on the stand-in
// driver, whose only used memory is what was allocated, nothing is unexplained.
captest!(wl_runtime_device_accounting_is_sampled_at_exit, |dir| {
    let trace = Workload::new("wl_runtime").run_traced(dir).single_trace();
    let last_call = trace.events.iter().map(|e| e.seq).max().unwrap();
    let last_sample = trace.samples.iter().map(|e| e.seq).max().unwrap();
    assert!(last_sample > last_call, "{last_sample} <= {last_call}");
    let accounts: Vec<_> = trace
        .state
        .device_accounts()
        .map(|a| {
            (
                a.device,
                a.last_used,
                a.last_traced,
                a.baseline(),
                a.unexplained(),
            )
        })
        .collect();
    assert_eq!(accounts[0], (0, 1517568, 1517568, 0, 0), "{accounts:?}");
});
