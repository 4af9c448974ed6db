//! `wl_framework`: a framework loaded `RTLD_LOCAL` with its three allocators, and NCCL reached
//! through the framework's scope. NCCL's own memory (its hidden static runtime and driver calls
//! through `cuGetProcAddress`) is owned by libnccl.so.2 and attributed to the communicator that
//! made it; what a destroyed communicator leaves behind is orphaned
//! (tests/standins/README.md, "wl_framework" and "NCCL per-communicator allocations").

use std::collections::BTreeMap;

use vramtrace_collector::event::Api::{self, *};
use vramtrace_collector::event::Op;
use vramtrace_collector::live::CommState;
use vramtrace_tests::trace::{live, Call, Hex, LiveRow, Trace, ANY};
use vramtrace_tests::traced::{text, Workload};

use crate::MIB;

const FW: &str = "libtorch_standin.so";
const NCCL: &str = "libnccl.so.2";

/// Events per (owner, API). `leak`: the split communicator is never destroyed and reg2 never
/// deregistered; `orphan` (STANDIN_NCCL_LEAK_ON_DESTROY=1): a destroyed communicator does not
/// free its 1 MiB all-reduce buffer.
pub(crate) fn planted_counts(leak: bool, orphan: bool) -> BTreeMap<(String, Api), u64> {
    let ended = if leak { 2 } else { 3 }; // communicators destroyed or aborted
    let lazy_freed = if orphan { 0 } else { ended };
    let rows: &[(&str, Api, u64)] = &[
        // The framework: 2 caching segments (one emptied), 3 expandable pages (one released),
        // 2 async tensors (one freed), and the process group it creates and destroys.
        (FW, CudaMalloc, 2),
        (FW, CudaFree, 1),
        (FW, CudaMallocAsync, 2),
        (FW, CudaFreeAsync, 1),
        (FW, CuMemAddressReserve, 1),
        (FW, CuMemCreate, 3),
        (FW, CuMemMap, 3),
        (FW, CuMemUnmap, 1),
        (FW, CuMemRelease, 1),
        (FW, NcclCommInitRank, 1),
        (FW, NcclCommDestroy, 1),
        // NCCL: per communicator 2 channels + lazy buffer, proxy VMM, 2 host buffers; the
        // ncclMemAlloc buffer; teardown with the retain / release twice pattern.
        (NCCL, CuMemAlloc, 9),
        (NCCL, CuMemFree, 2 * ended + lazy_freed),
        (NCCL, CuMemHostAlloc, 6),
        (NCCL, CuMemFreeHost, 2 * ended),
        (NCCL, CuMemCreate, 4),
        (NCCL, CuMemAddressReserve, 4),
        (NCCL, CuMemMap, 4),
        (NCCL, CuMemRetainAllocationHandle, ended + 1),
        (NCCL, CuMemRelease, 2 * ended + 2),
        (NCCL, CuMemUnmap, ended + 1),
        (NCCL, CuMemAddressFree, ended + 1),
        // The program's own NCCL calls.
        ("wl_framework", NcclCommSplit, 2),
        ("wl_framework", NcclCommDestroy, if leak { 0 } else { 1 }),
        ("wl_framework", NcclCommInitAll, 1),
        ("wl_framework", NcclCommAbort, 1),
        ("wl_framework", NcclCommFinalize, 1),
        ("wl_framework", NcclMemAlloc, 1),
        ("wl_framework", NcclMemFree, 1),
        ("wl_framework", NcclCommRegister, 2),
        ("wl_framework", NcclCommDeregister, if leak { 2 } else { 3 }),
        ("wl_framework", NcclCommWindowRegister, 1),
        ("wl_framework", NcclCommWindowDeregister, 1),
    ];
    rows.iter()
        .filter(|r| r.2 > 0)
        .map(|&(o, api, n)| ((o.to_string(), api), n))
        .collect()
}

/// The framework's allocations live at exit in every configuration (README table).
fn framework_live() -> Vec<(LiveRow, Option<Hex>)> {
    [
        live("async", 0x7000_0020_0000, 200000, 0, FW, &[]), // the driver accounts 200192
        live("device", 0x7000_0000_0000, 2 * MIB, 0, FW, &[]), // caching segment S0
        live("mapping", 0x6000_0000_0000, 2 * MIB, 0, FW, &[]),
        live("mapping", 0x6000_0020_0000, 2 * MIB, 0, FW, &[]),
        live("physical", 0x1000, 2 * MIB, 0, FW, &[]),
        live("physical", 0x1001, 2 * MIB, 0, FW, &[]),
        live("reservation-va", 0x6000_0000_0000, 64 * MIB, 0, FW, &[]),
    ]
    .into_iter()
    .map(|r| (r, None))
    .collect()
}

/// The three communicators the run creates: the main one, the split one, c2 on device 1.
struct Comms {
    main: u64,
    split: u64,
    c2: u64,
}

fn comms(trace: &Trace) -> Comms {
    let init = |api: Api, color: Option<i32>| -> u64 {
        let found: Vec<u64> = trace
            .of(api)
            .iter()
            .filter_map(|e| match &e.op {
                Op::CommInit { comm, color: c, .. } if color.is_none_or(|k| k == *c) => Some(*comm),
                Op::CommInitAll { comms, .. } => comms.first().copied(),
                _ => None,
            })
            .collect();
        assert_eq!(found.len(), 1, "{api}: {found:x?}");
        found[0]
    };
    Comms {
        main: init(NcclCommInitRank, None),
        split: init(NcclCommSplit, Some(0)),
        c2: init(NcclCommInitAll, None),
    }
}

/// Communicators the trace knows, with their state.
fn comm_states(trace: &Trace) -> Vec<(Hex, CommState)> {
    let mut v: Vec<_> = trace
        .state
        .communicators()
        .map(|c| (Hex(c.comm), c.state))
        .collect();
    v.sort();
    v
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

fn run(dir: &std::path::Path, leak: bool, orphan: bool) -> Trace {
    run_with(dir, leak, orphan, Workload::new("wl_framework"))
}

fn run_with(dir: &std::path::Path, leak: bool, orphan: bool, mut w: Workload) -> Trace {
    if leak {
        w = w.arg("leak");
    }
    if orphan {
        w = w.env("STANDIN_NCCL_LEAK_ON_DESTROY", "1");
    }
    let trace = w.run_both(dir).single_trace();
    trace.assert_clean("exit");
    assert_eq!(trace.owner_counts(), planted_counts(leak, orphan));
    // ncclCommDeregister(bogus) -> ncclInvalidArgument; ncclGroupEnd and fw_free are not traced.
    let failures: Vec<_> = trace
        .state
        .failures()
        .iter()
        .map(|f| (f.api, f.result))
        .collect();
    assert_eq!(failures, [(NcclCommDeregister, 4)]);
    trace
}

// Everything NCCL allocated is freed by destroy/abort; only the framework's four
// allocations (and its reservation and mappings) are live. `ncclCommSplit(NOCOLOR)`
// returns no communicator, so the trace knows exactly three.
captest!(
    wl_framework_nccl_memory_is_freed_with_its_communicators,
    |dir| {
        let trace = run(dir, false, false);
        let c = comms(&trace);
        assert_eq!(trace.live_with_communicators(), framework_live());
        let s = trace.state.summary();
        assert_eq!(
            (s.device_memory.count, s.device_memory.bytes),
            (4, 6491648 - 192)
        );
        assert_eq!(trace.state.anomalies().total(), 0);
        assert_eq!(
            comm_states(&trace),
            sorted(vec![
                (Hex(c.main), CommState::Destroyed),
                (Hex(c.split), CommState::Destroyed),
                (Hex(c.c2), CommState::Aborted),
            ])
        );
    }
);

// `leak`: the split communicator's init allocations, its all-reduce buffer and both host
// buffers (the 64 KiB one made by its proxy thread) are live, owned by libnccl.so.2 and
// attributed to the split communicator; reg2 outlives the main communicator.
captest!(wl_framework_leaked_split_communicator, |dir| {
    let trace = run(dir, true, false);
    let c = comms(&trace);
    let s = Some(Hex(c.split));
    let mut want = framework_live();
    want.extend([
        (live("device", 0x7000_0033_2e00, 4096, 0, NCCL, &[]), s),
        (live("device", 0x7000_0033_3e00, 4096, 0, NCCL, &[]), s),
        (live("device", 0x7000_0033_4e00, MIB, 0, NCCL, &[]), s),
        (live("host-pinned", 0x4000_0001_1000, 4096, 0, NCCL, &[]), s),
        (
            live("host-pinned", 0x4000_0001_2000, 65536, 0, NCCL, &[]),
            s,
        ),
        (live("mapping", 0x6000_0420_0000, 2 * MIB, 0, NCCL, &[]), s),
        (live("physical", 0x1005, 2 * MIB, 0, NCCL, &[]), s),
        (
            live("reservation-va", 0x6000_0420_0000, 2 * MIB, 0, NCCL, &[]),
            s,
        ),
        (
            live(
                "registration",
                ANY,
                3 * MIB,
                0,
                "wl_framework",
                &["communicator-gone"],
            ),
            Some(Hex(c.main)),
        ),
    ]);
    let mut got = trace.live_with_communicators();
    for (r, _) in got.iter_mut().filter(|(r, _)| r.category == "registration") {
        r.address = ANY; // a host-side NCCL handle
    }
    assert_eq!(got, sorted(want));
    let summary = trace.state.summary();
    let dev: Vec<_> = summary
        .by_device
        .iter()
        .map(|d| (d.device, d.bytes))
        .collect();
    assert_eq!(dev, [(0, 9645568 - 192)]);
    assert_eq!(
        comm_states(&trace),
        sorted(vec![
            (Hex(c.main), CommState::Destroyed),
            (Hex(c.split), CommState::Live),
            (Hex(c.c2), CommState::Aborted),
        ])
    );
    // ncclCommSplit does not say the new communicator's rank or size: none, not "-1/0".
    let ranks: Vec<_> = (summary.by_communicator.iter())
        .map(|t| (Hex(t.comm), t.rank, t.nranks))
        .collect();
    assert!(ranks.contains(&(Hex(c.split), None, None)), "{ranks:?}");
    assert!(
        ranks.contains(&(Hex(c.main), Some(0), Some(1))),
        "{ranks:?}"
    );
    // The split communicator, never destroyed, is in the note on what is held until exit, with
    // the device memory of its buffers (it was only among the note's bytes).
    let a = vramtrace_collector::analysis::analyze(
        &trace.state,
        &vramtrace_collector::analysis::GrowthConfig::default(),
    );
    let teardown = (a.diagnosis.iter())
        .find(|f| f.class == vramtrace_collector::analysis::FindingClass::TeardownOnly)
        .unwrap_or_else(|| panic!("{:#?}", a.diagnosis));
    assert!(
        teardown
            .cause
            .contains("; of it, 3.0 MiB is the buffers of 1 NCCL communicator never destroyed")
            && teardown.fix.ends_with(
                "; a communicator made for a new group (new_group, split) is released with \
                 ncclCommDestroy or dist.destroy_process_group(group)"
            ),
        "{teardown:#?}"
    );
});

/// The orphans of a run with STANDIN_NCCL_LEAK_ON_DESTROY=1, with their communicators.
fn orphans(trace: &Trace) -> Vec<(&'static str, Hex, u64, i32, Option<Hex>)> {
    let mut v: Vec<_> = trace
        .state
        .orphans()
        .map(|o| {
            let c = o.origin.communicator.map(Hex);
            (o.category.name(), Hex(o.address), o.bytes, o.device, c)
        })
        .collect();
    v.sort();
    v
}

// STANDIN_NCCL_LEAK_ON_DESTROY=1: each destroyed or aborted communicator leaves its 1 MiB
// all-reduce buffer behind, listed as an orphan of that communicator.
captest!(wl_framework_orphans_of_destroyed_communicators, |dir| {
    let trace = run(dir, false, true);
    let c = comms(&trace);
    assert_eq!(
        orphans(&trace),
        [
            ("device", Hex(0x7000_0023_2e00), MIB, 0, Some(Hex(c.main))),
            ("device", Hex(0x7000_0033_4e00), MIB, 0, Some(Hex(c.split))),
            ("device", Hex(0x7100_0000_2000), MIB, 1, Some(Hex(c.c2))),
        ]
    );
    for (row, _) in trace
        .live_with_communicators()
        .iter()
        .filter(|(r, _)| r.bytes == MIB)
    {
        assert_eq!(row.owner.as_deref(), Some(NCCL), "{row:?}");
        assert_eq!(row.flags, ["communicator-gone"], "{row:?}");
    }
    let s = trace.state.summary();
    let dev: Vec<_> = s.by_device.iter().map(|d| (d.device, d.bytes)).collect();
    assert_eq!(dev, [(0, 8588800 - 192), (1, MIB)]);
    assert_eq!((s.orphaned.count, s.orphaned.bytes), (3, 3 * MIB));
});

// STANDIN_GPA_INTERNAL=1: libcudart's and NCCL's driver tables come from resolvers that hand out
// internal copies (addresses no dlsym returns), so the wrappers must be chosen by the version
// rules alone; the calls and the live set are the same.
captest!(wl_framework_with_internal_entry_points, |dir| {
    let w = Workload::new("wl_framework").env("STANDIN_GPA_INTERNAL", "1");
    let trace = run_with(dir, false, false, w);
    assert_eq!(trace.live_with_communicators(), framework_live());
    assert_eq!(trace.state.anomalies().total(), 0);
});

// Both at once: the split communicator is never destroyed, so its buffer stays its own
// (not an orphan); the main and c2 buffers are orphans.
captest!(wl_framework_orphans_and_leaked_communicator, |dir| {
    let trace = run(dir, true, true);
    let c = comms(&trace);
    let device_orphans: Vec<_> = orphans(&trace)
        .into_iter()
        .filter(|o| o.0 == "device")
        .collect();
    assert_eq!(
        device_orphans,
        [
            ("device", Hex(0x7000_0023_2e00), MIB, 0, Some(Hex(c.main))),
            ("device", Hex(0x7100_0000_2000), MIB, 1, Some(Hex(c.c2))),
        ]
    );
    let split_buffer: Vec<_> = trace
        .live_with_communicators()
        .into_iter()
        .filter(|(r, _)| r.address == 0x7000_0033_4e00)
        .collect();
    assert_eq!(
        split_buffer,
        [(
            live("device", 0x7000_0033_4e00, MIB, 0, NCCL, &[]),
            Some(Hex(c.split))
        )]
    );
    let s = trace.state.summary();
    let dev: Vec<_> = s.by_device.iter().map(|d| (d.device, d.bytes)).collect();
    assert_eq!(dev, [(0, 9645568 - 192 + MIB), (1, MIB)]);
});

// NCCL's own ground truth (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ALLOC): every pointer it
// prints is exactly one allocation owned by libnccl.so.2 in the trace, with that size.
captest!(nccl_debug_alloc_lines_match_the_trace, |dir| {
    let w = Workload::new("wl_framework")
        .env("NCCL_DEBUG", "INFO")
        .env("NCCL_DEBUG_SUBSYS", "ALLOC");
    let plain = w.run_plain();
    let traced = w.run_traced(dir);
    // The lines carry pid and tid; the rest of each line and the transcript must match.
    let strip = |s: &[u8]| -> Vec<String> {
        text(s)
            .lines()
            .map(|l| match l.find(" NCCL INFO ") {
                Some(i) => l[i..].to_string(),
                None => l.to_string(),
            })
            .collect()
    };
    assert_eq!(strip(&plain.stdout), strip(&traced.output.stdout));
    assert_eq!(plain.status, traced.output.status);
    let mut printed: Vec<(bool, Hex, u64)> = Vec::new();
    for l in traced
        .stdout()
        .lines()
        .filter(|l| l.contains(" NCCL INFO "))
    {
        let host = l.contains(" Cuda Host Alloc ");
        let (size, ptr) = l
            .split_once(" Alloc Size ")
            .and_then(|(_, rest)| rest.split_once(" pointer 0x"))
            .unwrap_or_else(|| panic!("unexpected NCCL line: {l}"));
        let ptr = u64::from_str_radix(ptr, 16).expect("hex pointer");
        printed.push((host, Hex(ptr), size.parse().expect("size")));
    }
    assert_eq!(printed.len(), 13 + 6);
    let trace = traced.single_trace();
    // Device memory: cudaMalloc in NCCL's static runtime (cuMemAlloc_v2), VMM buffers at the
    // address they are mapped at; host memory: cuMemHostAlloc.
    let seen: Vec<(bool, Hex, u64)> = trace
        .events
        .iter()
        .filter(|e| trace.owner(e).as_deref() == Some(NCCL))
        .filter(|e| matches!(e.api, CuMemAlloc | CuMemMap | CuMemHostAlloc))
        .map(|e| {
            (
                e.api == CuMemHostAlloc,
                Hex(Call::of(e).object),
                Call::of(e).size,
            )
        })
        .collect();
    assert_eq!(sorted(seen), sorted(printed));
});
