//! `vramtrace check` as a CI gate and `vramtrace report --fail-on` on traces already taken, on
//! workloads with planted leaks: the exact exit codes (the program's own failure first, then 2
//! for vramtrace's errors, 1 for a limit passed, 0) and the numbers each limit line prints.

use std::path::{Path, PathBuf};
use std::process::Output;

use vramtrace_tests::traced::{text, trace_files, vramtrace_command, Workload};
use vramtrace_tests::{standin_ld_library_path, workload};

/// `vramtrace check -o <dir>/c-%p.vtrace FLAGS -- PROGRAM ARGS`.
fn check(
    dir: &Path,
    flags: &[&str],
    program: impl AsRef<std::ffi::OsStr>,
    args: &[&str],
) -> Output {
    vramtrace_command()
        .arg("check")
        .arg("-o")
        .arg(dir.join("c-%p.vtrace"))
        .args(flags)
        .arg("--")
        .arg(program)
        .args(args)
        .env("LD_LIBRARY_PATH", standin_ld_library_path())
        .output()
        .expect("running vramtrace check")
}

fn only_trace(dir: &Path) -> PathBuf {
    let traces = trace_files(dir);
    assert_eq!(traces.len(), 1, "{traces:?}");
    traces.into_iter().next().unwrap()
}

// wl_train leaks 1 MiB a step (20 MiB at exit) and leaves one NCCL registration orphaned: each
// limit asked fails with the planted numbers; the program's output passes through.
captest!(check_fails_a_leaking_workload_on_each_limit, |dir| {
    let out = check(
        dir,
        &["--max-leak", "1MiB", "--max-orphans", "0"],
        workload("wl_train"),
        &[],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let plain = Workload::new("wl_train").run_plain();
    assert_eq!(text(&out.stdout), text(&plain.stdout));
    let trace = only_trace(dir);
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines[0].starts_with(&format!("vramtrace check: {} (pid ", trace.display())),
        "{err}"
    );
    assert_eq!(
        &lines[1..],
        [
            "  FAIL  growth (alert)   device 0: +1.0 MiB per step (1048576 B) at fw_alloc \
             (libtorch_standin.so), full within the horizon",
            "  FAIL  leak             20.0 MiB live at the end (20971520 B in 20 objects), limit \
             1.0 MiB (1048576 B)",
            "  FAIL  orphans          1 orphan holding 0 B of device memory, limit 0",
            "vramtrace check: FAILED: limits exceeded in 1 of 1 trace: growth, leak, orphans \
             (details: vramtrace report TRACE)",
        ]
    );
});

// With the leak fixed nothing is live at exit and nothing grows: 0, unless orphans are asked
// about (the registration is still never deregistered).
captest!(check_passes_the_fixed_workload, |dir| {
    let out = check(
        dir,
        &["--max-leak", "0"],
        workload("wl_train"),
        &["--fix-leak"],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("  ok    growth (alert)   device 0: +0 B per step (0 B)\n"),
        "{err}"
    );
    assert!(
        err.contains(
            "  ok    leak             0 B live at the end (0 B in 0 objects), limit 0 B\n"
        ),
        "{err}"
    );
    assert!(
        err.ends_with("vramtrace check: ok: 1 trace within the limits\n"),
        "{err}"
    );

    let out = check(
        dir,
        &["--max-orphans", "0"],
        workload("wl_train"),
        &["--fix-leak"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("FAILED: limits exceeded in 1 of 1 trace: orphans"));
});

// An absolute growth limit replaces the verdict: 1 MiB a step passes 512 KiB, not 2 MiB.
captest!(check_takes_a_growth_limit_per_step, |dir| {
    let out = check(
        dir,
        &["--max-growth", "2MiB/step"],
        workload("wl_train"),
        &[],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(
            "  ok    growth > 2.0 MiB (2097152 B) device 0: +1.0 MiB per step (1048576 B) at \
             fw_alloc (libtorch_standin.so)\n"
        ),
        "{err}"
    );
    let out = check(dir, &["--max-growth", "512KiB"], workload("wl_train"), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
});

// Steps without marks: a warm-up that stops growing passes, a late leak fails at its rate.
captest!(check_judges_steps_found_in_the_allocation_pattern, |dir| {
    let out = check(dir, &[], workload("wl_shapes"), &["warmup"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = check(dir, &[], workload("wl_shapes"), &["late"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("FAIL  growth (alert)   device 0: +1.0 MiB per step (1048576 B)"),
        "{err}"
    );
});

// The program's own failure wins over a limit passed, and a signal's death reads as 128 + N;
// vramtrace's own errors are 2 and run nothing.
captest!(check_passes_the_programs_failure_through, |dir| {
    let leaking_then_failing = format!("{} >/dev/null; exit 7", workload("wl_train").display());
    let out = check(dir, &[], "sh", &["-c", &leaking_then_failing]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{err}");
    assert!(
        err.contains("FAIL  growth (alert)"),
        "the limits are still shown: {err}"
    );
    assert!(
        err.ends_with("the program failed (exit code 7); exiting with its code\n"),
        "{err}"
    );

    let out = check(dir, &[], "sh", &["-c", "kill -TERM $$"]);
    assert_eq!(out.status.code(), Some(143), "{}", text(&out.stderr));

    let out = check(dir, &["--max-leak", "5x"], workload("wl_train"), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stdout), "", "the program did not run");
    assert_eq!(
        text(&out.stderr),
        "error: invalid value '5x' for '--max-leak <SIZE>': not a size: unknown unit 'x' (use \
         B, KiB, MiB, GiB, TiB) (see --help)\n"
    );
    let out = check(
        dir,
        &["--lib", "/nonexistent/libvramtrace.so"],
        workload("wl_train"),
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
});

// A program without a GPU memory call writes no trace: nothing to fail on.
captest!(check_of_a_program_without_gpu_calls_passes, |dir| {
    let out = check(dir, &[], "true", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "vramtrace check: ok: the program made no GPU memory call (no trace written)\n"
    );
});

// `report --fail-on` measures the same limits after the report.
captest!(report_fails_on_the_same_limits, |dir| {
    Workload::new("wl_train").run_traced(dir);
    let trace = only_trace(dir);
    let report = |limits: &str| {
        vramtrace_command()
            .args(["report", "--fail-on", limits])
            .arg(&trace)
            .output()
            .unwrap()
    };
    let out = report("growth,leak=1MiB,orphans=1");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        text(&out.stdout).starts_with("vramtrace report: "),
        "the report comes first"
    );
    assert_eq!(
        err,
        format!(
            "vramtrace report: limits of {}\n  FAIL  growth (alert)   device 0: +1.0 MiB per \
             step (1048576 B) at fw_alloc (libtorch_standin.so), full within the horizon\n  FAIL  \
             leak             20.0 MiB live at the end (20971520 B in 20 objects), limit 1.0 MiB \
             (1048576 B)\n  ok    orphans          1 orphan holding 0 B of device memory, limit \
             1\n",
            trace.display()
        )
    );
    assert_eq!(report("leak=20MiB,orphans=1").status.code(), Some(0));
    assert_eq!(report("leak=20MiB,orphans").status.code(), Some(1));
    let bad = report("peak");
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).starts_with("error: invalid value 'peak' for '--fail-on <LIMIT>'"));
});
