//! wl_runtime: the runtime API with a planted out-of-memory failure and a double free
//! (tests/standins/README.md, "wl_runtime").

use vramtrace_collector::analysis::{analyze, anomalies, GrowthConfig};
use vramtrace_collector::event::Api::*;
use vramtrace_collector::live::{AnomalyKind, Totals};
use vramtrace_tests::source::workload_source;
use vramtrace_tests::trace::{call, Call, Hex};
use vramtrace_tests::traced::Workload;

use super::{at, event_lines, lines_in};
use crate::MIB;

/// The helper every planted cudaMalloc goes through, at its cudaMalloc line.
const DMALLOC: (&str, &str) = ("dmalloc", "int rc = cudaMalloc(&p, n);");

// cudaMalloc(2 GiB) on device 0 fails when only L1 is live (the temporaries before it were
// freed): the live set of that instant is L1 at its call site, the request another call of the
// same helper. No pool, no unmapped memory: the request simply does not fit.
captest!(wl_runtime_oom_with_the_live_set_of_its_instant, |dir| {
    let trace = Workload::new("wl_runtime").run_traced(dir).single_trace();
    let state = &trace.state;
    let src = workload_source("wl_runtime.c");
    let a = analyze(state, &GrowthConfig::default());
    assert_eq!(
        (a.ooms.total, a.ooms.omitted, a.ooms.failures.len()),
        (1, 0, 1)
    );
    let oom = &a.ooms.failures[0];
    let f = &oom.failure;
    assert_eq!((f.api, f.result, f.out_of_memory), (CudaMalloc, 2, true));
    assert_eq!(
        (f.request_bytes, f.device, f.live_device_bytes),
        (2048 * MIB, 0, MIB)
    );
    let asked = lines_in(state, oom.requester.caller, oom.requester.stack, &src);
    assert_eq!(
        asked,
        at(
            &src,
            &[DMALLOC, ("main", "void *oom = dmalloc(2048 * MiB,")]
        )
    );
    assert_eq!(
        oom.live,
        Totals {
            count: 1,
            bytes: MIB
        }
    );
    let sites: Vec<_> = (oom.by_site.iter())
        .map(|s| {
            (
                s.count,
                s.bytes,
                lines_in(state, s.site.caller, s.site.stack, &src),
            )
        })
        .collect();
    let l1 = at(
        &src,
        &[DMALLOC, ("main", "void *l1 = dmalloc(1 * MiB, 0);")],
    );
    assert_eq!(sites, [(1, MIB, l1)]);
    assert_eq!((oom.other_sites, oom.pools.len()), (Totals::default(), 0));
    let unusable = (
        oom.pool_free_bytes,
        oom.unmapped_physical_bytes,
        oom.free_but_unusable_bytes,
    );
    assert_eq!(unusable, (0, 0, 0));
    assert!(!oom.request_fits_in_unusable && !oom.growing);
    let last = oom.growth.series.points.last().map(|p| p.1);
    assert_eq!(last, Some(MIB), "live bytes at the failure's instant");
});

// The one double free: the second cudaFree of the 8192-byte temporary, pointing at its first
// free; both through the `dfree` helper, from main's two lines. The only other anomalies are
// the two planted frees of pointers never seen (one of them after cudaDeviceReset freed it).
captest!(wl_runtime_double_free_with_its_earlier_free, |dir| {
    let trace = Workload::new("wl_runtime").run_traced(dir).single_trace();
    let src = workload_source("wl_runtime.c");
    let a = anomalies(&trace.state);
    let kinds: Vec<_> = a.by_kind.iter().map(|k| (k.kind, k.count)).collect();
    assert_eq!(
        kinds,
        [(AnomalyKind::DoubleFree, 1), (AnomalyKind::InvalidFree, 2)]
    );
    assert_eq!(
        (a.total, a.dropped_events, a.untraced_entry_points),
        (3, Some(0), 0)
    );
    let invalid: Vec<_> = (a.details.iter())
        .filter(|x| x.kind == AnomalyKind::InvalidFree)
        .map(|x| Hex(x.address))
        .collect();
    assert_eq!(invalid, [Hex(0x7000_dead_be00), Hex(0x7100_0000_0000)]);
    assert_eq!(a.double_frees.len(), 1);
    let df = &a.double_frees[0];
    let temporary = 0x7000_0010_0000;
    assert_eq!((df.api, Hex(df.address)), (CudaFree, Hex(temporary)));
    let by_seq = |seq| {
        trace
            .events
            .iter()
            .find(|e| e.seq == seq)
            .expect("the event")
    };
    let (second, first) = (
        by_seq(df.seq),
        by_seq(df.related_seq.expect("the earlier free")),
    );
    let free = |result| call(CudaFree, Some(CuMemFree), result, temporary, 0);
    assert_eq!((Call::of(first), Call::of(second)), (free(0), free(1)));
    let dfree = ("dfree", "int rc = cudaFree(p);");
    let lines = |e| event_lines(&trace, e, &src);
    assert_eq!(lines(first), at(&src, &[dfree, ("main", "dfree(df, 0);")]));
    let again = ("main", "dfree(df, cudaErrorInvalidValue);");
    assert_eq!(lines(second), at(&src, &[dfree, again]));
    // What the first free freed: the temporary made on the line before it.
    let made = (trace.events.iter().rev())
        .filter(|e| e.seq < first.seq && e.api == CudaMalloc)
        .find(|e| Call::of(e).object == temporary)
        .expect("the temporary's allocation");
    assert_eq!(Call::of(made).size, 8192);
    assert_eq!(
        lines(made),
        at(&src, &[DMALLOC, ("main", "void *df = dmalloc(8192, 0);")])
    );
});
