//! `wl_driver`: every driver memory API through the plain symbol path (VMM, pools, IPC, arrays,
//! created and primary contexts), with the leaks, failures and anomalies planted in
//! tests/standins/README.md ("wl_driver").

use vramtrace_collector::event::Api::{self, *};
use vramtrace_collector::live::AnomalyKind;
use vramtrace_tests::trace::{call, live, Call, Hex, ANY};
use vramtrace_tests::traced::Workload;

use crate::MIB;

fn d(api: Api, result: i32, object: u64, size: u64) -> Call {
    call(api, None, result, object, size)
}

/// Every intercepted call of the run, in program order. `cuMemGetAllocationGranularity`,
/// `cuMemSetAccess`, `cuMemExportToShareableHandle`, `cuIpcGetMemHandle`,
/// `cuDeviceGetDefaultMemPool`, `cuMemGetInfo_v2` and `cuDevicePrimaryCtxRetain` allocate nothing
/// and are not traced.
#[rustfmt::skip]
fn planted_calls() -> Vec<Call> {
    let (va1, va2) = (0x6000_0000_0000, 0x6000_0080_0000);
    vec![
        d(CuMemAlloc, 3, 0, 4096),               // before cuInit
        d(CuMemAlloc, 201, 0, 4096),             // before any context
        d(CuMemAlloc, 0, 0x7000_0000_0000, MIB), // D1
        d(CuMemAlloc, 0, 0x7000_0010_0000, 4096),
        d(CuMemFree, 0, 0x7000_0010_0000, 0),
        d(CuMemAlloc, 0, 0x7000_0010_0000, 4096),
        d(CuMemFree, 0, 0x7000_0010_0000, 0),
        d(CuMemAlloc, 1, 0, 0),
        d(CuMemAlloc, 2, 0, 4096 * MIB),
        d(CuMemFree, 1, 0x7000_dead_be00, 0),
        d(CuMemAllocPitch, 0, 0x7000_0010_0000, 3072 * 20), // D2
        d(CuMemAllocPitch, 1, 0, 3000 * 20),                // element size 3: the request
        d(CuMemAllocManaged, 0, 0x7000_0010_f000, 262144),  // D3
        d(CuMemAllocManaged, 0, 0x7000_0014_f000, 8192),
        d(CuMemFree, 0, 0x7000_0014_f000, 0),
        d(CuMemHostAlloc, 0, 0x4000_0000_0000, 8192), // H1
        d(CuMemAllocHost, 0, 0x4000_0000_2000, 4096),
        d(CuMemFreeHost, 0, 0x4000_0000_2000, 0),
        d(CuMemFreeHost, 1, 0x4000_0000_2000, 0),
        d(CuMemHostRegister, 0, ANY, 32768),
        d(CuMemHostRegisterV1, 712, ANY, 32768),
        d(CuMemHostUnregister, 0, ANY, 0),
        d(CuMemHostUnregister, 713, ANY, 0),
        d(CuMemHostRegister, 0, ANY, 16384), // R1
        d(CuMemAddressReserve, 0, va1, 8 * MIB),
        d(CuMemCreate, 0, 0x1000, 2 * MIB), // V1
        d(CuMemCreate, 0, 0x1001, 2 * MIB), // V2
        d(CuMemMap, 0, va1, 2 * MIB),
        d(CuMemMap, 0, va1 + 2 * MIB, 2 * MIB),
        d(CuMemUnmap, 1, va1, 3 * MIB), // cuts V2's mapping
        d(CuMemUnmap, 0, va1 + 2 * MIB, 2 * MIB),
        d(CuMemRelease, 0, 0x1001, 0),
        d(CuMemRelease, 1, 0x1001, 0),
        d(CuMemRetainAllocationHandle, 0, 0x1000, 0),
        d(CuMemRelease, 0, 0x1000, 0),
        d(CuMemRelease, 0, 0x1000, 0),
        d(CuMemAddressFree, 0, va1, 8 * MIB), // V1 still mapped
        d(CuMemCreate, 0, 0x1002, 2 * MIB),   // V3
        d(CuMemCreate, 0, 0x1003, 2 * MIB),   // V4
        d(CuMemImportFromShareableHandle, 0, 0x1003, 0),
        d(CuMemRelease, 0, 0x1003, 0),
        d(CuMemRelease, 0, 0x1003, 0),
        d(CuMemAddressReserve, 0, va2, 4 * MIB),
        d(CuMemCreate, 0, 0x1004, 4 * MIB), // V5
        d(CuMemMap, 0, va2, 4 * MIB),
        d(CuMemUnmap, 0, va2, 4 * MIB),
        d(CuMemRelease, 0, 0x1004, 0),
        d(CuMemAddressFree, 0, va2, 4 * MIB),
        d(CuMemPoolCreate, 0, 0xcd00_0200, 0),
        d(CuMemAllocFromPoolAsync, 0, 0x7000_0014_f000, MIB), // A1
        d(CuMemAllocFromPoolAsync, 0, 0x7000_0024_f000, 65536),
        d(CuMemFreeAsync, 0, 0x7000_0024_f000, 0),
        d(CuMemPoolTrimTo, 0, 0xcd00_0200, 0),
        d(CuMemPoolDestroy, 0, 0xcd00_0200, 0),
        d(CuMemAllocAsync, 0, 0x7000_0024_f000, 4096),
        d(CuMemFreeAsync, 0, 0x7000_0024_f000, 0),
        d(CuMemAllocAsyncPtsz, 0, 0x7000_0024_f000, 4096),
        d(CuMemFreeAsyncPtsz, 0, 0x7000_0024_f000, 0),
        d(CuMemAllocFromPoolAsyncPtsz, 0, 0x7000_0024_f000, 4096),
        d(CuMemFreeAsync, 0, 0x7000_0024_f000, 0),
        d(CuMemPoolTrimTo, 0, 0xcd00_0000, 0),
        d(CuMemAlloc, 0, 0x7000_0024_f000, 65536),
        d(CuIpcOpenMemHandle, 0, 0x5000_0000_0000, 0),
        d(CuIpcCloseMemHandle, 0, 0x5000_0000_0000, 0),
        d(CuIpcOpenMemHandleV1, 0, 0x5000_0000_0000, 0), // X1
        d(CuMemFree, 0, 0x7000_0024_f000, 0),
        d(CuArrayCreate, 0, 0x7000_0024_f000, 1024 * 512 * 4), // AR1
        d(CuArray3DCreate, 0, 0x7000_0044_f000, 64 * 64 * 8 * 4),
        d(CuArrayDestroy, 0, 0x7000_0044_f000, 0),
        d(CuArrayDestroy, 400, 0x7000_0044_f000, 0),
        d(CuCtxCreateV2, 0, 0xcc00_0200, 0),
        d(CuMemAlloc, 0, 0x7000_0044_f000, MIB),
        d(CuMemAllocManaged, 0, 0x7000_0054_f000, 65536),
        d(CuCtxCreateV4, 0, 0xcc00_0300, 0),
        d(CuMemAlloc, 0, 0x7100_0000_0000, 2 * MIB),
        d(CuCtxDestroy, 0, 0xcc00_0300, 0),
        d(CuCtxDestroy, 0, 0xcc00_0200, 0),
        d(CuCtxDestroy, 201, 0xcc00_0200, 0),
        d(CuCtxCreateV3, 0, 0xcc00_0400, 0),
        d(CuMemAlloc, 0, 0x7000_0044_f000, 4096),
        d(CuCtxDestroy, 0, 0xcc00_0400, 0),
        d(CuMemAlloc, 0, 0x7100_0000_0000, MIB), // device 1, primary context
        d(CuDevicePrimaryCtxRelease, 0, 1, 0),   // to 0: frees that 1 MiB
        d(CuMemAlloc, 201, 0, 4096),
        d(CuMemAlloc, 0, 0x7100_0000_0000, 3 * MIB),
        d(CuDevicePrimaryCtxReset, 0, 1, 0),
        d(CuDevicePrimaryCtxResetV1, 0, 1, 0),
        d(CuDevicePrimaryCtxReleaseV1, 0, 1, 0),
    ]
}

// Each driver entry point is seen under its exact exported name (`_v2`, `_ptsz`, the v1
// ABIs), once per call, with the object and size it named.
captest!(wl_driver_every_call_once_under_its_exact_name, |dir| {
    let trace = Workload::new("wl_driver").run_both(dir).single_trace();
    trace.assert_clean("exit");
    trace.assert_counts(&[
        (CuMemAlloc, 14),
        (CuMemFree, 5),
        (CuMemAllocPitch, 2),
        (CuMemAllocManaged, 3),
        (CuMemHostAlloc, 1),
        (CuMemAllocHost, 1),
        (CuMemFreeHost, 2),
        (CuMemHostRegister, 2),
        (CuMemHostRegisterV1, 1),
        (CuMemHostUnregister, 2),
        (CuMemAddressReserve, 2),
        (CuMemAddressFree, 2),
        (CuMemCreate, 5),
        (CuMemMap, 3),
        (CuMemUnmap, 3),
        (CuMemRelease, 7),
        (CuMemRetainAllocationHandle, 1),
        (CuMemImportFromShareableHandle, 1),
        (CuMemPoolCreate, 1),
        (CuMemPoolDestroy, 1),
        (CuMemPoolTrimTo, 2),
        (CuMemAllocFromPoolAsync, 2),
        (CuMemAllocFromPoolAsyncPtsz, 1),
        (CuMemAllocAsync, 1),
        (CuMemAllocAsyncPtsz, 1),
        (CuMemFreeAsync, 3),
        (CuMemFreeAsyncPtsz, 1),
        (CuIpcOpenMemHandle, 1),
        (CuIpcOpenMemHandleV1, 1),
        (CuIpcCloseMemHandle, 1),
        (CuArrayCreate, 1),
        (CuArray3DCreate, 1),
        (CuArrayDestroy, 2),
        (CuCtxCreateV2, 1),
        (CuCtxCreateV3, 1),
        (CuCtxCreateV4, 1),
        (CuCtxDestroy, 4),
        (CuDevicePrimaryCtxRelease, 1),
        (CuDevicePrimaryCtxReleaseV1, 1),
        (CuDevicePrimaryCtxReset, 1),
        (CuDevicePrimaryCtxResetV1, 1),
    ]);
    trace.assert_calls(&planted_calls());
    for e in &trace.events {
        assert_eq!(
            trace.owner(e).as_deref(),
            Some("wl_driver"),
            "owner of {e:?}"
        );
    }
});

// What is live at exit is the README's ten items D1-AR1 (8712192 B on device 0); what the
// created contexts and the device-1 primary context held is gone with them.
captest!(wl_driver_live_set_is_the_leak_table, |dir| {
    let trace = Workload::new("wl_driver").run_traced(dir).single_trace();
    let o = "wl_driver";
    let mut rows = trace.live();
    // R1 is a static buffer of the program: its address moves with ASLR.
    for r in rows.iter_mut().filter(|r| r.category == "host-registered") {
        r.address = ANY;
    }
    assert_eq!(
        rows,
        vec![
            live("array", 0x7000_0024_f000, 2 * MIB, 0, o, &[]), // AR1
            live("async", 0x7000_0014_f000, MIB, 0, o, &["pool-destroyed"]), // A1
            live("device", 0x7000_0000_0000, MIB, 0, o, &[]),    // D1
            live("host-pinned", 0x4000_0000_0000, 8192, 0, o, &[]), // H1
            live("host-registered", ANY, 16384, 0, o, &[]),      // R1
            live("ipc", 0x5000_0000_0000, 0, 0, o, &[]),         // X1
            live("managed", 0x7000_0010_f000, 262144, 0, o, &[]), // D3
            // V1's reservation is gone; the mapping alone keeps its bytes.
            live(
                "mapping",
                0x6000_0000_0000,
                2 * MIB,
                0,
                o,
                &["reservation-gone"]
            ),
            live("physical", 0x1000, 2 * MIB, 0, o, &["released"]), // V1
            live("physical", 0x1002, 2 * MIB, 0, o, &["unmapped"]), // V3
            live("pitched", 0x7000_0010_0000, 61440, 0, o, &[]),    // D2
        ]
    );
    let state = &trace.state;
    let s = state.summary();
    assert_eq!((s.device_memory.count, s.device_memory.bytes), (8, 8712192));
    assert_eq!(
        (s.host_memory.count, s.host_memory.bytes),
        (2, 8192 + 16384)
    );
    assert_eq!((s.reserved_va.count, s.reserved_va.bytes), (0, 0));
    let by_device: Vec<_> = s
        .by_device
        .iter()
        .map(|d| (d.device, d.count, d.bytes))
        .collect();
    assert_eq!(by_device, [(0, 8, 8712192)]);
    let teardown = state.teardown();
    // 0xcc000200: 1 MiB + 64 KiB managed; 0xcc000300: 2 MiB; 0xcc000400: 4096.
    let by_ctx = teardown.by_context_destroy;
    assert_eq!(
        (by_ctx.count, by_ctx.bytes),
        (4, MIB + 65536 + 2 * MIB + 4096)
    );
    // Device 1: the 1 MiB made in its primary context goes when the last traced reference is
    // released (cuDevicePrimaryCtxRelease_v2), the 3 MiB made after the next retain goes with
    // cuDevicePrimaryCtxReset_v2.
    let by_reset = teardown.by_device_reset;
    assert_eq!((by_reset.count, by_reset.bytes), (2, 4 * MIB));
    assert_eq!(state.contexts().count(), 0);
    assert_eq!(state.pools().count(), 0);
});

// The planted failures (all but `cuMemExportToShareableHandle`, which is not traced) with
// their codes and requests, and exactly two anomalies: the invalid free and the double free
// of pinned host memory. Releasing device 1's primary context to 0 freed its 1 MiB, so the
// 3 MiB allocation at the same address later is no address reuse.
captest!(wl_driver_failures_and_anomalies, |dir| {
    let trace = Workload::new("wl_driver").run_traced(dir).single_trace();
    let state = &trace.state;
    let failures: Vec<_> = state
        .failures()
        .iter()
        .map(|f| (f.api, f.result, f.request_bytes))
        .collect();
    assert_eq!(
        failures,
        [
            (CuMemAlloc, 3, 4096),
            (CuMemAlloc, 201, 4096),
            (CuMemAlloc, 1, 0),
            (CuMemAlloc, 2, 4096 * MIB),
            (CuMemFree, 1, 0),
            (CuMemAllocPitch, 1, 60000),
            (CuMemFreeHost, 1, 0),
            (CuMemHostRegisterV1, 712, 32768),
            (CuMemHostUnregister, 713, 0),
            (CuMemUnmap, 1, 0),
            (CuMemRelease, 1, 0),
            (CuArrayDestroy, 400, 0),
            (CuCtxDestroy, 201, 0),
            (CuMemAlloc, 201, 4096),
        ]
    );
    let oom: Vec<_> = state
        .failures()
        .iter()
        .filter(|f| f.out_of_memory)
        .collect();
    assert_eq!(oom.len(), 1);
    assert_eq!(
        oom[0].live_device_bytes, MIB,
        "D1 was live when 4 GiB failed"
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
            (AnomalyKind::InvalidFree, CuMemFree, Hex(0x7000_dead_be00)),
            (
                AnomalyKind::DoubleFree,
                CuMemFreeHost,
                Hex(0x4000_0000_2000)
            ),
        ]
    );
});
