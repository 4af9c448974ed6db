//! Processes that fork, run many threads, or die of a signal: one trace per process, nothing
//! lost or reordered under contention, and a readable trace that says how the process ended
//! (tests/standins/README.md, "wl_fork", "wl_threads", "wl_signal").

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::process::ExitStatusExt;
use std::time::Instant;

use vramtrace_collector::event::Api::*;
use vramtrace_collector::event::Op;
use vramtrace_tests::trace::{call, live, Call, Trace};
use vramtrace_tests::traced::Workload;

use crate::MIB;

fn rt_alloc(ptr: u64, size: u64) -> Call {
    call(CudaMalloc, Some(CuMemAlloc), 0, ptr, size)
}

fn rt_free(ptr: u64) -> Call {
    call(CudaFree, Some(CuMemFree), 0, ptr, 0)
}

fn file_name(t: &Trace) -> String {
    t.path.file_name().unwrap().to_string_lossy().into_owned()
}

// `wl_fork 1000` finishes and leaves 1001 traces: the parent's with its own two calls and
// nothing live, and one per child, marked as forked from the parent, with exactly the
// child's three calls and its one 8192-byte leak.
captest!(wl_fork_1000_children_each_write_their_own_trace, |dir| {
    let start = Instant::now();
    let run = Workload::new("wl_fork").arg("1000").run_both(dir);
    eprintln!("wl_fork 1000, plain + traced: {:.1?}", start.elapsed());
    assert_eq!(run.traces.len(), 1001);
    let traces: Vec<Trace> = run.traces.iter().map(|p| Trace::load(p)).collect();
    let (parents, children): (Vec<&Trace>, Vec<&Trace>) =
        traces.iter().partition(|t| t.header.forked_from.is_none());
    assert_eq!(
        parents.len(),
        1,
        "exactly one trace is not a forked child's"
    );
    let parent = parents[0];
    let ppid = parent.header.pid;
    assert_eq!(file_name(parent), format!("t-{ppid}.vtrace"));
    parent.assert_clean("exit");
    parent.assert_calls(&[rt_alloc(0x7000_0000_0000, MIB), rt_free(0x7000_0000_0000)]);
    assert!(parent.live().is_empty(), "{:?}", parent.live());

    let mut pids = BTreeSet::new();
    for child in children {
        let pid = child.header.pid;
        assert!(pids.insert(pid), "pid {pid} twice");
        assert_eq!(file_name(child), format!("t-{pid}.vtrace"));
        assert_eq!(
            (child.header.forked_from, child.header.ppid),
            (Some(ppid), ppid)
        );
        child.assert_clean("exit");
        child.assert_calls(&[
            rt_alloc(0x7000_0010_0000, 4096),
            rt_free(0x7000_0010_0000),
            rt_alloc(0x7000_0010_0000, 8192),
        ]);
        assert_eq!(
            child.live(),
            [live("device", 0x7000_0010_0000, 8192, 0, "wl_fork", &[])]
        );
    }
    assert_eq!(pids.len(), 1000);
});

// 16 threads x 1000 alloc/free pairs with addresses reused across threads: every call is
// in the trace once, in an order where each free comes before the allocation that reuses
// its address, and the live set is exactly the 136 planted leaks (557056 B). Each odd thread's
// first cudaMallocAsync asks the driver twice, the first time in vain (as the real runtime does
// on a thread it has not set up): still one event, no driver allocation of its own.
captest!(wl_threads_every_call_in_causal_order, |dir| {
    let (threads, pairs) = (16u64, 1000u64);
    let run = Workload::new("wl_threads")
        .arg("16")
        .arg("1000")
        .run_both(dir);
    let trace = run.single_trace();
    trace.assert_clean("exit");
    trace.assert_counts(&[
        (CudaMalloc, 8 * pairs + 136),
        (CudaFree, 8 * pairs),
        (CudaMallocAsync, 8 * pairs),
        (CudaFreeAsync, 8 * pairs),
        (CudaMemPoolTrimTo, 1),
    ]);
    // Every event record, the tracer's own samples included, numbered 1, 2, ... in file order.
    let n = trace.seqs.len() as u64;
    assert_eq!(
        trace.seqs,
        (1..=n).collect::<Vec<u64>>(),
        "sequence numbers"
    );
    assert_eq!(trace.events.len(), 32137);

    // Replay in file order: an allocation must never land on an address still live.
    let mut live_now: HashMap<u64, u64> = HashMap::new();
    for e in &trace.events {
        assert!(e.ok(), "{e:?}");
        match e.op {
            Op::Alloc { ptr, size, .. } => {
                let before = live_now.insert(ptr, size);
                assert_eq!(before, None, "seq {}: {ptr:#x} allocated while live", e.seq);
            }
            Op::Free { ptr, .. } => {
                let freed = live_now.remove(&ptr);
                assert!(
                    freed.is_some(),
                    "seq {}: {ptr:#x} freed while not live",
                    e.seq
                );
            }
            _ => {}
        }
    }
    assert_eq!(live_now.len(), 136);

    // Thread t (known by its t + 1 leaks) made M pairs of 512 * (1 + (7i + 3t) mod 64)
    // bytes (odd t: cudaMallocAsync/cudaFreeAsync), then t + 1 cudaMalloc(4096).
    let mut by_thread: BTreeMap<u32, Vec<Call>> = BTreeMap::new();
    for e in trace.events.iter().filter(|e| e.api != CudaMemPoolTrimTo) {
        by_thread.entry(e.thread).or_default().push(Call::of(e));
    }
    assert_eq!(by_thread.len(), threads as usize);
    let mut indexes = BTreeSet::new();
    for calls in by_thread.values() {
        let t = calls.len() as u64 - 2 * pairs - 1;
        assert!(indexes.insert(t), "two threads look like thread {t}");
        let (alloc, free, inner_a, inner_f) = if t % 2 == 1 {
            (
                CudaMallocAsync,
                CudaFreeAsync,
                CuMemAllocAsync,
                CuMemFreeAsync,
            )
        } else {
            (CudaMalloc, CudaFree, CuMemAlloc, CuMemFree)
        };
        for i in 0..pairs as usize {
            let size = 512 * (1 + (7 * i as u64 + 3 * t) % 64);
            let (a, f) = (calls[2 * i], calls[2 * i + 1]);
            assert_eq!(
                (a.api, a.inner, a.size),
                (alloc, Some(inner_a), size),
                "t{t} i{i}"
            );
            assert_eq!((f.api, f.inner, f.object), (free, Some(inner_f), a.object));
        }
        for c in &calls[2 * pairs as usize..] {
            assert_eq!(
                (c.api, c.inner, c.size),
                (CudaMalloc, Some(CuMemAlloc), 4096)
            );
        }
    }
    assert_eq!(indexes, (0..threads).collect());

    let state = &trace.state;
    let s = state.summary();
    assert_eq!(
        (s.device_memory.count, s.device_memory.bytes),
        (136, 557056)
    );
    let by_module: Vec<_> = s
        .by_module
        .iter()
        .map(|m| (m.name.as_deref(), m.count, m.bytes))
        .collect();
    assert_eq!(by_module, [(Some("wl_threads"), 136, 557056)]);
    assert_eq!(
        state.anomalies().total(),
        0,
        "{:?}",
        state.anomalies().details()
    );
    assert_eq!(state.failures().total(), 0);
});

/// The process dies of `signal` with and without the tracer; its trace is whole and ends with
/// the end record naming the signal, after the three planted allocations.
fn dies_of(dir: &std::path::Path, how: &str, signal: i32) {
    let run = Workload::new("wl_signal")
        .arg(how)
        .current_dir(dir)
        .run_both(dir);
    assert_eq!(
        run.output.status.signal(),
        Some(signal),
        "{:?}",
        run.output.status
    );
    let trace = run.single_trace();
    trace.assert_clean(&format!("signal {signal}"));
    trace.assert_calls(&[
        rt_alloc(0x7000_0000_0000, MIB),
        rt_alloc(0x7000_0010_0000, 2 * MIB),
        rt_alloc(0x7000_0030_0000, 3 * MIB),
    ]);
    let o = "wl_signal";
    assert_eq!(
        trace.live(),
        [
            live("device", 0x7000_0000_0000, MIB, 0, o, &[]),
            live("device", 0x7000_0010_0000, 2 * MIB, 0, o, &[]),
            live("device", 0x7000_0030_0000, 3 * MIB, 0, o, &[]),
        ]
    );
}

captest!(wl_signal_segv, |dir| {
    dies_of(dir, "segv", 11);
});

captest!(wl_signal_abort, |dir| {
    dies_of(dir, "abort", 6);
});

captest!(wl_signal_term, |dir| {
    dies_of(dir, "term", 15);
});

// A process-directed SIGTERM while the program's only thread blocks it: the kernel may deliver
// it to any thread that does not, and the tracer's writer thread must not be one (its handler
// would wait for itself and the trace would be lost). It stays pending until the program
// unblocks.
captest!(wl_signal_term_never_lands_on_the_writer_thread, |dir| {
    dies_of(dir, "term-blocked", 15);
});
