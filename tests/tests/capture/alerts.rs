//! The tracer's live alerts (`VRAMTRACE_ALERT_*`) on wl_alert, whose leak of 1 MiB a step from
//! step 1 is planted at fw_alloc in libtorch_standin.so: the alert is raised at the step its
//! growth has lasted the confirmation, names the place, lands in the trace as an Alert record,
//! writes the live set beside the trace and signals the program only when asked; a warm-up with
//! evaluation peaks never alerts. Judgements run at every step mark
//! (`VRAMTRACE_ALERT_INTERVAL_MS=0`), so the step an alert is raised at is exact.

use std::os::unix::fs::PermissionsExt;

use serde_json::Value;
use vramtrace_tests::source::{line_of, workload_source};
use vramtrace_tests::traced::{text, untimed, Workload};

use crate::MIB;

fn wl_alert(shape: &str) -> Workload {
    Workload::new("wl_alert")
        .arg(shape)
        .env("VRAMTRACE_ALERT_INTERVAL_MS", "0")
}

/// The stderr lines the tracer wrote that are alerts, without the time to full after its steps
/// ([`untimed`]).
fn alert_lines(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| l.starts_with("vramtrace: ALERT"))
        .map(untimed)
        .collect()
}

// Defaults: confirmation 10 steps, threshold 0.1 % of the stand-in's 1 GiB (1.0 MiB a step is
// not above it), horizon 10,000 steps: the leak alerts for the horizon at step 11's mark, when
// 10 MiB leaked + the 2 MiB cached segment are live; no signal is sent by default.
captest!(
    a_leak_alerts_once_at_the_confirmed_step_naming_its_place,
    |dir| {
        let run = wl_alert("leak").arg("--wait-signal").run_both(dir);
        let err = run.stderr();
        assert_eq!(
        alert_lines(&err),
        ["vramtrace: ALERT at step 11: device 0 grows steadily, +1.0 MiB per step at main at \
          wl_alert.c:96 → fw_alloc (libtorch_standin.so) (full within the horizon); 12.0 MiB live, full in 1,012 steps"]
    );
        // The stand-in's steps take microseconds: the time to full is in a unit that shows it,
        // never "0 s".
        let line = err
            .lines()
            .find(|l| l.starts_with("vramtrace: ALERT"))
            .unwrap();
        assert!(
            line.contains(" steps (") && !line.contains("(0 s)"),
            "{line}"
        );
        assert!(run.stdout().contains("no SIGUSR1\n"), "{}", run.stdout());
        let trace = run.single_trace();
        let alerts = trace.state.alerts();
        assert_eq!(alerts.len(), 1, "{alerts:?}");
        let a = &alerts[0];
        assert_eq!((a.step, a.device, a.reason.as_str()), (11, 0, "horizon"));
        assert_eq!((a.rate, a.place_rate, a.unit.as_str()), (MIB, MIB, "step"));
        assert_eq!((a.live_bytes, a.device_memory), (12 * MIB, 1 << 30));
        assert_eq!(a.steps_to_full, Some(1012));
        assert_eq!(
            a.place,
            "main at wl_alert.c:96 → fw_alloc (libtorch_standin.so)"
        );
        assert_eq!((a.signal, a.snapshot.as_str()), (0, ""));
        // The alert follows the last event of step 11's mark: the mark itself.
        let mark = trace.events.iter().find(|e| e.seq == a.after_seq).unwrap();
        assert!(
            matches!(mark.op, vramtrace_collector::event::Op::MarkStep { .. }),
            "{mark:?}"
        );
        // The report keeps it: a FINDINGS line, and the analysis JSON's `alerts`.
        let report = vramtrace_tests::traced::report_of(&trace.path, &[]);
        let text = String::from_utf8_lossy(&report.stdout);
        let alerted: Vec<String> = text
            .lines()
            .filter(|l| l.contains("alerted"))
            .map(untimed)
            .collect();
        assert_eq!(
            alerted,
            [
                "  alerted        at step 11: device 0 grew steadily, +1.0 MiB per \
              step at main at wl_alert.c:96 → fw_alloc (libtorch_standin.so) (full within the horizon); full in 1,012 steps at the run's step time"
            ],
            "{text}"
        );
        let json =
            crate::vramtrace_json(["report".as_ref(), "--json".as_ref(), trace.path.as_os_str()]);
        assert_eq!(json["analysis"]["alerts"][0]["step"], 11);
        assert_eq!(json["analysis"]["alerts"][0]["rate"], MIB);
    }
);

// A threshold of 512 KiB a step and a confirmation of 5: the growth alerts as such at step 6.
captest!(the_threshold_and_the_confirmation_are_settings, |dir| {
    let run = wl_alert("leak")
        .env("VRAMTRACE_ALERT_THRESHOLD", "512KiB")
        .env("VRAMTRACE_ALERT_CONFIRM", "5")
        .run_traced(dir);
    assert_eq!(
        alert_lines(&run.stderr()),
        [
            "vramtrace: ALERT at step 6: device 0 grows steadily, +1.0 MiB per step at main at \
          wl_alert.c:96 → fw_alloc (libtorch_standin.so) (above the threshold of 512.0 KiB per step); 7.0 MiB live, full \
          in 1,017 steps"
        ]
    );
    let trace = run.single_trace();
    let a = &trace.state.alerts()[0];
    assert_eq!(
        (a.step, a.reason.as_str(), a.threshold),
        (6, "growth", MIB / 2)
    );
});

// Asked for: SIGUSR1 reaches the program's handler, and the live set is written beside the
// trace (mode 0600) before it.
captest!(
    the_signal_reaches_the_handler_and_the_live_set_is_written,
    |dir| {
        let run = wl_alert("leak")
            .arg("--wait-signal")
            .env("VRAMTRACE_ALERT_SIGNAL", "USR1")
            .env("VRAMTRACE_ALERT_SNAPSHOT", "1")
            .run_traced(dir);
        assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());
        assert!(
            run.stdout().contains("SIGUSR1 received\n"),
            "{}",
            run.stdout()
        );
        let trace = run.single_trace();
        let snapshot = format!("{}.alert-device0-step11.json", trace.path.display());
        let err = run.stderr();
        assert!(
            alert_lines(&err)[0].ends_with(&format!(
                "full in 1,012 steps; signal SIGUSR1 sent; live set in {snapshot}"
            )),
            "{err}"
        );
        let a = &trace.state.alerts()[0];
        assert_eq!(
            (a.signal, a.snapshot.as_str()),
            (SIGUSR1, snapshot.as_str())
        );
        let meta = std::fs::metadata(&snapshot).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let doc: Value = serde_json::from_slice(&std::fs::read(&snapshot).unwrap()).unwrap();
        assert_eq!(doc["schema"], "vramtrace-alert-snapshot/1");
        assert_eq!(doc["pid"], trace.header.pid);
        assert_eq!(doc["alert"]["step"], 11);
        assert_eq!(doc["alert"]["snapshot"], snapshot.as_str());
        assert_eq!(doc["live"]["device"]["bytes"], 12 * MIB);
        let top = &doc["live"]["sites"][0];
        assert_eq!(
            top["label"],
            "main at wl_alert.c:96 → fw_alloc (libtorch_standin.so)"
        );
        assert_eq!(
            (top["bytes"].as_u64(), top["count"].as_u64()),
            (Some(10 * MIB), Some(10))
        );
    }
);

// The live set's file name taken (a file of another run, or the user's): it is never
// replaced, and the warning names it.
captest!(
    an_alert_never_replaces_a_file_of_its_snapshots_name,
    |dir| {
        let trace = dir.join("t.vtrace");
        let taken = format!("{}.alert-device0-step11.json", trace.display());
        std::fs::write(&taken, "mine\n").unwrap();
        let run = wl_alert("leak")
            .env("VRAMTRACE_OUTPUT", &trace)
            .env("VRAMTRACE_ALERT_SNAPSHOT", "1")
            .run_traced(dir);
        assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());
        let err = run.stderr();
        assert!(
            err.contains(&format!(
                "the alert's live set is not written: {taken} is there already (never replaced)"
            )),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&taken).unwrap(), "mine\n");
        assert_eq!(run.single_trace().state.alerts()[0].snapshot, "");
    }
);

// The bundled demo's loop as a long job runs it (`vramtrace-demo --program --checkpoint`:
// 150 ms a step, a SIGUSR1 handler that saves a checkpoint as its step ends), with the default
// judgement interval of a second: the alert comes while it runs, at its leak's line, and the
// program saves its checkpoint once, at the step the signal reached or after it.
captest!(the_demo_saves_a_checkpoint_when_the_alert_asks, |dir| {
    let run = Workload::new("wl_train")
        .arg("--checkpoint")
        .env("VRAMTRACE_ALERT_SIGNAL", "USR1")
        .run_traced(dir);
    assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());
    let trace = run.single_trace();
    let a = &trace.state.alerts()[0];
    assert_eq!(a.signal, SIGUSR1);
    let line = line_of(&workload_source("wl_train.c"), "history[step] = alloc(");
    assert_eq!(
        a.place,
        format!("main at wl_train.c:{line} → fw_alloc (libtorch_standin.so)")
    );
    let stdout = run.stdout();
    let saved: Vec<&str> = (stdout.lines())
        .filter(|l| l.starts_with("checkpoint saved after step "))
        .collect();
    assert_eq!(saved.len(), 1, "{stdout}");
    let step: u64 = saved[0]
        .trim_start_matches("checkpoint saved after step ")
        .trim_end_matches(" (asked by SIGUSR1)")
        .parse()
        .unwrap();
    assert!(
        (a.step..=20).contains(&step),
        "alert at {}: {stdout}",
        a.step
    );
    // Untraced, no signal comes: the loop and its output are the plain demo's.
    let plain = Workload::new("wl_train").arg("--checkpoint").run_plain();
    assert_eq!(plain.status.code(), Some(0));
    assert!(!text(&plain.stdout).contains("checkpoint saved"));
});

// The healthy loop at a long job's pace (`--fix-leak --checkpoint`): no alert, no signal, no
// checkpoint, and its 20 steps of 150 ms judged at the default interval.
captest!(the_healthy_demo_at_a_long_jobs_pace_never_alerts, |dir| {
    let run = Workload::new("wl_train")
        .arg("--fix-leak")
        .arg("--checkpoint")
        .env("VRAMTRACE_ALERT_SIGNAL", "USR1")
        .run_traced(dir);
    assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());
    assert_eq!(run.single_trace().state.alerts(), Vec::new());
    assert!(
        !run.stdout().contains("checkpoint saved"),
        "{}",
        run.stdout()
    );
    assert_eq!(alert_lines(&run.stderr()), Vec::<String>::new());
});

// A judgement the interval put off is made when the run ends: with an hour between judgements
// the leak's 40 steps are judged once at the start and then only at exit, where it alerts at
// step 40, the last, and says so; no signal is sent then (the program is ending), though one was
// asked for.
captest!(
    an_alert_put_off_to_the_end_is_raised_at_exit_without_the_signal,
    |dir| {
        let run = Workload::new("wl_alert")
            .arg("leak")
            .env("VRAMTRACE_ALERT_INTERVAL_MS", "3600000")
            .env("VRAMTRACE_ALERT_SIGNAL", "USR1")
            .run_both(dir);
        assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());
        assert!(run.stdout().contains("no SIGUSR1\n"), "{}", run.stdout());
        let err = run.stderr();
        let lines = alert_lines(&err);
        assert_eq!(lines.len(), 1, "{err}");
        assert!(
            lines[0].starts_with(
                "vramtrace: ALERT at exit, step 40: device 0 grows steadily, +1.0 MiB per step at \
                 main at wl_alert.c:96 → fw_alloc (libtorch_standin.so)"
            ),
            "{err}"
        );
        assert!(!lines[0].contains("signal"), "{err}");
        let trace = run.single_trace();
        let alerts = trace.state.alerts();
        assert_eq!(alerts.len(), 1, "{alerts:?}");
        assert_eq!((alerts[0].step, alerts[0].signal), (40, 0));
    }
);

// A process that knows its rank says it in the alert line: the ranks of a job share a stderr.
captest!(an_alert_line_names_the_rank, |dir| {
    let run = wl_alert("leak").env("RANK", "3").run_traced(dir);
    let err = run.stderr();
    assert_eq!(
        alert_lines(&err),
        [
            "vramtrace: ALERT (rank 3) at step 11: device 0 grows steadily, +1.0 MiB per step at \
          main at wl_alert.c:96 → fw_alloc (libtorch_standin.so) (full within the horizon); 12.0 \
          MiB live, full in 1,012 steps"
        ]
    );
});

// A loop that marks no step (as a CuPy or JAX loop): the watch finds its steps in the
// allocation pattern once the kept tensor's allocation, once a step, has recurred over a
// second (25 ms steps: about step 41), and alerts once the growth per step has lasted 10 steps
// and the 500 ms asked for (60 s by default), per guessed step as the report says it, at the
// place: the verdict a marked loop gets, numbered as the report numbers the pattern's steps.
captest!(
    an_unmarked_loop_alerts_per_guessed_step_once_its_pattern_shows,
    |dir| {
        let run = wl_alert("leak-unmarked")
            .env("VRAMTRACE_ALERT_CONFIRM_PATTERN", "500ms")
            .run_both(dir);
        let trace = run.single_trace();
        let alerts = trace.state.alerts();
        assert_eq!(alerts.len(), 1, "{alerts:?}\n{}", run.stderr());
        let a = &alerts[0];
        assert_eq!(
            (a.rate, a.place_rate, a.unit.as_str()),
            (MIB, MIB, "guessed step")
        );
        assert_eq!(
            a.place,
            "main at wl_alert.c:96 → fw_alloc (libtorch_standin.so)"
        );
        assert!((50..=80).contains(&a.step), "{a:?}");
        assert_eq!(trace.state.marks(), 0);
        let lines = alert_lines(&run.stderr());
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains("+1.0 MiB per guessed step at main at wl_alert.c:96")
                && lines[0].contains(" live, full in ")
                && lines[0].ends_with(" guessed steps"),
            "{lines:?}"
        );
        // At the default 60 s the two-second loop raises none, and the end of the run says why.
        let sub = dir.join("default");
        std::fs::create_dir(&sub).unwrap();
        let run = wl_alert("leak-unmarked").run_traced(&sub);
        let err = run.stderr();
        assert_eq!(alert_lines(&err), Vec::<String>::new());
        let note = (err.lines())
            .find(|l| l.starts_with("vramtrace: no live alert on device 0: "))
            .unwrap_or_else(|| panic!("{err}"));
        assert!(
            note.contains(
                "it grows steadily, +1.0 MiB per guessed step at main at wl_alert.c:96 → fw_alloc \
                 (libtorch_standin.so), but for "
            ) && note.ends_with(
                " of the 60 s that VRAMTRACE_ALERT_CONFIRM_PATTERN asks (judged per step of its \
                 allocation pattern, without step marks); `vramtrace report` judges the whole trace"
            ),
            "{note}"
        );
    }
);

/// SIGUSR1 on Linux.
const SIGUSR1: i32 = 10;

// A warm-up, evaluation peaks, and programs without step marks (judged per time window, or per
// step of their allocation pattern): no alert. The off switch silences a leak.
captest!(
    healthy_runs_never_alert_and_the_switch_turns_alerts_off,
    |dir| {
        for (name, shape) in [
            ("wl_alert", "healthy"),
            ("wl_alert", "healthy-unmarked"),
            ("wl_shapes", "warmup"),
            ("wl_shapes", "eval"),
        ] {
            let sub = dir.join(format!("{name}-{shape}"));
            std::fs::create_dir(&sub).unwrap();
            let run = Workload::new(name)
                .arg(shape)
                .env("VRAMTRACE_ALERT_INTERVAL_MS", "0")
                .env("VRAMTRACE_ALERT_CONFIRM_PATTERN", "500ms")
                .run_both(&sub);
            assert_eq!(
                alert_lines(&run.stderr()),
                Vec::<&str>::new(),
                "{name} {shape}"
            );
            assert_eq!(run.single_trace().state.alerts_total(), 0, "{name} {shape}");
            assert!(!run.stderr().contains("no live alert"), "{name} {shape}");
        }
        let run = wl_alert("leak").env("VRAMTRACE_ALERT", "0").run_traced(dir);
        assert_eq!(alert_lines(&run.stderr()), Vec::<&str>::new());
        assert_eq!(run.single_trace().state.alerts_total(), 0);
    }
);

// A flood the writer cannot keep up with (500 calls a step back to back, and three more threads
// making temporaries as fast as they can: four producers for one writer, on any number of
// cores) while 64 KiB a step leaks at keep_history: the writer stays behind for seconds, and
// the analysis, which used to switch itself off after one, lowers its resolution instead (a note
// in the trace, one line on stderr) and still raises the alert once the growth has lasted the
// confirmation (600 steps, so after the resolution went down): at the latest when the run ends,
// which judges what the lowered resolution put off.
captest!(
    a_flood_lowers_the_resolution_and_the_leak_still_alerts,
    |dir| {
        let run = Workload::new("wl_soak")
            .arg("1200")
            .arg("500")
            .arg("1")
            .arg("65536")
            .arg("4")
            .env("STANDIN_DEVICE_MEM", "64G")
            .env("VRAMTRACE_ALERT_THRESHOLD", "32KiB")
            .env("VRAMTRACE_ALERT_CONFIRM", "600")
            // One file however much the flood writes (its size depends on the machine's speed).
            .env("VRAMTRACE_SEGMENT_BYTES", "0")
            .run_both(dir);
        let trace = run.single_trace();
        trace.assert_clean("exit");
        let lowered: Vec<u64> = (trace.warnings.iter())
            .filter(|w| w.starts_with("the live analysis judges every"))
            .filter_map(|w| {
                w.split("from step ")
                    .nth(1)?
                    .split(':')
                    .next()?
                    .parse()
                    .ok()
            })
            .collect();
        assert!(
            trace.warnings[..].iter().any(|w| w.starts_with(
                "the live analysis judges every 2nd step (or every 2 intervals) from step"
            )),
            "{:?}",
            trace.warnings
        );
        assert!(!trace.warnings.iter().any(|w| w.contains("alerts are off")));
        let alerts = trace.state.alerts();
        assert_eq!(alerts.len(), 1, "{alerts:?}");
        let a = &alerts[0];
        assert_eq!(
            (a.rate, a.unit.as_str(), a.reason.as_str()),
            (64 << 10, "step", "growth")
        );
        assert!(
            a.place.starts_with("keep_history at wl_soak.c:") && a.place.ends_with(" (wl_soak)"),
            "{}",
            a.place
        );
        assert!(
            a.step >= 600 && a.step > lowered[0],
            "alert at {}, lowered at {lowered:?}",
            a.step
        );
        let err = run.stderr();
        let told: Vec<&str> = err.lines().filter(|l| l.contains("judges every")).collect();
        assert_eq!(told.len(), 1, "told once on stderr: {err}");
        assert_eq!(alert_lines(&err).len(), 1, "{err}");
    }
);

// A long run whose first segments rotation deleted, the alert raised in them: the growth the
// report sees begins where reading began, and may have begun earlier, so the alert is no "not
// confirmed" one (it was, when the first step on disk was taken for the start of the growth).
captest!(
    an_alert_in_segments_rotation_deleted_stays_confirmed,
    |dir| {
        // 6,000 steps, the last 2,000 or so on disk: the alert comes thousands of steps before.
        let run = Workload::new("wl_soak")
            .arg("6000")
            .arg("100")
            .arg("1")
            .arg("65536")
            .env("STANDIN_DEVICE_MEM", "64G")
            .env("VRAMTRACE_ALERT_THRESHOLD", "32KiB")
            .env("VRAMTRACE_SEGMENT_BYTES", "256KiB")
            .env("VRAMTRACE_MAX_BYTES", "768KiB")
            .run_traced(dir);
        assert!(run.output.status.success());
        let first = (run.traces.iter())
            .min_by_key(|p| p.file_name().map(|n| n.to_owned()))
            .unwrap();
        let json = crate::vramtrace_json(["report".as_ref(), "--json".as_ref(), first.as_os_str()]);
        let from = json["analysis"]["steps"]["from_step"]
            .as_u64()
            .expect("read from a snapshot");
        let alert_step = json["analysis"]["alerts"][0]["step"].as_u64().unwrap();
        assert!(
            alert_step < from,
            "the alert at step {alert_step}, reading from {from}"
        );
        let report = vramtrace_tests::traced::report_of(first, &[]);
        let text = String::from_utf8_lossy(&report.stdout);
        let alerted: Vec<&str> = text.lines().filter(|l| l.contains("alerted")).collect();
        assert_eq!(alerted.len(), 1, "{text}");
        assert!(!alerted[0].contains("not confirmed"), "{}", alerted[0]);
        assert!(
            text.contains(&format!(
            "+64.0 KiB per step after step {from}, where reading began (what came before is not \
             read: the growth may have begun earlier)"
        )),
            "{text}"
        );
        // The Perfetto export numbers its steps as the report does, on from the snapshot's,
        // each as long as it took (the first began at the clock's zero, hours long, before),
        // and says where it begins.
        let perfetto = dir.join("rotated.json");
        let export = vramtrace_tests::traced::vramtrace_command()
            .args(["export", "--format", "perfetto", "-o"])
            .arg(&perfetto)
            .arg(first)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&export.stderr);
        assert!(export.status.success(), "{said}");
        assert!(
            said.starts_with(&format!("note: {}: segments ", first.display()))
                && said.contains("; the export holds what is on disk\n"),
            "{said}"
        );
        let events: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&perfetto).unwrap()).unwrap();
        let steps: Vec<&serde_json::Value> = (events["traceEvents"].as_array().unwrap().iter())
            .filter(|e| e["cat"] == "step")
            .collect();
        let last = json["analysis"]["steps"]["steps"].as_u64().unwrap();
        assert_eq!(steps.len() as u64, last - from, "steps {from}..{last}");
        assert_eq!(steps[0]["name"], format!("step {}", from + 1));
        assert_eq!(steps[steps.len() - 1]["args"]["step"], last);
        let longest = (steps.iter())
            .map(|e| e["dur"].as_f64().unwrap())
            .fold(0.0, f64::max);
        assert!(longest < 1e6, "a step of {longest} µs");
        // The alert is an instant where the program was warned, kept with the trace though its
        // segment is gone.
        let alerts: Vec<&serde_json::Value> = (events["traceEvents"].as_array().unwrap().iter())
            .filter(|e| e["cat"] == "alert")
            .collect();
        assert_eq!(alerts.len(), 1, "{alerts:?}");
        assert_eq!(alerts[0]["args"]["step"], alert_step);
        assert_eq!(alerts[0]["name"], "vramtrace ALERT: device 0");
    }
);

// A marked loop shorter than the confirmation raises no alert; its end says so, in one line, as
// a loop judged per time window does (40 steps of the 50 asked for).
captest!(
    a_marked_loop_shorter_than_the_confirmation_says_so_at_its_end,
    |dir| {
        let run = wl_alert("leak")
            .env("VRAMTRACE_ALERT_CONFIRM", "50")
            .run_traced(dir);
        let err = run.stderr();
        assert!(alert_lines(&err).is_empty(), "{err}");
        assert!(
        err.contains(
            "vramtrace: no live alert on device 0: it grows steadily, +1.0 MiB per step at main \
             at wl_alert.c:96 → fw_alloc (libtorch_standin.so), but for 39 steps of the 50 that \
             VRAMTRACE_ALERT_CONFIRM asks; `vramtrace report` judges the whole trace\n"
        ),
        "{err}"
    );
    }
);

// A history that grows for 24 steps and then stops, 16 steps before the end: bounded growth,
// which the live alert saw while it grew. The report does not call the alert unconfirmed: it
// says the growth stopped, and what of it is still held.
captest!(an_alert_on_growth_that_stopped_says_so, |dir| {
    let run = wl_alert("leak-stops").run_traced(dir);
    let alerts = alert_lines(&run.stderr());
    assert_eq!(alerts.len(), 1, "{}", run.stderr());
    let trace = run.single_trace();
    let out = vramtrace_tests::traced::report_of(&trace.path, &[]);
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    let alerted = (report.lines())
        .find(|l| l.starts_with("  alerted "))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(
        alerted.ends_with(
            "; the whole run shows that growth stopped: 24.0 MiB made over steps 1..24 is still \
             held at the end, flat since (bounded growth, not judged steady)"
        ),
        "{alerted}"
    );
    assert!(!report.contains("not confirmed"), "{report}");
    // Nor does the note on what is held until exit say it never grew.
    assert!(
        report.contains(
            "\n     cause     held until exit at 2 places; named by the place that grew: it grew \
             over steps 1..24 and stopped (bounded growth, not judged steady)\n"
        ) && !report.contains("without growing during training"),
        "{report}"
    );
    // The gate passes it, and says why beside the alert the log showed above.
    let gate = vramtrace_tests::traced::report_of(&trace.path, &["--fail-on", "growth"]);
    let err = String::from_utf8_lossy(&gate.stderr).into_owned();
    assert_eq!(gate.status.code(), Some(0), "{err}");
    assert!(
        err.contains("\n        note: the tracer alerted while the program ran (at step 11: ")
            && err.contains(
                "); the whole run shows that growth stopped: 24.0 MiB made over steps 1..24 is \
                 still held at the end, flat since (bounded growth, not judged steady)\n"
            ),
        "{err}"
    );
});
