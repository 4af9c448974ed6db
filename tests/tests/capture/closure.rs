//! `wl_closure`: one buffer per way of obtaining a driver function pointer (dlsym, dlvsym'd
//! runtime resolver, gpa chain, 4-argument gpa, `_ptsz`, legacy v1, cudaGetDriverEntryPoint,
//! ...ByVersion). Every wrapped path is seen under its exact ABI variant; the legacy 32-bit
//! `cuMemAlloc` is not wrapped by design and shows up as a `Lookup` record instead
//! (tests/standins/README.md, "wl_closure").

use vramtrace_collector::event::Api::*;
use vramtrace_tests::trace::{call, live, Call};
use vramtrace_tests::traced::Workload;

/// The calls that reach a wrapper, in program order (path F, the v1 ABI, is not among them).
#[rustfmt::skip]
fn planted_calls() -> Vec<Call> {
    vec![
        call(CuMemAlloc, None, 0, 0x7000_0000_0000, 69632), // A: dlsym
        call(CuMemAlloc, None, 0, 0x7000_0001_1000, 73728), // B: dlvsym'd ...ByVersion
        call(CuMemFree, None, 0, 0x7000_0001_1000, 0),      //    freed by dlsym'd cuMemFree_v2
        call(CuMemAlloc, None, 0, 0x7000_0001_1000, 77824), // C: gpa_v2 -> gpa -> cuMemAlloc
        call(CuMemAlloc, None, 0, 0x7000_0002_4000, 81920), // D: 4-argument gpa (v1 resolver)
        call(CuMemFree, None, 0, 0x7000_0002_4000, 0),      //    freed by gpa'd cuMemFree_v2
        call(CuMemAllocAsyncPtsz, None, 0, 0x7000_0002_4000, 86016), // E: per-thread stream
        call(CuMemAlloc, None, 0, 0x7000_0003_9000, 94208), // G: cudaGetDriverEntryPoint
        call(CuMemFree, None, 0, 0x7000_0003_9000, 0),      //    entry-point cuMemFree_v2
        call(CuMemCreate, None, 0, 0x1000, 4194304),        // H: ...ByVersion("cuMemCreate")
    ]
}

fn check(w: Workload, dir: &std::path::Path) {
    let trace = w.run_both(dir).single_trace();
    trace.assert_clean("exit");
    trace.assert_counts(&[
        (CuMemAlloc, 5),
        (CuMemFree, 3),
        (CuMemAllocAsyncPtsz, 1),
        (CuMemCreate, 1),
    ]);
    trace.assert_calls(&planted_calls());
    for e in &trace.events {
        assert_eq!(
            trace.owner(e).as_deref(),
            Some("wl_closure"),
            "owner of {e:?}"
        );
    }

    // F: gpa("cuMemAlloc", 3010) and gpa("cuMemFree", 3010) hand out the 32-bit v1 ABI, which
    // has no wrapper: each look-up is recorded once, the planted misses (NULL answers) not at all.
    let lookups: Vec<_> = trace
        .lookups
        .iter()
        .map(|l| (l.via.as_str(), l.symbol.as_str(), l.cuda_version, l.flags))
        .collect();
    assert_eq!(
        lookups,
        [
            ("cuGetProcAddress_v2", "cuMemAlloc", 3010, 0),
            ("cuGetProcAddress_v2", "cuMemFree", 3010, 0),
        ]
    );
    assert_eq!(trace.state.lookups_total(), 2);

    // A, C, E and H; F (90112 B at 0x10000000) went through the unwrapped v1 pointer.
    let o = "wl_closure";
    assert_eq!(
        trace.live(),
        vec![
            live("async", 0x7000_0002_4000, 86016, 0, o, &[]),
            live("device", 0x7000_0000_0000, 69632, 0, o, &[]),
            live("device", 0x7000_0001_1000, 77824, 0, o, &[]),
            live("physical", 0x1000, 4194304, 0, o, &["unmapped"]),
        ]
    );
    let s = trace.state.summary();
    assert_eq!(
        (s.device_memory.count, s.device_memory.bytes),
        (4, 4517888 - 90112)
    );
    assert_eq!(trace.state.failures().total(), 0);
    assert_eq!(trace.state.anomalies().total(), 0);
}

// Pointers that are the library's exported functions (identified by address).
captest!(wl_closure_every_path_is_closed, |dir| {
    check(Workload::new("wl_closure"), dir);
});

// `STANDIN_GPA_INTERNAL=1`: the resolvers hand out internal copies whose addresses match no
// `dlsym` result, so the tracer must pick the ABI by the version rules alone.
captest!(wl_closure_with_internal_entry_points, |dir| {
    check(
        Workload::new("wl_closure").env("STANDIN_GPA_INTERNAL", "1"),
        dir,
    );
});
