//! Libraries that allocate on the program's behalf: cuBLAS workspaces taken straight from the
//! driver through `dlsym` (`wl_cublas`), and the training loop of `wl_train` (framework caching
//! allocator, cudaMallocAsync history, NCCL, cuBLAS, step marks). Owners are named by the
//! collector's owner resolution: the first module outside libcuda/libcudart.

use vramtrace_collector::event::Api::*;
use vramtrace_collector::event::Op;
use vramtrace_tests::trace::{call, live, Call, ANY};
use vramtrace_tests::traced::Workload;

use crate::MIB;

// WS1 and WS2 are `cuMemAlloc_v2` events owned by libcublas.so.13 (no runtime call above
// them); only WS2 is live at exit. `cublasCreate_v2` initialises with `cudaFree(NULL)`.
captest!(wl_cublas_workspaces_belong_to_libcublas, |dir| {
    let trace = Workload::new("wl_cublas").run_both(dir).single_trace();
    trace.assert_clean("exit");
    trace.assert_counts(&[
        (CudaMalloc, 1),
        (CudaFree, 4),
        (CuMemAlloc, 2),
        (CuMemFree, 1),
    ]);
    trace.assert_calls(&[
        call(CudaFree, None, 0, 0, 0), // cublasCreate_v2 (handle 1)
        call(CudaFree, None, 0, 0, 0), // cublasCreate_v2 (handle 2)
        call(CuMemAlloc, None, 0, 0x7000_0000_0000, 4 * MIB), // WS1
        call(CuMemAlloc, None, 0, 0x7000_0040_0000, 4 * MIB), // WS2
        call(CudaFree, None, 0, 0, 0), // cublasCreate_v2 (handle 3)
        call(CudaMalloc, Some(CuMemAlloc), 0, 0x7000_0080_0000, 4 * MIB), // U
        call(CudaFree, Some(CuMemFree), 0, 0x7000_0080_0000, 0),
        call(CuMemFree, None, 0, 0x7000_0000_0000, 0), // cublasDestroy_v2(handle 1)
    ]);
    let owners: Vec<String> = trace
        .events
        .iter()
        .map(|e| trace.owner(e).unwrap_or_default())
        .collect();
    let (blas, app) = ("libcublas.so.13", "wl_cublas");
    assert_eq!(owners, [blas, blas, blas, blas, blas, app, app, blas]);
    assert_eq!(
        trace.live(),
        vec![live(
            "device",
            0x7000_0040_0000,
            4 * MIB,
            0,
            "libcublas.so.13",
            &[]
        )]
    );
    // cublasStandinGemm(NULL) fails inside cuBLAS: no traced call fails.
    assert_eq!(trace.state.failures().total(), 0);
    assert_eq!(trace.state.anomalies().total(), 0);
});

// 20 steps marked; the 20 history tensors (1 MiB cudaMallocAsync each, one per step, owned
// by libtorch_standin.so) are all that is live; the NCCL registration outlives both its
// buffer and its communicator. Caching segments, the cuBLAS workspace and NCCL's memory are
// freed, each by its owner.
captest!(wl_train_history_leak_and_orphaned_registration, |dir| {
    let trace = Workload::new("wl_train").run_both(dir).single_trace();
    trace.assert_clean("exit");
    trace.assert_counts(&[
        (CudaMalloc, 2),
        (CudaFree, 3),
        (CudaMallocAsync, 21),
        (CudaFreeAsync, 1),
        (CuMemAlloc, 4),
        (CuMemFree, 4),
        (CuMemHostAlloc, 2),
        (CuMemFreeHost, 2),
        (CuMemCreate, 1),
        (CuMemAddressReserve, 1),
        (CuMemMap, 1),
        (CuMemRetainAllocationHandle, 1),
        (CuMemRelease, 2),
        (CuMemUnmap, 1),
        (CuMemAddressFree, 1),
        (NcclCommInitRank, 1),
        (NcclCommRegister, 1),
        (NcclCommDestroy, 1),
        (TracerMarkStep, 20),
    ]);
    // Who allocated what: segments by the framework, the workspace by cuBLAS, the rest of
    // the driver-level memory by NCCL.
    let owned = |api, size| -> Vec<String> {
        trace
            .of(api)
            .into_iter()
            .filter(|e| Call::of(e).size == size)
            .map(|e| trace.owner(e).unwrap_or_default())
            .collect()
    };
    let (fw, nccl) = ("libtorch_standin.so", "libnccl.so.2");
    assert_eq!(owned(CudaMalloc, 2 * MIB), [fw, fw]);
    assert_eq!(owned(CudaMallocAsync, MIB), [fw; 20]);
    assert_eq!(owned(CuMemAlloc, 4 * MIB), ["libcublas.so.13"]);
    assert_eq!(owned(CuMemAlloc, 4096), [nccl, nccl]);
    assert_eq!(owned(CuMemAlloc, MIB), [nccl]);
    assert_eq!(owned(CuMemCreate, 2 * MIB), [nccl]);

    let state = &trace.state;
    assert_eq!(state.steps(), 20);
    let mut rows = trace.live();
    for r in rows.iter_mut().filter(|r| r.category == "registration") {
        r.address = ANY; // a host-side NCCL handle: a heap address
    }
    let mut want: Vec<_> = (0..20u64)
        .map(|k| {
            live(
                "async",
                0x7000_00d0_2000 + k * MIB,
                MIB,
                0,
                "libtorch_standin.so",
                &[],
            )
        })
        .collect();
    want.push(live(
        "registration",
        ANY,
        4 * MIB,
        0,
        "wl_train",
        &["communicator-gone", "buffer-gone"],
    ));
    want.sort();
    assert_eq!(rows, want);
    // History tensor k was made during step k + 1.
    let steps: Vec<u64> = state
        .live_objects()
        .filter(|o| o.category.name() == "async")
        .map(|o| o.origin.step)
        .collect();
    assert_eq!(steps, (1..=20).collect::<Vec<u64>>());
    let s = state.summary();
    assert_eq!(
        (s.device_memory.count, s.device_memory.bytes),
        (20, 20 * MIB)
    );
    let Op::CommInit { comm, .. } = trace.of(NcclCommInitRank)[0].op else {
        panic!("ncclCommInitRank without CommInit")
    };
    let reg = state
        .live_objects()
        .find(|o| o.category.name() == "registration")
        .expect("the registration");
    assert_eq!(reg.origin.communicator, Some(comm));
    assert_eq!(state.failures().total(), 0);
    assert_eq!(state.anomalies().total(), 0);
});
