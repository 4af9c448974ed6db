//! wl_shapes: training loops without step marks, one per shape a run's memory takes (warm-up
//! then flat, an inner loop inside each step, a staircase of communicators, a leak that starts
//! late, a leak whose memory the teardown frees, a periodic evaluation; tests/workloads/
//! wl_shapes.c). The steps come from the allocation pattern, and each shape gets exactly its
//! planted steps, rate and place.

use std::path::Path;

use vramtrace_collector::analysis::{analyze, Analysis, FindingClass, GrowthConfig, Severity};
use vramtrace_collector::format::TraceReader;
use vramtrace_collector::live::{Holder, LiveState, SampleAxis, StepSource};
use vramtrace_tests::source::{line_of, standin_source, workload_source};
use vramtrace_tests::traced::{text, vramtrace_command, Workload};

use super::lines_in;
use crate::MIB;

const DEVICE0: Holder = Holder::Device { device: 0 };

fn replay(path: &Path, source: StepSource) -> LiveState {
    let mut reader = TraceReader::open(path).expect("opening the trace");
    let mut state = LiveState::with_step_source(source);
    state.replay(&mut reader);
    state
}

/// wl_shapes SHAPE traced, and read as `vramtrace report` reads it: once, then again with the
/// steps of its allocation pattern.
fn shape(dir: &Path, name: &str) -> (std::path::PathBuf, LiveState, Analysis) {
    let trace = Workload::new("wl_shapes")
        .arg(name)
        .run_traced(dir)
        .single_trace();
    let first = replay(&trace.path, StepSource::Marks);
    assert_eq!(first.marks(), 0, "wl_shapes marks no steps");
    let pattern = first.step_pattern().expect("an allocation pattern");
    let state = replay(&trace.path, pattern.source());
    let analysis = analyze(&state, &GrowthConfig::default());
    (trace.path.clone(), state, analysis)
}

/// Steps found, and (kinds repeating every step, recurring kinds) of the pattern.
fn steps(a: &Analysis) -> (&str, u64, u64, u64) {
    let s = &a.steps;
    let p = s.pattern.as_ref().expect("the pattern");
    (s.source, s.steps, p.in_step, p.kinds)
}

/// The line of wl_shapes.c's `function` among the frames of a site's stack.
fn line_in(state: &LiveState, caller: u64, stack: u32, function: &str) -> Option<u32> {
    let src = workload_source("wl_shapes.c");
    lines_in(state, caller, stack, &src)
        .into_iter()
        .find(|(f, _)| f == function)
        .map(|(_, line)| line)
}

fn keep_line() -> u32 {
    let src = workload_source("wl_shapes.c");
    line_of(&src, "/* a history tensor kept across steps */")
}

// Three cache buffers in steps 1 to 3 (8, 4 and 2 MiB), then nothing: the warm-up ends at the
// sample after step 3, nothing grows, nothing alerts, and the caches are held until exit.
captest!(wl_shapes_warm_up_then_flat_is_no_growth, |dir| {
    let (_, _, a) = shape(dir, "warmup");
    assert_eq!(steps(&a), ("pattern", 30, 12, 12));
    let g = &a.growth;
    assert_eq!(g.axis, SampleAxis::Steps);
    assert!(g.steady.is_empty() && !g.alert, "{:#?}", g.steady);
    let device = g.holders.iter().find(|h| h.holder == DEVICE0).unwrap();
    assert_eq!(device.course.phases.steady_from, 3);
    assert_eq!(device.course.phases.late_rise, None);
    let classes: Vec<_> = a.diagnosis.iter().map(|f| f.class).collect();
    assert_eq!(classes, [FindingClass::TeardownOnly]);
    assert_eq!(a.diagnosis[0].evidence.bytes, 14 * MIB);
});

// Forty scratch pairs inside each of 20 steps: 20 steps (not 820), and the history grows at
// exactly 1 MiB a step at keep's line.
captest!(wl_shapes_an_inner_loop_is_inside_the_step, |dir| {
    let (path, state, a) = shape(dir, "inner");
    assert_eq!(steps(&a), ("pattern", 20, 14, 14));
    let g = &a.growth;
    assert_eq!(g.steady.len(), 1, "{:#?}", g.steady);
    let s = &g.steady[0];
    assert_eq!(
        (s.holder, s.course.rate, s.course.rises),
        (DEVICE0, MIB as f64, 19)
    );
    assert_eq!(s.course.phases.growth_from, Some(0));
    let line = line_in(&state, s.site.caller, s.site.stack, "keep");
    assert_eq!(line, Some(keep_line()));
    // The report says where the steps came from.
    let out = vramtrace_command()
        .arg("report")
        .arg(&path)
        .output()
        .unwrap();
    let report = text(&out.stdout);
    assert!(
        report.contains("steps          20 steps from the allocation pattern"),
        "{report}"
    );
    assert!(report.contains("all 14 kinds of allocation that recur repeat every step"));
});

// A communicator every 5 steps (steps 1, 6, ... 26), never destroyed: a staircase, growing at
// a fifth of a communicator's device memory a step: 2 MiB of proxy, 1 MiB of the first
// all-reduce's buffer, 2 x 4096 of channels.
captest!(wl_shapes_a_staircase_of_communicators_is_growth, |dir| {
    let (path, state, a) = shape(dir, "staircase");
    // The steps are the training loop's; NCCL's five kinds recur once every five steps.
    assert_eq!(steps(&a), ("pattern", 30, 12, 17));
    let g = &a.growth;
    let device: Vec<_> = g.steady.iter().filter(|s| s.holder == DEVICE0).collect();
    let rates: Vec<f64> = device.iter().map(|s| s.course.rate).collect();
    let fifth = |bytes: u64| bytes as f64 / 5.0;
    // The proxy and the channels come from one call of the program's (ncclCommInitRank): one
    // place; the first all-reduce's buffer from another.
    assert_eq!(rates, [fifth(2 * MIB + 8192), fifth(MIB)]);
    assert!(device.iter().all(|s| s.course.rises == 6));
    let nccl = standin_source("nccl/nccl.c");
    let lines: Vec<Vec<(String, u32)>> = device
        .iter()
        .map(|s| lines_in(&state, s.site.caller, s.site.stack, &nccl))
        .map(|l| l.into_iter().take(1).collect())
        .collect();
    let at = |f: &str, text: &str| vec![(f.to_string(), line_of(&nccl, text))];
    assert_eq!(
        lines,
        [
            at(
                "vmm_alloc",
                "CUresult r = rt_drv.cuMemCreate(&h, size, &prop, 0);"
            ),
            at(
                "pncclAllReduce",
                "res = cuda_result(cudaMalloc(&comm->lazy_buf, LAZY_BYTES));"
            ),
        ]
    );
    let holder = g.holders.iter().find(|h| h.holder == DEVICE0).unwrap();
    assert!((holder.steady_growth - fifth(3 * MIB + 8192)).abs() < 1e-6);
    assert!(holder.alert && g.alert);
    let first = &a.diagnosis[0];
    assert_eq!(
        (first.class, first.severity),
        (FindingClass::SteadyGrowth, Severity::Alert)
    );
    assert!(first
        .cause
        .starts_with("NCCL communicators created and never destroyed"));
    // One cause, one finding: the communicators never destroyed, at the call that creates them,
    // at the rate of all their device buffers (616 KiB a step); the all-reduce's buffers are
    // its evidence, and no other finding grows.
    assert_eq!(first.evidence.rate, Some(fifth(3 * MIB + 8192)));
    let growing = (a.diagnosis.iter()).filter(|f| f.class == FindingClass::SteadyGrowth);
    assert_eq!(growing.count(), 1);
    // A native program's places are named by its own function and line that made the
    // communicators and the NCCL function it called (`new_comm at wl_shapes.c:113 →
    // pncclCommInitRank`), not by NCCL's internals: its channels and its proxy both come from
    // that call, one place. The proxy thread's host buffer has no frame of the program: NCCL's
    // function names it. Rows come in the diagnosis' order, each finding's cause before the
    // rows backing it.
    let r = crate::vramtrace_json(["report".as_ref(), "--json".as_ref(), path.as_os_str()]);
    let rows: Vec<(String, String)> = r["analysis"]["growth"]["steady"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["memory"].as_str().unwrap().into(),
                s["label"].as_str().unwrap().into(),
            )
        })
        .collect();
    let row = |memory: &str, label: &str| (memory.to_string(), label.to_string());
    assert_eq!(
        rows,
        [
            row("device", "new_comm at wl_shapes.c:113 → pncclCommInitRank"),
            row("device", "new_comm at wl_shapes.c:114 → pncclAllReduce"),
            row("host", "cudaHostAlloc"),
            row("host", "new_comm at wl_shapes.c:113 → pncclCommInitRank"),
        ]
    );
    // The all-reduce's buffers are said as part of the finding's rate, not beside it: 616.0
    // KiB in all, 204.8 KiB of it at line 114 (it read as 616 + 204.8).
    let text = text(
        &vramtrace_command()
            .arg("report")
            .arg(&path)
            .output()
            .unwrap()
            .stdout,
    );
    assert!(
        text.contains(
            "\n     also      of it, the same communicators' buffers at another place: +204.8 KiB \
             per guessed step at new_comm at wl_shapes.c:114 → pncclAllReduce (libnccl.so.2)\n"
        ),
        "{text}"
    );
});

// Flat for 20 steps, then 1 MiB a step: the rate is the late growth's, from the sample after
// step 20.
captest!(wl_shapes_a_late_leak_is_measured_from_its_start, |dir| {
    let (_, state, a) = shape(dir, "late");
    assert_eq!(steps(&a), ("pattern", 40, 13, 13));
    let g = &a.growth;
    assert_eq!(g.steady.len(), 1, "{:#?}", g.steady);
    let s = &g.steady[0];
    assert_eq!((s.course.rate, s.course.rises), (MIB as f64, 19));
    assert_eq!(s.course.phases.growth_from, Some(20));
    assert_eq!(s.now_bytes, 20 * MIB);
    assert_eq!(
        line_in(&state, s.site.caller, s.site.stack, "keep"),
        Some(keep_line())
    );
});

// 1 MiB a step for 20 steps, all freed after the loop: nothing is live at the end, and the
// growth is still found, with what the teardown freed as evidence.
captest!(wl_shapes_a_teardown_does_not_hide_growth, |dir| {
    let (path, _, a) = shape(dir, "teardown");
    assert_eq!(steps(&a), ("pattern", 20, 13, 13));
    assert_eq!(a.leaks.device.bytes, 0);
    let g = &a.growth;
    let s = &g.steady[0];
    assert_eq!(
        (s.course.rate, s.course.last_bytes, s.now_bytes),
        (MIB as f64, 19 * MIB, 0)
    );
    let device = g.holders.iter().find(|h| h.holder == DEVICE0).unwrap();
    assert_eq!(device.teardown_freed, 19 * MIB);
    let f = &a.diagnosis[0];
    assert_eq!(
        (f.class, f.evidence.freed_at_teardown),
        (FindingClass::SteadyGrowth, Some(19 * MIB))
    );
    // Nothing live: the pool's reserve is a cache, not fragmentation.
    assert_eq!(a.fragmentation.unusable_share, None);
    let out = vramtrace_command()
        .arg("report")
        .arg(&path)
        .output()
        .unwrap();
    let report = text(&out.stdout);
    let line = report
        .lines()
        .find(|l| l.starts_with("  fragmentation"))
        .unwrap();
    assert!(
        line.starts_with("  fragmentation  none: nothing is live; "),
        "{line}"
    );
});

// An evaluation every 10 steps makes its own tensors: the steps stay the training loop's 50,
// and nothing grows.
captest!(wl_shapes_a_periodic_evaluation_keeps_the_steps, |dir| {
    let (_, _, a) = shape(dir, "eval");
    assert_eq!(steps(&a), ("pattern", 50, 12, 13));
    let g = &a.growth;
    assert!(g.steady.is_empty() && !g.alert, "{:#?}", g.steady);
    assert!(a
        .diagnosis
        .iter()
        .all(|f| f.class != FindingClass::SteadyGrowth));
});

// `diff` says the communicators never destroyed as the report does: one new growth, at the call
// that creates them, at the rate of all their device buffers, per guessed step (both runs'
// steps come from the allocation pattern). Against another program, it says so.
captest!(wl_shapes_diff_says_one_cause_once, |dir| {
    for d in ["s", "e", "t"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    let (staircase, _, _) = shape(&dir.join("s"), "staircase");
    let (eval, _, _) = shape(&dir.join("e"), "eval");
    let out = vramtrace_command()
        .arg("diff")
        .arg(&eval)
        .arg(&staircase)
        .output()
        .unwrap();
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{said}");
    let verdict = said.lines().next().unwrap();
    assert!(
        verdict.starts_with(
            "VERDICT  REGRESSION (exit 1): new steady growth +616.0 KiB/guessed step at new_comm \
             at wl_shapes.c:113 → pncclCommInitRank (libnccl.so.2): "
        ) && verdict.matches("new steady growth").count() == 1,
        "{said}"
    );
    // The line under it gives the memory of all six communicators (3 MiB of buffers each at
    // line 113, 1 MiB at 114, 8 KiB of host memory), not line 113's alone with their rate; the
    // table tags line 114 as part of the same cause; every rate is per guessed step.
    assert!(
        said.contains(
            "\n  top difference, view driver: new_comm at wl_shapes.c:113 → pncclCommInitRank \
             (libnccl.so.2): new, +18.1 MiB live at end, +616.0 KiB/guessed step\n"
        ),
        "{said}"
    );
    let row = |line: &str| {
        said.lines()
            .find(|l| l.contains(line) && l.contains("only-in-b"))
            .unwrap_or_else(|| panic!("no row of {line}: {said}"))
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(
        row("wl_shapes.c:114 → pncclAllReduce"),
        "2 new (communicators)"
    );
    assert_eq!(row("wl_shapes.c:113 → pncclCommInitRank"), "1 new -");
    assert!(
        said.contains(" growth                +0 B/guessed step   +616.0 KiB/guessed step"),
        "{said}"
    );
    let train = Workload::new("wl_train")
        .run_traced(&dir.join("t"))
        .single_trace();
    let out = vramtrace_command()
        .arg("diff")
        .arg(&train.path)
        .arg(&eval)
        .output()
        .unwrap();
    let said = text(&out.stdout);
    assert!(
        said.contains(
            "\n  note: the runs ran different programs (A wl_train, B wl_shapes): two programs, not \
             two runs of one\n"
        ),
        "{said}"
    );
});
