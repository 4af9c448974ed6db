//! The `VRAMTRACE_*` settings as a user meets them: a bad value is one warning line and the
//! default, an unwritable output is a warning and an untraced but unchanged program, the switch
//! turns everything off, a tiny channel loses events but counts every one, and stack capture
//! follows `VRAMTRACE_STACK_DEPTH`.

use vramtrace_tests::trace::Trace;
use vramtrace_tests::traced::{text, trace_files, vramtrace_command, Workload};

/// The stderr lines of a traced run.
fn stderr_lines(out: &std::process::Output) -> Vec<String> {
    text(&out.stderr).lines().map(str::to_string).collect()
}

fn setting<'a>(trace: &'a Trace, name: &str) -> Option<&'a str> {
    trace
        .header
        .settings
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

// Each bad value: exactly one `vramtrace: warning:` line naming it, the program's output
// unchanged, and a normal trace taken with the default (recorded in the trace too).
captest!(a_bad_setting_warns_once_and_keeps_the_default, |dir| {
    let cases = [
        ("VRAMTRACE_STACK_DEPTH", "lots", "32"),
        ("VRAMTRACE_BUFFER_EVENTS", "12", "65536"),
        ("VRAMTRACE_FLUSH_MS", "-5", "200"),
        ("VRAMTRACE_CAPTURE", "gpu", "runtime,driver,nccl,host"),
    ];
    for (i, (name, bad, default)) in cases.into_iter().enumerate() {
        let sub = dir.join(i.to_string());
        std::fs::create_dir(&sub).unwrap();
        let run = Workload::new("wl_runtime").env(name, bad).run_both(&sub);
        let lines = stderr_lines(&run.output);
        assert_eq!(lines.len(), 1, "{name}={bad}: {lines:?}");
        assert!(
            lines[0].starts_with("vramtrace: warning: ")
                && lines[0].contains(name)
                && lines[0].contains(&format!("'{bad}'")),
            "{name}={bad}: {}",
            lines[0]
        );
        let trace = run.single_trace();
        trace.assert_clean("exit");
        assert_eq!(
            trace.events.len(),
            49,
            "{name}={bad}: the run is traced as usual"
        );
        assert_eq!(setting(&trace, name), Some(default), "{name}={bad}");
        assert_eq!(
            trace.warnings.len(),
            1,
            "{name}={bad}: {:?}",
            trace.warnings
        );
        assert!(
            lines[0].ends_with(&trace.warnings[0]),
            "{:?}",
            trace.warnings
        );
    }
    // A bad VRAMTRACE_DISABLE means "not disabled".
    let sub = dir.join("disable");
    std::fs::create_dir(&sub).unwrap();
    let run = Workload::new("wl_runtime")
        .env("VRAMTRACE_DISABLE", "maybe")
        .run_both(&sub);
    assert_eq!(stderr_lines(&run.output).len(), 1, "{}", run.stderr());
    run.single_trace().assert_clean("exit");
});

// An output directory that does not exist: a warning, no trace, and the program runs on
// exactly as without the tracer.
captest!(an_unwritable_output_leaves_the_program_alone, |dir| {
    let missing = dir.join("missing");
    let run = Workload::new("wl_driver")
        .env("VRAMTRACE_OUTPUT", missing.join("t-%p.vtrace"))
        .run_both(dir);
    let lines = stderr_lines(&run.output);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("vramtrace: warning: ") && lines[0].contains("missing"),
        "{}",
        lines[0]
    );
    assert!(!missing.exists());
    let left: Vec<_> = std::fs::read_dir(dir).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
});

// `VRAMTRACE_DISABLE=1`: no trace, not a word on stderr, the same output.
captest!(disabled_writes_nothing, |dir| {
    for w in ["wl_runtime", "wl_framework", "wl_closure"] {
        let run = Workload::new(w).env("VRAMTRACE_DISABLE", "1").run_both(dir);
        assert_eq!(run.stderr(), "", "{w}");
        assert_eq!(trace_files(dir), Vec::<std::path::PathBuf>::new(), "{w}");
    }
});

// A 1024-event channel and no waiting, under 16 threads: events are lost, but every call is
// accounted for (written + dropped + late = 32136 calls + 1 step of the runtime's primary-context
// retain + 1), the trace stays causally ordered,
// and `vramtrace report` says how many were lost. The tracer's device-memory samples are turned
// off (`VRAMTRACE_MEMINFO_MS=0`): they would compete for the channel and blur the count.
captest!(a_full_channel_counts_every_dropped_event, |dir| {
    let run = Workload::new("wl_threads")
        .arg("16")
        .arg("1000")
        .env("VRAMTRACE_BUFFER_EVENTS", "1024")
        .env("VRAMTRACE_FULL_WAIT_MS", "0")
        .env("VRAMTRACE_MEMINFO_MS", "0")
        .run_both(dir);
    let trace = run.single_trace();
    assert!(trace.ending.is_complete());
    assert_eq!(trace.end_reasons, ["exit"]);
    let s = trace.stats();
    assert!(
        s.dropped > 0,
        "a 1024-event channel under 16 threads must overflow: {s:?}"
    );
    assert!(trace.samples.is_empty(), "{} samples", trace.samples.len());
    assert_eq!(s.events, (trace.events.len() + trace.retains.len()) as u64);
    assert_eq!(
        s.dropped + s.late + s.events,
        2 * 16 * 1000 + 136 + 1 + 1,
        "{s:?}"
    );
    assert!(
        trace.events.windows(2).all(|w| w[0].seq < w[1].seq),
        "sequence order"
    );
    // Every number stands for one call, written or lost: none beyond the 32138 made, and the
    // events lost mid-run left gaps where they were lost (those lost after the last event
    // written leave none; a writer starved for the whole run may write nothing after them).
    let last = trace.events.last().map_or(0, |e| e.seq);
    assert!(
        last <= 32138,
        "no sequence number beyond the calls made: {last}"
    );
    let missing = trace.state.losses().missing();
    assert!(missing <= s.dropped + s.late, "{missing} {s:?}");
    assert_eq!(
        last + trace.state.lost_at_the_end(),
        s.events + s.dropped + s.late
    );

    let report = vramtrace_command()
        .arg("report")
        .arg("--json")
        .arg(&trace.path)
        .output()
        .unwrap();
    assert!(report.status.success(), "{}", text(&report.stderr));
    let json: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(json["tracer"]["dropped"], s.dropped);
    assert_eq!(json["tracer"]["events_written"], s.events);
    let report = vramtrace_command()
        .arg("report")
        .arg(&trace.path)
        .output()
        .unwrap();
    let out = text(&report.stdout);
    assert!(
        out.contains(&format!("dropped   {} events LOST", s.dropped)),
        "{out}"
    );
});

// With the default settings nothing is dropped however fast calls come: one thread making
// 100,000 allocate/free pairs back to back (200,000 events, three times the default channel),
// and eight threads making 20,000 each at once. Hooks wait for the writer while it makes
// progress instead of dropping. (`tests/benches/capture_overhead.rs` runs the full scale: 10 M
// pairs on one thread, 8 threads × 1 M.)
captest!(
    the_default_settings_drop_nothing_under_a_flood_of_calls,
    |dir| {
        use vramtrace_collector::event::Api;
        for (threads, pairs) in [(1u64, 100_000u64), (8, 20_000)] {
            let sub = dir.join(threads.to_string());
            std::fs::create_dir(&sub).unwrap();
            let run = Workload::new("wl_threads")
                .arg(threads.to_string())
                .arg(pairs.to_string())
                .run_both(&sub);
            let trace = run.single_trace();
            // Nothing dropped, nothing late, every event counted is in the file.
            trace.assert_clean("exit");
            let c = trace.counts();
            let n = |api| c.get(&api).copied().unwrap_or(0);
            let leaks = threads * (threads + 1) / 2;
            // Odd threads pair cudaMallocAsync/cudaFreeAsync, even ones cudaMalloc/cudaFree; every
            // thread leaks (index + 1) cudaMalloc buffers.
            let async_pairs = threads / 2 * pairs;
            let sync_pairs = threads * pairs - async_pairs;
            assert_eq!(
                (n(Api::CudaMalloc), n(Api::CudaFree)),
                (sync_pairs + leaks, sync_pairs),
                "{threads} threads"
            );
            assert_eq!(
                (n(Api::CudaMallocAsync), n(Api::CudaFreeAsync)),
                (async_pairs, async_pairs),
                "{threads} threads"
            );
        }
    }
);

// `VRAMTRACE_STACK_DEPTH=0`: no stacks at all, and owners still come out right from the
// caller alone.
captest!(stack_depth_zero_captures_no_stacks, |dir| {
    let run = Workload::new("wl_framework")
        .env("VRAMTRACE_STACK_DEPTH", "0")
        .run_both(dir);
    let trace = run.single_trace();
    trace.assert_clean("exit");
    assert_eq!(setting(&trace, "VRAMTRACE_STACK_DEPTH"), Some("0"));
    assert!(
        trace.stacks.is_empty(),
        "{} stack records",
        trace.stacks.len()
    );
    assert!(trace.events.iter().all(|e| e.stack == 0));
    assert_eq!(
        trace.owner_counts(),
        crate::nccl::planted_counts(false, false)
    );
});

// By default every event has a stack whose first frame is the event's caller, on every
// thread and through every path (symbol hooks, gpa pointers, NCCL's proxy threads).
captest!(every_event_has_a_stack_starting_at_its_caller, |dir| {
    for w in ["wl_runtime", "wl_framework", "wl_closure", "wl_cublas"] {
        let trace = Workload::new(w).run_traced(dir).single_trace();
        assert_eq!(setting(&trace, "VRAMTRACE_STACK_DEPTH"), Some("32"));
        for e in &trace.events {
            let frames = trace
                .stacks
                .get(&e.stack)
                .unwrap_or_else(|| panic!("{w}: event without a stack: {e:?}"));
            assert_eq!(frames.first(), Some(&e.caller), "{w}: {e:?}");
            assert!(frames.len() <= 32, "{w}: {} frames", frames.len());
        }
        std::fs::remove_file(&trace.path).unwrap();
    }
});

// A bad setting is the same mistake in every process of a run: `vramtrace run` of a program of
// three processes (the shell and the two it starts, each loading the tracer) warns once, and
// each trace still records the warning. Without `run`, each process warns (nothing shared).
captest!(a_bad_setting_warns_once_per_run, |dir| {
    let runtime = vramtrace_tests::workload("wl_runtime");
    let script = format!("{0} >/dev/null; {0} >/dev/null", runtime.display());
    let out = vramtrace_command()
        .arg("run")
        .arg("-o")
        .arg(dir.join("t-%p.vtrace"))
        .args(["--no-summary", "--", "sh", "-c", &script])
        .env(
            "LD_LIBRARY_PATH",
            vramtrace_tests::standin_ld_library_path(),
        )
        .env("VRAMTRACE_ALERT_HORIZON", "soon")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let warning = "vramtrace: warning: VRAMTRACE_ALERT_HORIZON='soon' is not a duration: unknown \
                   unit 'soon' (use ns, us, ms, s, m, h or d); using 24h";
    assert_eq!(stderr_lines(&out), [warning]);
    let traces = trace_files(dir);
    assert_eq!(traces.len(), 2, "{traces:?}");
    for t in traces {
        let trace = Trace::load(&t);
        assert_eq!(trace.warnings.len(), 1, "{:?}", trace.warnings);
    }
});

// `run --stack-depth 99999`: the flag is what the user set, so the flag is named, and nothing
// runs; the tracer never sees a value it would have to warn about.
captest!(a_bad_flag_is_named_as_the_flag, |dir| {
    let out = vramtrace_command()
        .arg("run")
        .arg("-o")
        .arg(dir.join("t-%p.vtrace"))
        .args(["--stack-depth", "99999", "--", "sh", "-c", "echo ran"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stdout), "", "nothing ran");
    assert_eq!(
        text(&out.stderr),
        "error: invalid value '99999' for '--stack-depth <N>': not a number from 0 to 256 (see \
         --help)\n"
    );
});
