//! Pointer allocations, host memory, arrays, IPC, pools, contexts, failures and anomalies.

use vramtrace_collector::event::{Api, MemKind, Op};
use vramtrace_collector::live::{AnomalyKind, Category, Totals};

use crate::support::*;

#[test]
fn live_bytes_are_allocations_minus_frees() {
    let mut t = Trace::new();
    t.malloc(0x1000, 100);
    t.malloc(0x2000, 200);
    t.malloc(0x3000, 300);
    t.free(0x2000);
    let s = t.state.summary();
    assert_eq!(
        s.device_memory,
        Totals {
            count: 2,
            bytes: 400
        }
    );
    assert_eq!(t.state.device_bytes(0), 400);
    assert_eq!(
        listing(&t.state),
        vec![("device", 0x1000, 100), ("device", 0x3000, 300)]
    );
    assert_eq!(t.state.anomalies().total(), 0);
}

#[test]
fn any_device_free_frees_any_device_kind() {
    let mut t = Trace::new();
    t.ok(Api::CudaMallocAsync, alloc(MemKind::Async, 0x1000, 64));
    t.ok(Api::CuMemAllocManaged, alloc(MemKind::Managed, 0x2000, 128));
    t.ok(Api::CudaMallocPitch, alloc(MemKind::Pitched, 0x3000, 256));
    t.malloc(0x4000, 512);
    t.free(0x1000);
    t.ok(
        Api::CuMemFreeAsync,
        Op::Free {
            ptr: 0x4000,
            stream: 7,
        },
    );
    let s = t.state.summary();
    assert_eq!(
        s.device_memory,
        Totals {
            count: 2,
            bytes: 384
        }
    );
    let cats: Vec<_> = s
        .by_category
        .iter()
        .map(|c| (c.category, c.bytes))
        .collect();
    assert_eq!(
        cats,
        vec![(Category::Managed, 128), (Category::Pitched, 256)]
    );
}

#[test]
fn freeing_null_and_allocating_nothing_change_nothing() {
    let mut t = Trace::new();
    t.free(0);
    t.ok(Api::CudaFreeHost, Op::FreeHost { ptr: 0 });
    t.malloc(0, 0);
    assert_eq!(t.state.live_objects().count(), 0);
    assert_eq!(t.state.anomalies().total(), 0);
    assert_eq!(t.state.call_count(Api::CudaFree), 1);
}

#[test]
fn pinned_host_memory_is_separate_from_device_memory() {
    let mut t = Trace::new();
    t.ok(
        Api::CudaMallocHost,
        alloc(MemKind::HostPinned, 0x1000, 4096),
    );
    t.ok(
        Api::CudaHostRegister,
        Op::HostRegister {
            ptr: 0x9000,
            size: 8192,
            flags: 0,
        },
    );
    t.malloc(0x2000, 16);
    // A device free does not free pinned memory: it knows nothing at that address.
    t.free(0x1000);
    let s = t.state.summary();
    assert_eq!(
        s.device_memory,
        Totals {
            count: 1,
            bytes: 16
        }
    );
    assert_eq!(
        s.host_memory,
        Totals {
            count: 2,
            bytes: 12288
        }
    );
    assert_eq!(t.state.anomalies().count(AnomalyKind::UnknownFree), 1);
    t.ok(Api::CudaFreeHost, Op::FreeHost { ptr: 0x1000 });
    t.ok(Api::CudaHostUnregister, Op::HostUnregister { ptr: 0x9000 });
    t.ok(Api::CudaHostUnregister, Op::HostUnregister { ptr: 0x9000 });
    assert_eq!(t.state.summary().host_memory, Totals::default());
    assert_eq!(
        t.state
            .anomalies()
            .count(AnomalyKind::UnknownHostRegistration),
        1
    );
}

#[test]
fn a_failed_call_changes_nothing_and_records_what_was_live() {
    let mut t = Trace::new();
    t.malloc(0x1000, 1 << 30);
    t.device = 1;
    t.malloc(0x2000, 5);
    t.device = 0;
    let seq = t.fail(Api::CudaMalloc, alloc(MemKind::Device, 0, 3 << 30), 2);
    t.fail(
        Api::CudaFree,
        Op::Free {
            ptr: 0x1000,
            stream: 0,
        },
        1,
    );
    t.fail(Api::NcclCommInitRank, comm_init(0, 0, 2), 2);
    assert_eq!(
        t.state.device_bytes(0),
        1 << 30,
        "the failed free freed nothing"
    );
    let f: Vec<_> = t.state.failures().iter().collect();
    assert_eq!(f.len(), 3);
    assert_eq!(f[0].api, Api::CudaMalloc);
    assert_eq!(f[0].seq, seq);
    assert_eq!(f[0].request_bytes, 3 << 30);
    assert_eq!(f[0].live_device_bytes, 1 << 30);
    assert_eq!(f[0].device, 0);
    assert!(f[0].out_of_memory);
    assert!(!f[1].out_of_memory);
    assert!(
        !f[2].out_of_memory,
        "code 2 from NCCL is a system error, not OOM"
    );
    assert_eq!(t.state.failures().count(Api::CudaMalloc), 1);
    let calls = t.state.calls();
    let malloc = calls.iter().find(|c| c.api == Api::CudaMalloc).unwrap();
    assert_eq!((malloc.calls, malloc.failed), (3, 1));
    assert_eq!(
        t.state.anomalies().total(),
        0,
        "a failed free of a live pointer is no anomaly"
    );
}

#[test]
fn free_anomalies_are_told_apart() {
    let mut t = Trace::new();
    t.malloc(0x1000, 8);
    let first_free = t.free(0x1000);
    t.fail(
        Api::CudaFree,
        Op::Free {
            ptr: 0x1000,
            stream: 0,
        },
        1,
    );
    t.fail(
        Api::CudaFree,
        Op::Free {
            ptr: 0x7777,
            stream: 0,
        },
        1,
    );
    t.free(0x8888);
    let a = t.state.anomalies();
    assert_eq!(a.count(AnomalyKind::DoubleFree), 1);
    assert_eq!(a.count(AnomalyKind::InvalidFree), 1);
    assert_eq!(a.count(AnomalyKind::UnknownFree), 1);
    let double = &a.details()[0];
    assert_eq!(double.kind, AnomalyKind::DoubleFree);
    assert_eq!(double.address, 0x1000);
    assert_eq!(double.related_seq, Some(first_free));
    assert_eq!(double.api, Api::CudaFree);
    assert_eq!(double.thread, 100);
    assert_eq!(t.state.failures().total(), 2);
}

#[test]
fn an_allocation_over_a_live_one_replaces_it() {
    let mut t = Trace::new();
    let old = t.malloc(0x1000, 100);
    let new = t.malloc(0x1000, 50);
    assert_eq!(listing(&t.state), vec![("device", 0x1000, 50)]);
    assert_eq!(t.state.device_bytes(0), 50);
    let a = &t.state.anomalies().details()[0];
    assert_eq!(
        (a.kind, a.seq, a.related_seq),
        (AnomalyKind::AddressReused, new, Some(old))
    );
}

#[test]
fn a_late_free_frees_the_allocation_it_followed() {
    let mut t = Trace::new();
    t.at(1, Api::CudaMalloc, alloc(MemKind::Device, 0x1000, 100));
    // Causal order: free(5) then the reuse(6); the writer put the free last.
    t.at(6, Api::CudaMalloc, alloc(MemKind::Device, 0x1000, 40));
    t.at(
        5,
        Api::CudaFree,
        Op::Free {
            ptr: 0x1000,
            stream: 0,
        },
    );
    assert_eq!(t.state.anomalies().total(), 0);
    assert_eq!(listing(&t.state), vec![("device", 0x1000, 40)]);
    assert_eq!(t.state.device_bytes(0), 40);
    t.at(
        9,
        Api::CudaFree,
        Op::Free {
            ptr: 0x1000,
            stream: 0,
        },
    );
    assert_eq!(t.state.device_bytes(0), 0);
    assert_eq!(t.state.anomalies().total(), 0);
}

#[test]
fn late_host_frees_resolve_the_same_way() {
    let mut t = Trace::new();
    t.at(
        1,
        Api::CudaMallocHost,
        alloc(MemKind::HostPinned, 0x1000, 100),
    );
    t.at(
        6,
        Api::CudaMallocHost,
        alloc(MemKind::HostPinned, 0x1000, 40),
    );
    t.at(5, Api::CudaFreeHost, Op::FreeHost { ptr: 0x1000 });
    assert_eq!(t.state.anomalies().total(), 0);
    assert_eq!(
        t.state.summary().host_memory,
        Totals {
            count: 1,
            bytes: 40
        }
    );
}

#[test]
fn a_free_written_before_its_allocation_cancels_it() {
    let mut t = Trace::new();
    t.at(
        5,
        Api::CudaFree,
        Op::Free {
            ptr: 0x1000,
            stream: 0,
        },
    );
    // Numbers 1 to 4 are missing so far: a lost event could explain it.
    assert_eq!(
        t.state.anomalies().doubtful_counts().collect::<Vec<_>>(),
        [(AnomalyKind::UnknownFree, 1)]
    );
    t.at(2, Api::CudaMalloc, alloc(MemKind::Device, 0x1000, 100));
    assert_eq!(t.state.anomalies().total(), 0);
    assert_eq!(t.state.anomalies().doubtful(), 0);
    assert_eq!(t.state.live_objects().count(), 0);
    assert_eq!(t.state.device_bytes(0), 0);
}

#[test]
fn arrays_and_ipc_mappings() {
    let mut t = Trace::new();
    let array = |array, bytes| Op::ArrayCreate {
        array,
        bytes,
        width: 0,
        height: 0,
        depth: 0,
        format: 0,
        channels: 1,
    };
    t.ok(Api::CuArrayCreate, array(0xa1, 1000));
    t.ok(Api::CuArrayCreate, array(0xa2, 24));
    t.ok(Api::CuArrayDestroy, Op::ArrayDestroy { array: 0xa1 });
    t.ok(Api::CuArrayDestroy, Op::ArrayDestroy { array: 0xa9 });
    t.ok(
        Api::CuIpcOpenMemHandle,
        Op::IpcOpen {
            ptr: 0x5000,
            flags: 1,
        },
    );
    t.ok(
        Api::CuIpcOpenMemHandle,
        Op::IpcOpen {
            ptr: 0x6000,
            flags: 1,
        },
    );
    t.ok(Api::CuIpcCloseMemHandle, Op::IpcClose { ptr: 0x5000 });
    t.ok(Api::CuIpcCloseMemHandle, Op::IpcClose { ptr: 0x5000 });
    assert_eq!(
        listing(&t.state),
        vec![("array", 0xa2, 24), ("ipc", 0x6000, 0)]
    );
    assert_eq!(
        t.state.summary().device_memory,
        Totals {
            count: 2,
            bytes: 24
        }
    );
    assert_eq!(t.state.anomalies().count(AnomalyKind::UnknownArray), 1);
    assert_eq!(t.state.anomalies().count(AnomalyKind::UnknownIpc), 1);
}

/// A context released while the driver shuts down (the process exiting) is refused with
/// `CUDA_ERROR_DEINITIALIZED`: counted apart, not a failure; a free refused by the runtime
/// unloading keeps its object live, and the same code from NCCL is a failure like any other.
#[test]
fn calls_refused_at_shutdown_are_not_failures() {
    let mut t = Trace::new();
    t.malloc(0x1000, 1 << 20);
    for _ in 0..3 {
        t.fail(
            Api::CuDevicePrimaryCtxRelease,
            Op::PrimaryCtxRelease { device: 0 },
            4,
        );
    }
    t.fail(
        Api::CudaFree,
        Op::Free {
            ptr: 0x1000,
            stream: 0,
        },
        4,
    );
    t.fail(Api::NcclCommInitRank, comm_init(0, 0, 2), 4);
    let f = t.state.failures();
    assert_eq!((f.total(), f.shutting_down()), (1, 4));
    assert_eq!(f.iter().next().unwrap().api, Api::NcclCommInitRank);
    let apart: Vec<_> = f.shutting_down_by_api().collect();
    assert_eq!(
        apart,
        vec![(Api::CudaFree, 1), (Api::CuDevicePrimaryCtxRelease, 3)]
    );
    assert_eq!(
        t.state.device_bytes(0),
        1 << 20,
        "the refused free freed nothing"
    );
}
