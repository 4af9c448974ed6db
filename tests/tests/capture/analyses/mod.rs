//! The analyses (issue 5) on the stand-in workloads: each finds exactly the planted cases and
//! nothing else. [`train`]: steady growth of the history call site at exactly 1 MiB per step,
//! its 20 buffers the only leak, the orphaned registration the only orphan, the peak;
//! [`driver`]: one orphan of each kind wl_driver plants, reserved against mapped address space,
//! pools' reserve; [`runtime`]: the out-of-memory failure with the live set of that instant, the
//! double free with its earlier free; here: the buffers ended communicators leave, one each.
//!
//! Call sites are checked by the source lines their stacks name (`line_of` on the C sources),
//! never by addresses, which move with ASLR.

mod driver;
mod full;
mod runtime;
mod shapes;
mod train;

use std::path::Path;

use vramtrace_collector::analysis::{orphans, OrphanKind};
use vramtrace_collector::event::{Api, Event, Op};
use vramtrace_collector::live::{Category, LiveState, Totals};
use vramtrace_collector::symbols::{Attribution, CallRef, SymbolSearch, Symbolizer};
use vramtrace_tests::source::line_of;
use vramtrace_tests::trace::{Call, Hex, Trace};
use vramtrace_tests::traced::Workload;

use crate::MIB;

/// `(function, line)` of each native frame of a call's stack that lies in `src`, innermost first.
fn lines_in(state: &LiveState, caller: u64, stack: u32, src: &Path) -> Vec<(String, u32)> {
    let mut symbols = Symbolizer::new(SymbolSearch::only(Vec::new()));
    let mut a = Attribution::of_state(state, &mut symbols);
    let file = src.display().to_string();
    let call = CallRef {
        caller,
        stack,
        py_stack: 0,
    };
    a.stack(call)
        .into_iter()
        .filter(|f| f.file.as_deref() == Some(&*file))
        .map(|f| (f.function.unwrap_or_default(), f.line.unwrap_or(0)))
        .collect()
}

/// The frames [`lines_in`] must find: each function at the line of `src` holding its text.
fn at(src: &Path, frames: &[(&str, &str)]) -> Vec<(String, u32)> {
    frames
        .iter()
        .map(|&(f, text)| (f.to_string(), line_of(src, text)))
        .collect()
}

/// [`lines_in`] for the call an event records.
fn event_lines(trace: &Trace, e: &Event, src: &Path) -> Vec<(String, u32)> {
    lines_in(&trace.state, e.caller, e.stack, src)
}

/// The one successful event of `api` naming `object` (see [`Call::of`]).
fn the_event(trace: &Trace, api: Api, object: u64) -> &Event {
    let found: Vec<&Event> = trace
        .of(api)
        .into_iter()
        .filter(|e| e.ok() && Call::of(e).object == object)
        .collect();
    assert_eq!(found.len(), 1, "{api} of {object:#x}: {found:?}");
    found[0]
}

// STANDIN_NCCL_LEAK_ON_DESTROY=1: every communicator, once destroyed or aborted, leaves its
// 1 MiB all-reduce buffer behind: exactly one orphan per communicator, named, of the kind its
// end says (the main and split communicators destroyed, c2 on device 1 aborted), all owned by
// libnccl.so.2.
captest!(wl_framework_one_orphan_per_ended_communicator, |dir| {
    let w = Workload::new("wl_framework").env("STANDIN_NCCL_LEAK_ON_DESTROY", "1");
    let trace = w.run_traced(dir).single_trace();
    // The communicator each init made (ncclCommSplit also runs once with NOCOLOR: no comm).
    let comm = |api: Api| -> Hex {
        let comms: Vec<u64> = (trace.of(api).iter())
            .filter_map(|e| match &e.op {
                Op::CommInit { comm, color: 0, .. } => Some(*comm),
                Op::CommInitAll { comms, .. } => comms.first().copied(),
                _ => None,
            })
            .collect();
        assert_eq!(comms.len(), 1, "{api}");
        Hex(comms[0])
    };
    use vramtrace_collector::event::Api::*;
    let (main, split, c2) = (
        comm(NcclCommInitRank),
        comm(NcclCommSplit),
        comm(NcclCommInitAll),
    );
    let o = orphans(&trace.state);
    use OrphanKind::*;
    let kinds: Vec<_> = o
        .by_kind
        .iter()
        .map(|k| (k.kind, k.count, k.bytes))
        .collect();
    assert_eq!(
        kinds,
        [
            (CommunicatorDestroyed, 2, 2 * MIB),
            (CommunicatorAborted, 1, MIB)
        ]
    );
    let total = Totals {
        count: 3,
        bytes: 3 * MIB,
    };
    assert_eq!(o.total, total);
    let mut got: Vec<_> = (o.objects.iter())
        .map(|x| {
            assert_eq!(
                (x.kinds.as_slice(), x.category),
                (&[x.kind][..], Category::Device)
            );
            assert_eq!(x.site.module_name.as_deref(), Some("libnccl.so.2"));
            let comm = x.communicator.map(Hex);
            (comm, x.kind, Hex(x.address), x.device_bytes, x.device)
        })
        .collect();
    got.sort();
    // Each communicator's buffer, where NCCL put it on the communicator's device.
    let (destroyed, aborted) = (CommunicatorDestroyed, CommunicatorAborted);
    let buffer = |comm, kind, address, device| (Some(comm), kind, Hex(address), MIB, device);
    let mut want = vec![
        buffer(main, destroyed, 0x7000_0023_2e00, 0),
        buffer(split, destroyed, 0x7000_0033_4e00, 0),
        buffer(c2, aborted, 0x7100_0000_2000, 1),
    ];
    want.sort();
    assert_eq!(got, want);
});

// NCCL allocating inside an intercepted `ncclCommInitRank` (wl_train's process group): the
// captured stack passes through that hook's frames, but the stack a report prints goes from
// libnccl straight to the framework that called it — no frame of the tracer's own.
captest!(
    stacks_inside_an_intercepted_call_show_no_tracer_frames,
    |dir| {
        let trace = Workload::new("wl_train").run_traced(dir).single_trace();
        let e = trace
            .of(Api::CuMemAlloc)
            .into_iter()
            .find(|e| trace.owner(e).as_deref() == Some("libnccl.so.2"))
            .expect("NCCL's first channel buffer");
        let mut symbols = Symbolizer::new(SymbolSearch::only(Vec::new()));
        let mut a = Attribution::of_state(&trace.state, &mut symbols);
        let mut modules: Vec<String> = a
            .stack(CallRef::from(e))
            .into_iter()
            .map(|f| f.module.unwrap_or_default())
            .collect();
        modules.dedup();
        assert_eq!(
            modules,
            [
                "libnccl.so.2",
                "libtorch_standin.so",
                "wl_train",
                "libc.so.6",
                "wl_train"
            ]
        );
    }
);

// `diff` of wl_framework against its `leak` run fails on the one orphan the leak plants (the
// registration reg2, never deregistered before its communicator was destroyed) and names that
// place under the verdict and first in the table, not the NCCL place whose memory changed most
// (the split communicator's buffers, which the verdict does not count).
captest!(wl_framework_diff_names_the_new_orphan, |dir| {
    for d in ["a", "b"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    let a = Workload::new("wl_framework")
        .run_traced(&dir.join("a"))
        .single_trace();
    let b = Workload::new("wl_framework")
        .arg("leak")
        .run_traced(&dir.join("b"))
        .single_trace();
    let out = vramtrace_tests::traced::vramtrace_command()
        .arg("diff")
        .arg(&a.path)
        .arg(&b.path)
        .output()
        .unwrap();
    let said = vramtrace_tests::traced::text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{said}");
    let src = vramtrace_tests::source::workload_source("wl_framework.c");
    let line = line_of(&src, "reg(comm, e1, 3 * MiB, &reg2)");
    let place = format!("main at wl_framework.c:{line} (wl_framework)");
    assert!(
        said.starts_with(&format!(
            "VERDICT  REGRESSION (exit 1): orphans +1 (limit 0)\n  top difference, view driver: \
             {place}: changed, +1 orphan (+0 B of device memory), +0 B live at end\n"
        )),
        "{said}"
    );
    let first = (said.lines())
        .skip_while(|l| !l.starts_with("Changed places"))
        .nth(3)
        .unwrap_or_default();
    assert!(
        first.starts_with(" 1   changed ")
            && first.contains(&format!("main at wl_framework.c:{line} ")),
        "{said}"
    );
});

// Four ranks of wl_framework, rank 2 with its `leak`: rank 2's live memory is under half again
// the median's (not what the table counts as differing), and what sets it apart is its orphan.
// The headline says that, not the number that does not count.
captest!(a_rank_odd_by_its_own_finding_is_named_by_it, |dir| {
    for rank in 0..4 {
        let mut w = Workload::new("wl_framework")
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", "4");
        if rank == 2 {
            w = w.arg("leak");
        }
        let run = w.run_traced(dir);
        assert!(run.output.status.success(), "{}", run.stderr());
    }
    let out = vramtrace_tests::traced::vramtrace_command()
        .arg("report")
        .arg(dir)
        .output()
        .unwrap();
    let shown = vramtrace_tests::traced::text(&out.stdout);
    let src = vramtrace_tests::source::workload_source("wl_framework.c");
    let line = line_of(&src, "reg(comm, e1, 3 * MiB, &reg2)");
    // (Its NCCL host buffers, made within a few 1 ms windows, may read as growth per window
    // too, a finding of its own as well.)
    let headline = (shown.lines())
        .find(|l| l.starts_with("Ranks (4 traces): "))
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(
        headline
            .starts_with("Ranks (4 traces): rank 2 differs most by a finding the others lack: ")
            && headline.contains(&format!(
                "orphan at main at wl_framework.c:{line} (wl_framework)"
            ))
            && !headline.contains("against a median"),
        "{shown}"
    );
});

// wl_soak on a 64 MiB device whose leak of 1 MiB a step fills it: 1376 cudaMalloc calls fail,
// every one out of memory. The report keeps the first and the latest failures (1100), and the
// failures table's title counts the out-of-memory ones in all, as FINDINGS does: not "1376
// (1100 out of memory)", which read as 276 failures of another kind.
captest!(
    the_failures_title_counts_every_out_of_memory_failure,
    |dir| {
        let run = Workload::new("wl_soak")
            .arg("100")
            .arg("50")
            .arg("1")
            .arg("1048576")
            .env("STANDIN_DEVICE_MEM", "64MiB")
            .run_traced(dir);
        let trace = run.single_trace();
        let out = vramtrace_tests::traced::report_of(&trace.path, &[]);
        let text = vramtrace_tests::traced::text(&out.stdout);
        assert!(
            text.contains("\n  out of memory  1376 out-of-memory failures (the first: "),
            "{text}"
        );
        assert!(
            text.contains("\nFailures: 1376 (1376 out of memory), out-of-memory first\n")
                && text.contains("\n  276 more failures were counted but not kept\n"),
            "{text}"
        );
        // `replay --at 'oom 500'` names failure 500 itself (a temporary of 1,091,840 B in step
        // 66), which the out-of-memory section, one per place, does not show.
        let out = vramtrace_tests::traced::vramtrace_command()
            .args(["replay", "--at", "oom 500"])
            .arg(&trace.path)
            .output()
            .unwrap();
        let text = vramtrace_tests::traced::text(&out.stdout);
        assert!(
            text.contains(
                "\n  at        out-of-memory failure 500 (cudaMalloc of 1.0 MiB on device 0 at \
                 temporary at wl_soak.c:55 (wl_soak), in step 66): after event "
            ),
            "{text}"
        );
    }
);
