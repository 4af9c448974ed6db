//! `vramtrace check` as a CI gate and `vramtrace report --fail-on` on traces already taken, on
//! workloads with planted leaks: the exact exit codes (the program's own failure first, then 2
//! for vramtrace's errors, 1 for a limit passed, 0) and the numbers each limit line prints.

mod json;
mod rotated;

use std::path::{Path, PathBuf};
use std::process::Output;

use vramtrace_tests::traced::{
    text, trace_files, traced_program, untimed, vramtrace_command, Workload,
};
use vramtrace_tests::{standin_ld_library_path, workload};

/// `vramtrace check -o <dir>/c-%p.vtrace FLAGS -- PROGRAM ARGS`.
fn check(
    dir: &Path,
    flags: &[&str],
    program: impl AsRef<std::ffi::OsStr>,
    args: &[&str],
) -> Output {
    check_command(dir, flags, program, args)
        .output()
        .expect("running vramtrace check")
}

/// The command [`check`] runs, for more settings.
fn check_command(
    dir: &Path,
    flags: &[&str],
    program: impl AsRef<std::ffi::OsStr>,
    args: &[&str],
) -> std::process::Command {
    let mut c = vramtrace_command();
    c.arg("check")
        .arg("-o")
        .arg(dir.join("c-%p.vtrace"))
        .args(flags)
        .arg("--")
        .arg(program)
        .args(args)
        .env("LD_LIBRARY_PATH", standin_ld_library_path());
    c
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
    let err = untimed(&text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{err}");
    let plain = Workload::new("wl_train").run_plain();
    assert_eq!(text(&out.stdout), text(&plain.stdout));
    let trace = only_trace(dir);
    let lines: Vec<&str> = err.lines().collect();
    // The whole run is shorter than the live analysis' interval: it is judged when it ends,
    // and alerts then (and says so), before check's own lines.
    assert_eq!(
        lines[0],
        "vramtrace: ALERT at exit, step 20: device 0 grows steadily, +1.0 MiB per step at main \
         at wl_train.c:128 → fw_alloc (libtorch_standin.so) (full within the horizon); 20.0 MiB \
         live, full in 989 steps",
        "{err}"
    );
    assert!(
        lines[1].starts_with(&format!("vramtrace check: {} (pid ", trace.display())),
        "{err}"
    );
    assert_eq!(
        &lines[2..],
        [
            "  FAIL  growth (alert)   device 0: +1.0 MiB per step (1048576 B) at main at wl_train.c:128 → fw_alloc \
             (libtorch_standin.so), full within the horizon, in 989 steps",
            "  FAIL  leak             20.0 MiB live at the end (20971520 B in 20 objects), limit \
             1.0 MiB (1048576 B)",
            "  FAIL  orphans          1 orphan holding 0 B of device memory, limit 0",
            &format!(
                "vramtrace check: FAILED: limits exceeded in 1 of 1 trace: growth, leak, orphans \
                 (details: vramtrace report {})",
                trace.display()
            ),
        ]
    );
});

// With the leak fixed nothing is live at exit and nothing grows: 0, unless orphans are asked
// about (the registration is still never deregistered).
// A process a signal ended, under a shell that hides it (exit 0): the limits are measured on
// what it held when it died, and the gate says how it ended.
captest!(check_says_a_process_ended_by_a_signal, |dir| {
    let script = format!("{} segv; exit 0", workload("wl_signal").display());
    let out = check(dir, &[], "sh", &["-c", &script]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("  note: the process ended by signal 11 (device memory live then: 6.0 MiB)\n"),
        "{err}"
    );
});

// A VRAMTRACE_CAPTURE the gate inherits (NCCL alone) would hide the device memory that leaks:
// the check traces every layer, and says it left the setting out.
captest!(check_traces_every_layer_whatever_capture_says, |dir| {
    let out = check_command(dir, &[], workload("wl_train"), &[])
        .env("VRAMTRACE_CAPTURE", "nccl")
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("vramtrace: VRAMTRACE_CAPTURE=nccl left out: the check traces every layer"),
        "{err}"
    );
});

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
    // The orphan no limit asked about is said, not passed by in silence.
    assert!(
        err.contains(
            "  note: 1 orphan, holding 0 B of device memory: 1 registration whose buffer is gone \
             (4.0 MiB registered); not a limit of this check (--max-orphans 0 makes it one)\n"
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
    assert!(!text(&out.stderr).contains("  note: "));
});

// A leak that fills a 32 MiB device at step 31, every allocation refused after: the device was
// full (nothing left free), so its course is cut there and the growth before judged — not passed
// as growth that stopped (a request larger than what was free is a one-off only while a good
// share of the device is free).
captest!(check_fails_a_leak_that_filled_the_device, |dir| {
    let out = check_command(dir, &[], workload("wl_alert"), &["leak"])
        .env("STANDIN_DEVICE_MEM", "32M")
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "  FAIL  growth (alert)   device 0: +1.0 MiB per step (1048576 B) at main at \
             wl_alert.c:96 → fw_alloc (libtorch_standin.so), out of memory at step 31\n"
        ),
        "{err}"
    );
});

// Two leaks on one device: the gate names the faster, and says the other, since fixing the
// first alone fails it again (it named the first only, and the report said "1 more ALERT").
captest!(check_names_every_cause_of_the_growth_it_fails, |dir| {
    let out = check(dir, &[], workload("wl_train"), &["--extra-leak"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let src = vramtrace_tests::source::workload_source("wl_train.c");
    let line = |text: &str| vramtrace_tests::source::line_of(&src, text);
    let (extra, history) = (
        line("extra[step] = alloc(4 * MiB, FW_MODE_ASYNC);"),
        line("history[step] = alloc(1 * MiB, FW_MODE_ASYNC);"),
    );
    assert!(
        err.contains(&format!(
            "  FAIL  growth (alert)   device 0: +5.0 MiB per step (5242880 B), +4.0 MiB per step \
             of it at main at wl_train.c:{extra} → fw_alloc (libtorch_standin.so); and 1 more \
             cause: +1.0 MiB per step at main at wl_train.c:{history} → fw_alloc \
             (libtorch_standin.so)\n"
        )),
        "{err}"
    );
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
            "  ok    growth           device 0: +1.0 MiB per step (1048576 B) at main at \
             wl_train.c:128 → fw_alloc (libtorch_standin.so), limit 2.0 MiB/step (2097152 B)\n        \
             note: the tracer alerted while the program ran (+1.0 MiB per step: "
        ),
        "{err}"
    );
    // The alert printed above in the same log is not left unexplained beside "ok".
    assert!(
        err.contains("); a size limit replaces that verdict\n"),
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
        err.contains("FAIL  growth (alert)   device 0: +1.0 MiB per guessed step (1048576 B)"),
        "{err}"
    );
    // Its steps are guessed, and the gate says so under the number.
    assert!(
        err.contains("\n        note: steps guessed from the allocation pattern, one every ")
            && err.contains(
                ", not marked: one may span several of the program's steps, and its rate with it \
             (mark steps for exact rates)\n"
            ),
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
    let err = untimed(&text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        text(&out.stdout).starts_with("vramtrace report: "),
        "the report comes first"
    );
    assert_eq!(
        err,
        format!(
            "vramtrace report: limits of {}\n  FAIL  growth (alert)   device 0: +1.0 MiB per \
             step (1048576 B) at main at wl_train.c:128 → fw_alloc (libtorch_standin.so), full within the horizon, in 989 steps\n  FAIL  \
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

/// A directory the tracer cannot write in, or `None` (with a note) where this machine cannot
/// make one: mode 0555 stops anyone but root; for root, a read-only tmpfs is mounted over it
/// (unmounted when the guard drops).
fn read_only_dir(base: &Path) -> Option<ReadOnly> {
    use std::os::unix::fs::PermissionsExt;
    let dir = base.join("ro");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    if std::fs::File::create(dir.join("probe")).is_err() {
        return Some(ReadOnly {
            dir,
            mounted: false,
        });
    }
    std::fs::remove_file(dir.join("probe")).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "ro,size=64k", "tmpfs"])
        .arg(&dir)
        .output()
        .is_ok_and(|o| o.status.success());
    if !mounted {
        eprintln!("skipped the read-only directory: root here, and mounting a tmpfs failed");
        return None;
    }
    Some(ReadOnly { dir, mounted })
}

struct ReadOnly {
    dir: PathBuf,
    mounted: bool,
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        if self.mounted {
            let _ = std::process::Command::new("umount").arg(&self.dir).output();
        }
    }
}

/// The one `error: …` line of `out`, after checking it is the last line and the exit is 2.
fn could_not_check(out: &Output) -> String {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(last.starts_with("error: could not check: "), "{err}");
    last.to_string()
}

// The trace cannot be written: a read-only directory is refused before the program starts (it
// would run the whole job untraced); a directory that became a file before the first GPU call
// lets the program run on untraced, and the gate says it could not check — even with
// --max-leak 0 on a program that leaves 20 MiB live. It said "ok" before.
captest!(
    check_cannot_pass_a_program_whose_trace_could_not_be_written,
    |dir| {
        if let Some(ro) = read_only_dir(dir) {
            let out = check(&ro.dir, &["--max-leak", "0"], workload("wl_train"), &[]);
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{err}");
            assert_eq!(text(&out.stdout), "", "the program did not run");
            let why = if ro.mounted {
                "read-only file system"
            } else {
                "permission denied"
            };
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(
                err.starts_with("error: -o ")
                    && err.contains(&format!(
                        ": cannot write traces in {}: {why}",
                        ro.dir.display()
                    )),
                "{err}"
            );
            assert!(trace_files(&ro.dir).is_empty());
        }
        // The output directory turns into a file under the program's feet: no root needed.
        let gone = dir.join("gone");
        std::fs::create_dir(&gone).unwrap();
        let script = format!(
            "rmdir {0} && touch {0} && exec {1}",
            gone.display(),
            workload("wl_train").display()
        );
        let out = check(&gone, &["--max-leak", "0"], "sh", &["-c", &script]);
        let line = could_not_check(&out);
        assert!(line.contains("Not a directory"), "{line}");
        let err = text(&out.stderr);
        assert!(!err.contains("ok"), "{err}");
    }
);

// The library disabled, or never loaded (a file the loader refuses, as it ignores a setuid or
// static program's LD_PRELOAD): nothing was seen, so nothing passes.
captest!(check_cannot_pass_a_program_the_tracer_did_not_see, |dir| {
    let out = check_command(dir, &[], workload("wl_train"), &[])
        .env("VRAMTRACE_DISABLE", "1")
        .output()
        .unwrap();
    let line = could_not_check(&out);
    assert!(
        line.ends_with(" ran untraced: VRAMTRACE_DISABLE is set"),
        "{line}"
    );

    // A launcher that cleans the environment (`env -u`, `env -i`, sudo, a subprocess given an
    // environment of its own): the program it execs runs without the tracer. The launcher's
    // own image saw no GPU call, which is no "ok" for the program after it.
    let train = workload("wl_train");
    let train = train.to_str().unwrap();
    let out = check(dir, &[], "env", &["-u", "LD_PRELOAD", train]);
    let line = could_not_check(&out);
    assert!(
        line.ends_with(&format!(
            " ran {train} untraced: the environment it was given no longer preloads the tracer \
             (LD_PRELOAD); keep LD_PRELOAD in what a launcher passes on"
        )),
        "{line}"
    );
    // One that keeps LD_PRELOAD but drops the rest (`env -i LD_PRELOAD=…`): the program runs
    // traced, its trace where its own settings say, which the run never hears of.
    let script = format!(
        "exec env -i LD_PRELOAD=\"$LD_PRELOAD\" LD_LIBRARY_PATH=\"$LD_LIBRARY_PATH\" \
         STANDIN_DEVICE_MEM=512M {train}"
    );
    let out = check_command(dir, &[], "sh", &["-c", &script])
        .current_dir(dir)
        .output()
        .unwrap();
    let line = could_not_check(&out);
    assert!(
        line.ends_with(&format!(
            " ran {train} unseen by this run: the environment it was given preloads the tracer \
             but no longer names the run (VRAMTRACE_RUN_STATUS), so its trace went where its \
             own settings say; keep the VRAMTRACE_* variables in what a launcher passes on"
        )),
        "{line}"
    );
    // Tracing turned off for the program by its launcher.
    let out = check(dir, &[], "env", &["VRAMTRACE_DISABLE=1", train]);
    let line = could_not_check(&out);
    assert!(
        line.ends_with(" ran untraced: VRAMTRACE_DISABLE is set"),
        "{line}"
    );
    // An exec that fails takes nothing back from what was seen: the launcher goes on traced.
    let out = check(
        dir,
        &[],
        "sh",
        &["-c", "env -i /nonexistent/program; exec true"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let refused = dir.join("libvramtrace.so");
    std::fs::write(&refused, b"").unwrap();
    let lib = refused.to_str().unwrap();
    let out = check(dir, &["--lib", lib], workload("wl_train"), &[]);
    let line = could_not_check(&out);
    assert_eq!(
        line,
        format!(
            "error: could not check: the tracer library was not loaded (no trace written): {} \
             is not the tracer (no shared object exporting vramtrace_mark_step): give \
             libvramtrace.so to --lib",
            std::fs::canonicalize(&refused).unwrap().display()
        )
    );
    // The tracer itself, refused by a static program (ldconfig is one in every glibc system).
    let ldconfig = ["/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .into_iter()
        .find(|p| Path::new(p).is_file());
    if let Some(ldconfig) = ldconfig {
        let out = check(dir, &[], ldconfig, &["--version"]);
        assert_eq!(
            could_not_check(&out),
            "error: could not check: the tracer library was not loaded (no trace written): the \
             loader ignores LD_PRELOAD for setuid programs and static binaries, and says on \
             stderr when it cannot load a library"
        );
    }
    let out = check(dir, &["--lib", "/nonexistent/libvramtrace.so"], "true", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "error: --lib /nonexistent/libvramtrace.so: no such file\n"
    );
});

// A trace cut short (its process killed with SIGKILL, which no handler sees) and a trace that
// lost events (a 1024-event buffer under a storm of 16 threads, no waiting) are named, never ok.
captest!(check_cannot_pass_a_cut_trace_or_lost_events, |dir| {
    let script = format!(
        "{} 1 100000000 >/dev/null & while ! ls {}/c-$!.vtrace >/dev/null 2>&1; do sleep 0.01; \
         done; kill -9 $!; wait $!; exit 0",
        workload("wl_threads").display(),
        dir.display()
    );
    let out = check(dir, &["--max-growth", "1TiB/step"], "sh", &["-c", &script]);
    let line = could_not_check(&out);
    let trace = only_trace(dir);
    assert!(
        line.starts_with(&format!(
            "error: could not check: {} is cut short (",
            trace.display()
        )),
        "{line}"
    );
    std::fs::remove_file(trace).unwrap();

    let out = check_command(
        dir,
        &["--max-growth", "1TiB/step"],
        workload("wl_harm"),
        &[],
    )
    .args(["storm", "16", "2000"])
    .env("VRAMTRACE_BUFFER_EVENTS", "1024")
    .env("VRAMTRACE_FULL_WAIT_MS", "0")
    .env("VRAMTRACE_MEMINFO_MS", "0")
    .output()
    .unwrap();
    let line = could_not_check(&out);
    let trace = only_trace(dir);
    // The losses come first; where they broke the storm's allocation pattern, the trace has no
    // steps either, and the per-step limit is a second reason ("and 1 more (named above)").
    assert!(
        line.starts_with(&format!(
            "error: could not check: {} is missing ",
            trace.display()
        )) && (line.ends_with(" events the tracer lost")
            || line.ends_with(" events the tracer lost; and 1 more (named above)")),
        "{line}"
    );
    let err = text(&out.stderr);
    assert!(
        err.contains("  not checked: the trace is missing "),
        "{err}"
    );
});

// wl_soak with 4 threads on a 64-event buffer that never waits: the tracer loses many events,
// among them the frees of the temporaries (wl_soak.c, its `cudaMalloc(p, 256 * ...` line),
// whose place then seems to grow. It is never a finding: the temporaries' growth is said among
// what the losses could explain (they freed all but a few of what they made), and a growth
// found is the planted leak's, keep_history's, which frees nothing.
captest!(lost_frees_are_no_finding_and_the_leak_stays_first, |dir| {
    let out = check_command(
        dir,
        &["--max-growth", "1KiB/step"],
        workload("wl_soak"),
        &["2000", "200", "10", "1048576", "4"],
    )
    .env("VRAMTRACE_BUFFER_EVENTS", "64")
    .env("VRAMTRACE_FULL_WAIT_MS", "0")
    .env("STANDIN_DEVICE_MEM", "8589934592")
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let trace = only_trace(dir);
    let source = vramtrace_tests::source::workload_source("wl_soak.c");
    let temporary = vramtrace_tests::source::line_of(&source, "cudaMalloc(p, 256 *");
    let kept = vramtrace_tests::source::line_of(&source, "int rc = cudaMalloc(&p, bytes);");
    let out = vramtrace_command()
        .args(["report", "--json"])
        .arg(&trace)
        .output()
        .unwrap();
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &r["analysis"];
    assert!(
        r["anomalies"]["lost_events"].as_u64().unwrap() > 0,
        "no loss"
    );
    // How many events are lost depends on the machine's load (under a loaded test run, 90% of
    // them, keep_history's allocations among them): where a growth is found, it is the leak's.
    let growth: Vec<&serde_json::Value> = (r["diagnosis"].as_array().unwrap().iter())
        .filter(|f| f["class"] == "steady-growth")
        .collect();
    if let Some(first) = growth.first() {
        assert_eq!(
            first["site"]["label"],
            format!("keep_history at wl_soak.c:{kept}"),
            "{first:#}"
        );
    }
    let at_temporary = format!("wl_soak.c:{temporary}");
    for f in r["diagnosis"].as_array().unwrap() {
        if f["class"] == "steady-growth" {
            assert!(
                !f["site"]["label"].to_string().contains(&at_temporary),
                "{f:#}"
            );
        }
    }
    for l in r["growth"]["lost_frees"].as_array().unwrap() {
        let (made, kept) = (l["made"].as_u64().unwrap(), l["kept"].as_u64().unwrap());
        assert!(kept < made, "{l:#}");
        assert!(l["label"].to_string().contains(&at_temporary), "{l:#}");
    }
    assert!(
        !text(&out.stderr).contains(&format!("of it at temporary at {at_temporary}")),
        "{}",
        text(&out.stderr)
    );
});

// A trace cut into segments and rotated under a small budget (its first file deleted by the
// tracer itself) is checked like any other: wl_soak keeps 64 KiB every step, so a limit of
// 16 KiB a step fails (exit 1) and one of 1 MiB passes (exit 0); the alert raised while it ran,
// in a segment rotation removed, is still in the report of what is left.
captest!(a_rotated_trace_is_checked_and_keeps_its_alert, |dir| {
    for (limit, code) in [("16KiB/step", 1), ("1MiB/step", 0)] {
        let sub = dir.join(limit.replace('/', "-"));
        std::fs::create_dir(&sub).unwrap();
        let out = check_command(
            &sub,
            &[
                "--max-bytes",
                "3MiB",
                "--segment-bytes",
                "1MiB",
                "--max-growth",
                limit,
            ],
            workload("wl_soak"),
            &["1500", "500", "1", "65536"],
        )
        .env("STANDIN_DEVICE_MEM", "64G")
        .env("VRAMTRACE_ALERT_THRESHOLD", "32KiB")
        .env("VRAMTRACE_ALERT_CONFIRM", "100")
        .env("VRAMTRACE_ALERT_SNAPSHOT", "1")
        .output()
        .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{limit}: {err}");
        assert!(!err.contains("is gone"), "{err}");
        // The alert's live set is named after the trace (its first file's name), not after the
        // segment being written then, which rotation removed since.
        let snapshots: Vec<String> = std::fs::read_dir(&sub)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".json"))
            .collect();
        assert_eq!(snapshots.len(), 1, "{snapshots:?}");
        assert!(
            !snapshots[0].contains(".seg") && snapshots[0].contains(".vtrace.alert-device0-step"),
            "{snapshots:?}"
        );
        // The heading says the trace was judged on the segments on disk, and what went.
        let heading = err
            .lines()
            .find(|l| l.starts_with("vramtrace check: /"))
            .unwrap_or_else(|| panic!("{err}"));
        assert!(
            heading.contains(", complete; segments ") && heading.contains("removed by rotation"),
            "{heading}"
        );
        let files = trace_files(&sub);
        assert!(
            files.iter().all(|f| f.to_string_lossy().contains(".seg")),
            "the first segment was rotated away: {files:?}"
        );
        let report = crate::vramtrace_json(["report".as_ref(), "--json".as_ref(), sub.as_os_str()]);
        let alerts = report["analysis"]["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(alerts.len(), 1, "{}", report["analysis"]["alerts"]);
        assert!(
            alerts[0]["step"].as_u64().unwrap()
                < report["reading"]["segments"]["removed"]["steps"]
                    .as_u64()
                    .unwrap(),
            "the alert was raised in a removed segment: {}",
            report["reading"]["segments"]
        );
    }
});

// A program that runs out of memory and goes on (here a shell hides wl_soak's exit code: it
// keeps 4 MiB every 5 steps on a 64 MiB device, whose allocations are refused from step 52 on).
// The alert and the growth limit say the device ran out of memory, not that it will be full in
// so many steps; the failures pass the gate with a note, and fail it with --max-ooms 0.
captest!(check_gates_out_of_memory_when_asked, |dir| {
    let script = format!(
        "{} 200 50 5 4194304 >/dev/null; exit 0",
        workload("wl_soak").display()
    );
    let temporary = vramtrace_tests::source::line_of(
        &vramtrace_tests::source::workload_source("wl_soak.c"),
        "cudaMalloc(p, 256 *",
    );
    let first = format!(
        "673 out-of-memory failures (the first: cudaMalloc of 1.6 MiB at temporary at \
         wl_soak.c:{temporary} (wl_soak) on device 0 at step 52 with 59.5 MiB live)"
    );
    let first = first.as_str();
    for (flags, code) in [
        (&["--max-growth", "100MiB/step"][..], 0),
        (&["--max-ooms", "0"], 1),
    ] {
        let sub = dir.join(format!("c{code}"));
        std::fs::create_dir(&sub).unwrap();
        let out = check_command(&sub, flags, "sh", &["-c", &script])
            .env("STANDIN_DEVICE_MEM", "64M")
            .output()
            .unwrap();
        let err = untimed(&text(&out.stderr));
        assert_eq!(out.status.code(), Some(code), "{err}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(
            lines[0],
            "vramtrace: ALERT at exit, step 200: device 0 grows steadily, +819.2 KiB per step at \
             keep_history at wl_soak.c:79 (wl_soak) (it ran out of memory); 48.0 MiB live",
            "{err}"
        );
        let limits: Vec<&str> = lines[2..lines.len() - 1].to_vec();
        let want = if code == 0 {
            vec![
                "  ok    growth           device 0: +819.2 KiB per step (838861 B) at \
                 keep_history at wl_soak.c:79 (wl_soak), limit 100.0 MiB/step (104857600 B)"
                    .to_string(),
                "        note: the tracer alerted while the program ran (+819.2 KiB per step: it \
                 ran out of memory); a size limit replaces that verdict"
                    .to_string(),
                format!("  note: {first}; not a limit of this check (--max-ooms 0 makes it one)"),
            ]
        } else {
            vec![
                "  FAIL  growth (alert)   device 0: +819.2 KiB per step (838861 B) at \
                 keep_history at wl_soak.c:79 (wl_soak), out of memory at step 52"
                    .to_string(),
                format!("  FAIL  oom              {first}, limit 0"),
            ]
        };
        assert_eq!(limits, want, "{err}");
    }
    // The report's FINDINGS say it the same way, and `--fail-on oom` is the same limit.
    let trace = only_trace(&dir.join("c1"));
    let out = vramtrace_command()
        .args(["report", "--fail-on", "oom=672"])
        .arg(&trace)
        .output()
        .unwrap();
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        report.contains(
            "  growth         STEADY GROWTH on device 0: +819.2 KiB per step at keep_history at \
             wl_soak.c:79 (wl_soak); out of memory at step 52\n"
        ),
        "{report}"
    );
    assert!(
        report.contains("Failures: 673 (673 out of memory), out-of-memory first")
            && report.contains("  663 more kept (--top or --json lists them)\n"),
        "{report}"
    );
});

// A slow leak (64 KiB every 300 steps) under a budget that keeps only the last few hundred steps:
// the samples left on disk show no growth, but the buffers it keeps, made step after step before
// and after, are in the segment's snapshot and live at the end; the tracer, which judged the
// whole run, alerted too. The gate fails at the leak's line and rate (218.45 B a step), as
// `report --fail-on growth` does, and the report does not call the alert unconfirmed by steps it
// cannot see. `diff` against a run without the leak, rotated the same way, is a regression for
// the same reasons.
captest!(a_leak_rotation_removed_fails_on_the_tracers_alert, |dir| {
    let rotated = |name: &str, every: &str| {
        let sub = dir.join(name);
        std::fs::create_dir(&sub).unwrap();
        let out = check_command(
            &sub,
            &["--max-bytes", "2MiB", "--segment-bytes", "1MiB"],
            workload("wl_soak"),
            &["3000", "200", every, "65536"],
        )
        .output()
        .unwrap();
        (sub, out)
    };
    let (leaky, out) = rotated("leaky", "300");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // Named as every command reads it, by its first segment's name, though rotation deleted
    // that file: not by the oldest segment left, which rotation deletes next.
    let heading = (err.lines())
        .find(|l| l.starts_with("vramtrace check: /"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(!heading.contains(".seg"), "{heading}");
    assert!(
        !err.contains(".seg"),
        "the details line names it so too: {err}"
    );
    let line = err
        .lines()
        .find(|l| l.starts_with("  FAIL  growth (alert)"))
        .unwrap_or_else(|| panic!("{err}"));
    let rate = |line: &str| -> u64 {
        let at = line
            .find(" B per step ")
            .unwrap_or_else(|| panic!("{line}"));
        let digits = line[..at].rsplit('+').next().unwrap_or_default();
        digits.parse().unwrap_or_else(|_| panic!("{line}"))
    };
    assert!(
        line.contains(" B per step (")
            && line.contains(") at keep_history at wl_soak.c:79 (wl_soak)"),
        "{line}"
    );
    assert!((218..=219).contains(&rate(line)), "{line}");
    let out = vramtrace_command()
        .args(["report", "--fail-on", "growth"])
        .arg(&leaky)
        .output()
        .unwrap();
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    let alerted = report
        .lines()
        .find(|l| l.starts_with("  alerted "))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(!alerted.contains("not confirmed"), "{alerted}");
    // The verdict and the growth line name the leak's place and rate.
    let line = |head: &str| {
        (report.lines())
            .find(|l| l.starts_with(head))
            .unwrap_or_else(|| panic!("{report}"))
    };
    assert!(
        line("  verdict").starts_with(
            "  verdict   ALERT: steady growth at keep_history at wl_soak.c:79 (wl_soak) on device 0"
        ),
        "{report}"
    );
    let growth = line("  growth ");
    assert!(
        growth.starts_with("  growth         STEADY GROWTH on device 0: +")
            && growth.contains(" B per step at keep_history at wl_soak.c:79 (wl_soak)"),
        "{growth}"
    );
    assert!((218..=219).contains(&rate(growth)), "{growth}");
    let (healthy, out) = rotated("healthy", "0");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = vramtrace_command()
        .arg("diff")
        .args([&healthy, &leaky])
        .output()
        .unwrap();
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(
            "VERDICT  REGRESSION (exit 1): tracer alerts +1 (limit 0); new steady growth +"
        ) && said.contains(" B/step at keep_history at wl_soak.c:79 (wl_soak)"),
        "{said}"
    );
});

// Another job writing into the same directory while the check runs (two CI jobs sharing an
// output directory) does not make this run's verdict: its leaking trace is left out, and said.
captest!(
    check_leaves_out_a_trace_another_job_wrote_beside_its_own,
    |dir| {
        let script = format!("sleep 1; {} --fix-leak", workload("wl_train").display());
        let checking = check_command(dir, &[], "sh", &["-c", &script])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let other = traced_program(workload("wl_train"), dir)
            .env("VRAMTRACE_OUTPUT", dir.join("c-%p.vtrace"))
            .output()
            .unwrap();
        assert_eq!(other.status.code(), Some(0), "{}", text(&other.stderr));
        let out = checking.wait_with_output().unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        let others: Vec<PathBuf> = trace_files(dir)
            .into_iter()
            .filter(|t| !err.contains(&format!("vramtrace check: {} (pid", t.display())))
            .collect();
        assert_eq!(others.len(), 1, "{err}");
        assert!(
            err.starts_with(&format!(
                "vramtrace: left out {}: written meanwhile by a process this run did not start\n",
                others[0].display()
            )),
            "{err}"
        );
    }
);

// A VRAMTRACE_CAPTURE set inside the command (a job script narrowing it for production) hides
// the device memory that leaks: the check cannot pass it (exit 2), whether the process left a
// trace of the layers it kept or, having made no call there, none.
captest!(
    check_cannot_pass_a_capture_narrowed_inside_the_command,
    |dir| {
        let script = format!(
            "export VRAMTRACE_CAPTURE=nccl; {}",
            workload("wl_train").display()
        );
        let out = check(dir, &[], "sh", &["-c", &script]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(
                "  not checked: the trace captured only nccl: VRAMTRACE_CAPTURE was set in the \
             command, and the other GPU memory calls were not seen\n"
            ),
            "{err}"
        );
        let sub = dir.join("no-trace");
        std::fs::create_dir(&sub).unwrap();
        let script = format!(
            "VRAMTRACE_CAPTURE=nccl {} segv; {} --fix-leak",
            workload("wl_signal").display(),
            workload("wl_train").display()
        );
        let out = check(&sub, &["--max-leak", "0"], "sh", &["-c", &script]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        let last = err.lines().last().unwrap_or_default();
        assert!(
        last.starts_with("error: could not check: pid ")
            && last.ends_with(
                " traced only nccl: VRAMTRACE_CAPTURE was set in the command, and its other GPU \
                 memory calls were not seen"
            ),
        "{err}"
    );
    }
);

// A leak that fails the gate beside a process run untraced: the FAILED line points to where
// what was not checked is said — the error line below, or the lines above when the program's
// failure takes the exit code and the error line is not printed.
captest!(
    check_points_to_where_what_it_could_not_check_is_said,
    |dir| {
        let train = workload("wl_train");
        let train = train.to_str().unwrap();
        for (tail, code, place) in [("", 2, "(below)"), ("; exit 3", 3, "(above)")] {
            let sub = dir.join(format!("exit-{code}"));
            std::fs::create_dir(&sub).unwrap();
            let script = format!("{train} >/dev/null; env -u LD_PRELOAD {train} >/dev/null{tail}");
            let out = check(&sub, &[], "sh", &["-c", &script]);
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(code), "{err}");
            let failed = (err.lines())
                .find(|l| l.starts_with("vramtrace check: FAILED: "))
                .unwrap_or_else(|| panic!("{err}"));
            assert!(
                failed.ends_with(&format!("; and not everything could be checked {place}")),
                "{failed}"
            );
            let untraced = format!(" ran {train} untraced: the environment it was given");
            let at = |needle: &str| err.find(needle).unwrap_or_else(|| panic!("{err}"));
            match place {
                "(below)" => {
                    assert!(at(&untraced) > at("vramtrace check: FAILED: "), "{err}");
                    assert!(
                        err.trim_end()
                            .ends_with("; limits exceeded in what was read (1 trace, above)"),
                        "{err}"
                    );
                }
                _ => assert!(at(&untraced) < at("vramtrace check: FAILED: "), "{err}"),
            }
        }
    }
);

// A limit written after the command goes to the program: check says so before it runs, so that
// its `ok` is not read as having checked that limit.
captest!(
    a_limit_after_the_command_is_said_to_be_the_programs,
    |dir| {
        let out = check(dir, &[], "sh", &["-c", "exit 0", "sh", "--max-leak", "0"]);
        let err = text(&out.stderr);
        assert!(
        err.starts_with(
            "vramtrace check: note: --max-leak after the command is the program's, not check's \
             (check's flags come before the command): not checked\n"
        ),
        "{err}"
    );
    }
);

// wl_fork 2: each of the two children keeps 8 KiB to its exit, the parent nothing. Two of the
// three traces fail `--max-leak 0`, and the details point at their directory, whose report
// opens with the table of all three, not at the first trace that failed.
captest!(several_failing_traces_point_at_their_directory, |dir| {
    let out = check(dir, &["--max-leak", "0"], workload("wl_fork"), &["2"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let verdict = err.lines().last().unwrap();
    assert_eq!(
        verdict,
        format!(
            "vramtrace check: FAILED: limits exceeded in 2 of 3 traces: leak (details: vramtrace \
             report {})",
            dir.display()
        ),
        "{err}"
    );
});
