//! `vramtrace replay TRACE --at POINT [--until POINT]` on real traces: the live set at a step,
//! an event, the peak and an out-of-memory failure, exactly as the workloads' code makes it;
//! one snapshot per step with `--until`; the JSON document's fields; and one error line with
//! exit 2 for a point the trace does not reach.

use std::path::Path;
use std::process::Output;

use serde_json::{json, Value};
use vramtrace_collector::event::Api::*;
use vramtrace_collector::event::{Event, Op};
use vramtrace_tests::trace::{Call, Trace};
use vramtrace_tests::traced::{text, vramtrace_command, Workload};

use crate::{vramtrace_json, MIB};

fn replay(trace: &Path, args: &[&str]) -> Output {
    let mut c = vramtrace_command();
    c.arg("replay").arg(trace).args(args);
    c.output().expect("running vramtrace replay")
}

fn replay_json(trace: &Path, args: &[&str]) -> Value {
    let path = trace.display().to_string();
    let head = ["replay", "--json", path.as_str()];
    vramtrace_json(head.iter().chain(args))
}

/// `{count, bytes}` as the JSON document writes totals.
fn totals(count: u64, bytes: u64) -> Value {
    json!({ "count": count, "bytes": bytes })
}

/// The step marks of a trace, in order.
fn marks(trace: &Trace) -> Vec<&Event> {
    let marks = trace
        .events
        .iter()
        .filter(|e| matches!(e.op, Op::MarkStep { .. }));
    marks.collect()
}

/// What the JSON `at` (and a snapshot) says of the moment right after event `e`: its time on
/// the tracer's clock, and counted from the trace's first event.
fn moment(trace: &Trace, point: &str, e: &Event, step: u64) -> Value {
    let event = trace.ordinal(e.seq);
    let first = (trace.events.iter())
        .chain(&trace.samples)
        .chain(&trace.retains)
        .min_by_key(|e| e.seq)
        .map_or(0, |e| e.time_ns);
    json!({ "point": point, "event": event, "seq": e.seq, "time_ns": e.time_ns,
            "since_first_ns": e.time_ns - first, "step": step })
}

/// Device memory of wl_train right after step `k` began (its mark comes first in the loop
/// body): before step 1, NCCL's init (2 channel buffers of 4096 and its 2 MiB proxy handle) and
/// the 4 MiB registered buffer; step 1 adds the 2 caching segments of 2 MiB (its activations
/// stay cached), the 4 MiB cuBLAS workspace and NCCL's 1 MiB all-reduce buffer; every step adds
/// one 1 MiB history tensor. So at step k > 1: k - 1 history tensors beside 15 MiB + 8192.
fn train_at_step(k: u64) -> Value {
    match k {
        1 => totals(4, 6 * MIB + 8192),
        _ => totals(k + 7, (k + 14) * MIB + 8192),
    }
}

// `--at step=N`: the live set right after step N's mark, for the first step, the second (the
// first whose predecessor made everything), a middle one and the last. At step 10 the history
// holds 9 tensors, made in steps 1 to 9, growing by exactly 1 MiB per step.
captest!(replay_at_steps_of_wl_train, |dir| {
    let trace = Workload::new("wl_train").run_traced(dir).single_trace();
    let marks = marks(&trace);
    assert_eq!(marks.len(), 20);
    for k in [1, 2, 10, 20] {
        let r = replay_json(&trace.path, &["--at", &format!("step={k}")]);
        let mut fields: Vec<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
        fields.sort();
        let want = [
            "analysis",
            "at",
            "gaps",
            "live",
            "passes",
            "pid",
            "schema",
            "segments",
            "snapshots",
            "trace",
        ];
        assert_eq!(fields, want);
        assert_eq!(r["schema"], "vramtrace-replay/1");
        assert_eq!(r["trace"], trace.path.display().to_string());
        assert_eq!(r["pid"], trace.header.pid);
        assert_eq!(
            r["segments"],
            serde_json::Value::Null,
            "a trace of one file"
        );
        assert_eq!(
            r["gaps"],
            serde_json::Value::Array(Vec::new()),
            "a whole trace"
        );
        let mark = marks[k as usize - 1];
        assert_eq!(
            r["at"],
            moment(&trace, &format!("step {k}"), mark, k),
            "step {k}"
        );
        // The index at the end of the trace says it marks its steps: one pass.
        assert_eq!((&r["passes"], &r["snapshots"]), (&json!(1), &json!([])));
        assert_eq!(r["live"]["device_memory"], train_at_step(k), "step {k}");
        assert_eq!(
            r["live"]["host_memory"],
            totals(2, 69632),
            "NCCL's host buffers"
        );
        assert_eq!(r["analysis"]["steps"]["steps"], k);
    }
    let r = replay_json(&trace.path, &["--at", "step=10"]);
    let a = &r["analysis"];
    let history = &a["leaks"]["sites"][0];
    assert_eq!(history["module_name"], "libtorch_standin.so");
    let (count, bytes) = (&history["count"], &history["bytes"]);
    assert_eq!((count, bytes), (&json!(9), &json!(9 * MIB)));
    let steps = (&history["first_step"], &history["last_step"]);
    assert_eq!(steps, (&json!(1), &json!(9)));
    let steady = a["growth"]["steady"].as_array().unwrap();
    assert_eq!(steady.len(), 1);
    assert_eq!(steady[0]["fit"]["slope"].as_f64(), Some(1048576.0));
    assert_eq!(
        (&steady[0]["samples"], &steady[0]["last_bytes"]),
        (&json!(10), &json!(9 * MIB))
    );
});

// `--until`: a snapshot at --at, at every step boundary after it, and at --until, each with
// every holder; the document stops at --until. The table says the same, step by step.
captest!(replay_until_snapshots_every_step, |dir| {
    let trace = Workload::new("wl_train").run_traced(dir).single_trace();
    let marks = marks(&trace);
    let r = replay_json(&trace.path, &["--at", "step=10", "--until", "step=13"]);
    assert_eq!(r["at"], moment(&trace, "step 13", marks[12], 13));
    assert_eq!(r["live"]["device_memory"], train_at_step(13));
    let snapshots = r["snapshots"].as_array().unwrap();
    let want: Vec<Value> = (10..=13)
        .map(|k| {
            let mut s = moment(&trace, &format!("step {k}"), marks[k as usize - 1], k);
            let mut device = train_at_step(k);
            device["memory"] = json!("device");
            device["device"] = json!(0);
            s["holders"] = json!([device, { "memory": "host", "count": 2, "bytes": 69632 }]);
            s
        })
        .collect();
    assert_eq!(snapshots, &want);

    let out = replay(&trace.path, &["--at", "step 10", "--until", "step 12"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let rows: Vec<String> = (table.lines())
        .skip_while(|l| *l != "Stepping through")
        .filter(|l| l.starts_with(" step "))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let want: Vec<String> = (10..=12u64)
        .flat_map(|k| {
            let e = trace.ordinal(marks[k as usize - 1].seq);
            let (device, host) = if k == 10 {
                ("-", "-")
            } else {
                ("+1.0 MiB", "+0 B")
            };
            let (objects, mib) = (k + 7, k + 14);
            [
                format!("step {k} {e} {k} device 0 {objects} {mib}.0 MiB {device}"),
                format!("step {k} {e} {k} host 2 68.0 KiB {host}"),
            ]
        })
        .collect();
    assert_eq!(rows, want, "{table}");
});

/// `by_device` of a replay's live summary, as (device, objects, bytes).
fn by_device(r: &Value) -> Vec<(i64, u64, u64)> {
    let list = r["live"]["by_device"].as_array().expect("live.by_device");
    let n = |d: &Value, k: &str| d[k].as_u64().unwrap();
    list.iter()
        .map(|d| (d["device"].as_i64().unwrap(), n(d, "count"), n(d, "bytes")))
        .collect()
}

// wl_runtime has no steps. `--at oom`: right after the failed cudaMalloc(2 GiB), with L1 live.
// `--at event N`: the analyses as of that event, the double free not yet seen one event before
// it. `--at peak`: the busiest device is device 1 (its 2 MiB beat device 0's 1.46 MiB peak),
// at its allocation, when device 0 holds L1-L6 (the entry point's 12288 B already freed).
captest!(replay_at_oom_event_and_peak_of_wl_runtime, |dir| {
    let trace = Workload::new("wl_runtime").run_traced(dir).single_trace();
    let path = &trace.path;
    let failed = (trace.of(CudaMalloc).into_iter())
        .find(|e| e.result == 2)
        .unwrap();
    let r = replay_json(path, &["--at", "oom"]);
    assert_eq!(
        r["at"],
        moment(&trace, "out-of-memory failure 1", failed, 0)
    );
    assert_eq!(r["passes"], 1);
    assert_eq!(by_device(&r), [(0, 1, MIB)]);
    assert_eq!(r["analysis"]["ooms"]["total"], 1);
    assert_eq!(r["analysis"]["ooms"]["failures"][0]["live"], totals(1, MIB));

    let frees = trace.of(CudaFree);
    let double = frees
        .iter()
        .find(|e| e.result == 1 && Call::of(e).object == 0x7000_0010_0000);
    let double = double.expect("the double free");
    let n = trace.ordinal(double.seq);
    let r = replay_json(path, &["--at", &format!("event {n}")]);
    assert_eq!(r["at"], moment(&trace, &format!("event {n}"), double, 0));
    assert_eq!(by_device(&r), [(0, 1, MIB)]);
    let anomalies = &r["analysis"]["anomalies"];
    assert_eq!(
        anomalies["total"], 2,
        "the invalid free, then the double free"
    );
    let first_free = frees.iter().rev().find(|e| e.ok() && e.seq < double.seq);
    let first_free = first_free.expect("a successful free before the double free");
    assert_eq!(anomalies["double_frees"][0]["related_seq"], first_free.seq);
    let r = replay_json(path, &["--at", &format!("event {}", n - 1)]);
    assert_eq!(r["analysis"]["anomalies"]["total"], 1);
    assert_eq!(r["analysis"]["anomalies"]["double_frees"], json!([]));

    let l7 = trace
        .of(CudaMalloc)
        .into_iter()
        .find(|e| e.device == 1)
        .unwrap();
    let r = replay_json(path, &["--at", "peak"]);
    assert_eq!(r["at"], moment(&trace, "peak", l7, 0));
    // The index at the end of the trace says where the peak is: one pass.
    assert_eq!(r["passes"], 1);
    assert_eq!(by_device(&r), [(0, 5, 1517568), (1, 1, 2 * MIB)]);
    assert_eq!(r["live"]["host_memory"], totals(1, 4096), "L3");
});

// `--at peak` on wl_train: the last history tensor, 28 objects on device 0 in step 20.
captest!(replay_at_the_peak_of_wl_train, |dir| {
    let trace = Workload::new("wl_train").run_traced(dir).single_trace();
    let mut history = trace.of(CudaMallocAsync).into_iter().rev();
    let last = history
        .find(|e| Call::of(e).size == MIB)
        .expect("the history");
    let r = replay_json(&trace.path, &["--at", "peak"]);
    assert_eq!(r["at"], moment(&trace, "peak", last, 20));
    assert_eq!(r["live"]["device_memory"], totals(28, 35 * MIB + 8192));
});

/// Runs a replay that must fail: exit 2, nothing on stdout, and exactly `line` on stderr.
fn assert_error(trace: &Path, args: &[&str], line: &str) {
    let out = replay(trace, args);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{args:?}: {}",
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout), "", "{args:?}");
    assert_eq!(text(&out.stderr), format!("{line}\n"), "{args:?}");
}

// A point the trace does not reach is one error line and exit 2: a step, an event or an
// out-of-memory failure past the end, an --until before --at, steps in a trace without any,
// and a trace that does not exist.
captest!(replay_past_the_end_is_one_error_line, |dir| {
    let trace = Workload::new("wl_train").run_traced(dir).single_trace();
    let (path, n) = (&trace.path, trace.seqs.len());
    let p = path.display();
    let ends = format!("(it has {n} events, 20 steps and 0 out-of-memory failures)");
    assert_error(
        path,
        &["--at", "step=21"],
        &format!("error: {p}: the trace ends before step 21 {ends}"),
    );
    let past = format!("event {}", n + 1);
    assert_error(
        path,
        &["--at", &past],
        &format!("error: {p}: the trace ends before {past} {ends}"),
    );
    let oom = format!("error: {p}: the trace has no out-of-memory failure {ends}");
    assert_error(path, &["--at", "oom"], &oom);
    let until = format!(
        "error: {p}: --at step 12 comes after --until step 10: --until names a later point"
    );
    assert_error(path, &["--at", "step=12", "--until", "step=10"], &until);
    let same = format!(
        "error: {p}: --at end is the same point as --until end: --until names a later point"
    );
    assert_error(path, &["--at", "end", "--until", "end"], &same);

    let runtime_dir = dir.join("runtime");
    std::fs::create_dir(&runtime_dir).unwrap();
    let runtime = Workload::new("wl_runtime")
        .run_traced(&runtime_dir)
        .single_trace();
    // A step of a trace without steps: the error says it has none and what to ask instead.
    let (p, n) = (runtime.path.display(), runtime.seqs.len());
    let out = replay(&runtime.path, &["--at", "step=1"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stdout), "");
    let err = text(&out.stderr);
    let said = format!(
        "error: {p}: the trace has no steps (no step marks, no repeating allocation pattern): \
         give a time since its start (--at 3s) or an event (--at 'event N'); it has {n} events \
         over "
    );
    assert!(err.starts_with(&said) && err.lines().count() == 1, "{err}");

    let missing = dir.join("missing.vtrace");
    let line = format!(
        "error: {}: no such file or directory (os error 2)",
        missing.display()
    );
    assert_error(&missing, &["--at", "peak"], &line);
});

// A point that is no point (events count from 1) is refused before the trace is read: exit 2,
// and the error says why.
captest!(replay_rejects_a_malformed_point, |dir| {
    let trace = Workload::new("wl_runtime").run_traced(dir).single_trace();
    let out = replay(&trace.path, &["--at", "event 0"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stdout), "");
    // One line, as every error of vramtrace's own.
    let err = text(&out.stderr);
    let want = "error: invalid value 'event 0' for '--at <POINT>': 'event 0': events are counted \
                from 1 (see --help)\n";
    assert_eq!(err, want);
});

// The bundled demo's run (wl_train on a 512 MiB stand-in device): a replay to step 10 titles
// its tables by that step, and its growth alert carries no shape that contradicts it; the
// report's one-line orphan finding says what the orphan table lists (a 4 MiB registration
// whose buffer is gone, holding no device memory of its own).
captest!(the_demo_reads_the_same_in_lines_and_tables, |dir| {
    let w = Workload::new("wl_train").env("STANDIN_DEVICE_MEM", "512M");
    let trace = w.run_traced(dir).single_trace();
    let out = replay(&trace.path, &["--at", "step=10"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.contains("\nLive at step 10 by call site ("),
        "{shown}"
    );
    assert!(!shown.contains("at the end"), "{shown}");
    let alerts: Vec<&str> = shown
        .lines()
        .filter(|l| l.contains("ALERT device 0"))
        .collect();
    assert_eq!(alerts.len(), 1, "{shown}");
    // The device's own line grows steadily too (its warm-up left out): the shape agrees.
    assert!(alerts[0].ends_with(" [steady]"), "{}", alerts[0]);

    let out = vramtrace_command()
        .arg("report")
        .arg(&trace.path)
        .output()
        .unwrap();
    let shown = text(&out.stdout);
    let orphans: Vec<&str> = shown
        .lines()
        .filter(|l| l.starts_with("  orphans "))
        .collect();
    assert_eq!(
        orphans,
        ["  orphans        1 orphan, holding 0 B of device memory: 1 registration whose buffer is gone (4.0 MiB registered)"]
    );
    let row = shown
        .lines()
        .find(|l| l.trim_start().starts_with("registration "))
        .unwrap_or_else(|| panic!("no orphan row: {shown}"));
    assert!(row.contains(" 4.0 MiB "), "{row}");
});

// `--at -1s` was a flag error of the command-line parser, and a time past the end was clamped
// while a step past the end was an error. Now a negative point is a clear one-line error, and a
// time past the end is an error like a step's, saying how long the trace lasts.
captest!(replay_times_follow_the_same_rule_as_steps, |dir| {
    let trace = Workload::new("wl_runtime").run_traced(dir).single_trace();
    let out = replay(&trace.path, &["--at", "-1s"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "error: invalid value '-1s' for '--at <POINT>': '-1s': a point of a trace is never \
         negative (steps, events and times count from the start of the trace) (see --help)\n"
    );
    let s = &trace.state;
    let span_ns = s.last_time_ns() - s.first_time_ns();
    let lasted = vramtrace_collector::units::span(span_ns);
    let n = trace.seqs.len();
    let p = trace.path.display();
    assert_error(
        &trace.path,
        &["--at", "3600s"],
        &format!(
            "error: {p}: the trace ends before 60 min after the first event (it has {n} events \
             over {lasted}, 0 steps and 1 out-of-memory failure)"
        ),
    );
    // A time inside the trace is reached as before.
    let half = format!("{}ns", span_ns / 2);
    assert_eq!(replay(&trace.path, &["--at", &half]).status.code(), Some(0));
});

// Five out-of-memory failures at step 1 of a loop of 20,000 steps, in a trace of 1 MiB
// segments within 2 MiB: rotation deletes the segment that held them. `replay --at oom` cannot
// see them, and says so: not "the trace has no out-of-memory failure", which denied them.
captest!(an_oom_in_deleted_segments_is_not_denied, |dir| {
    let script = "import ctypes\n\
        rt = ctypes.CDLL('libcudart.so.13')\n\
        mark = ctypes.CDLL(None).vramtrace_mark_step\n\
        p = ctypes.c_void_p()\n\
        for s in range(1, 20001):\n\
        \x20   mark()\n\
        \x20   if s == 1:\n\
        \x20       for i in range(5):\n\
        \x20           rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(1 << 40))\n\
        \x20   for i in range(50):\n\
        \x20       rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(4096 * (1 + i)))\n\
        \x20       rt.cudaFree(p)\n";
    let out = vramtrace_tests::traced::traced_program("python3", dir)
        .env("VRAMTRACE_SEGMENT_BYTES", "1MiB")
        .env("VRAMTRACE_MAX_BYTES", "2MiB")
        .args(["-c", script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let files = vramtrace_tests::traced::trace_files(dir);
    let trace = files.iter().find(|f| !f.to_string_lossy().contains(".seg"));
    let name = match trace {
        Some(t) => t.clone(),
        // Every file is a segment: the trace's name is that of its first, less `.segN`.
        None => {
            let seg = files[0].to_string_lossy().into_owned();
            let (head, tail) = seg.split_once(".seg").unwrap();
            let ext = tail.split_once('.').map_or("", |(_, e)| e);
            std::path::PathBuf::from(format!("{head}.{ext}"))
        }
    };
    let out = replay(&name, &["--at", "oom"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(": no out-of-memory failure since step ")
            && err.contains(
                ", where the segments on disk begin (a segment's snapshot: rotation deleted the \
                 segments before it, and any failure there is not known)"
            ),
        "{err}"
    );
});
