//! `vramtrace export` on the training-loop trace of planted truth, each format read back by a
//! reader that is not vramtrace's: the trace-event JSON by a checker written from the Trace
//! Event Format's documentation over `serde_json::Value`, the flame graph by an XML parser, the
//! PyTorch snapshot by Python's `pickle` (with the keys `torch.cuda._memory_viz` reads), the
//! CSV by the `csv` crate's reader.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use vramtrace_collector::format::Record;

use crate::support::*;

/// Exports `trace` to `dir/out.FORMAT`, replacing an earlier export there.
fn export(trace: &Path, dir: &Path, format: &str, extra: &[&str]) -> PathBuf {
    let out = dir.join(format!("out.{format}"));
    vramtrace()
        .args(["export", "--force", "--format", format, "-o"])
        .arg(&out)
        .args(extra)
        .arg(trace)
        .assert()
        .success();
    out
}

fn training(dir: &Path) -> PathBuf {
    write_training(dir, "train.vtrace")
}

// ---- Trace Event Format ----------------------------------------------------------------------

/// Checks `doc` against the Trace Event Format (the JSON Object Format: `traceEvents` plus
/// optional metadata) and returns its events. Phases used here: `X` complete events need `ts`
/// and `dur`; `i` instants a scope `s` of `g`, `p` or `t`; `C` counters numeric `args`; `M`
/// metadata a name among `process_name`, `thread_name`... and `args.name`.
fn trace_events(doc: &Value) -> Vec<&Value> {
    let events = doc["traceEvents"]
        .as_array()
        .expect("a JSON object with a traceEvents array");
    if let Some(unit) = doc.get("displayTimeUnit") {
        assert!(matches!(unit.as_str(), Some("ms" | "ns")), "{unit}");
    }
    for e in events {
        let ph = e["ph"].as_str().unwrap_or_else(|| panic!("no ph: {e}"));
        assert!(e["name"].is_string(), "no name: {e}");
        assert!(e["pid"].is_u64() || e["pid"].is_i64(), "no pid: {e}");
        match ph {
            "M" => {
                assert!(
                    matches!(
                        e["name"].as_str(),
                        Some(
                            "process_name"
                                | "thread_name"
                                | "process_sort_index"
                                | "thread_sort_index"
                        )
                    ),
                    "{e}"
                );
                assert!(e["args"]["name"].is_string() || e["args"]["sort_index"].is_number());
            }
            "X" => {
                assert!(e["ts"].as_f64().is_some_and(|t| t >= 0.0), "{e}");
                assert!(e["dur"].as_f64().is_some_and(|d| d >= 0.0), "{e}");
                assert!(e["tid"].is_number(), "{e}");
            }
            "i" | "I" => {
                assert!(e["ts"].as_f64().is_some_and(|t| t >= 0.0), "{e}");
                assert!(
                    matches!(e["s"].as_str(), Some("g" | "p" | "t") | None),
                    "{e}"
                );
            }
            "C" => {
                assert!(e["ts"].as_f64().is_some_and(|t| t >= 0.0), "{e}");
                let args = e["args"].as_object().expect("counter args");
                assert!(
                    !args.is_empty() && args.values().all(Value::is_number),
                    "{e}"
                );
            }
            other => panic!("phase {other} not expected here: {e}"),
        }
    }
    events.iter().collect()
}

/// `(ts, value)` of the counter track `name` (its only series, `bytes`).
fn counter(events: &[&Value], name: &str) -> Vec<(f64, u64)> {
    events
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"] == name)
        .map(|e| {
            (
                e["ts"].as_f64().unwrap(),
                e["args"]["bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn perfetto_has_counter_tracks_slices_and_instants() {
    let dir = tempfile::tempdir().unwrap();
    let trace = training(dir.path());
    let out = export(&trace, dir.path(), "perfetto", &[]);
    let doc: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let events = trace_events(&doc);

    // Fewer events than samples: the device's counter is exact, event by event.
    let device = counter(&events, "device 0 live bytes");
    assert_eq!(device.len() as u64, TRAINING_EVENTS);
    assert!(
        device.windows(2).all(|w| w[0].0 <= w[1].0),
        "time goes forward"
    );
    assert_eq!(device.iter().map(|p| p.1).max(), Some(22 * MIB));
    assert_eq!(device.last().unwrap().1, 14 * MIB);
    // The leak's own track ends at 12 MiB; the temporary's rises to 8 MiB and falls back.
    let leak = counter(&events, "device 0: train.py:42 in step");
    assert_eq!(leak.last().unwrap().1, 12 * MIB);
    let temp = counter(&events, "device 0: train.py:30 in forward");
    assert_eq!(temp.iter().map(|p| p.1).max(), Some(8 * MIB));
    assert_eq!(temp.last().unwrap().1, 0);

    let slices = |cat: &str| -> Vec<&Value> {
        events
            .iter()
            .copied()
            .filter(|e| e["ph"] == "X" && e["cat"] == cat)
            .collect()
    };
    let steps = slices("step");
    assert_eq!(steps.len() as u64, TRAINING_STEPS);
    // Named as every output counts steps: the first mark begins step 1.
    assert_eq!(steps[0]["name"], "step 1");
    assert_eq!(steps[0]["args"]["step"], 1);
    // Step 1 begins at the 2nd event (1 ms after the first) and lasts its 6 events.
    assert_eq!(steps[0]["ts"].as_f64(), Some(1000.0));
    assert_eq!(steps[0]["dur"].as_f64(), Some(6000.0));
    let ranges = slices("nvtx");
    assert_eq!(ranges.len() as u64, TRAINING_STEPS);
    assert!(ranges.iter().all(|r| r["name"] == "forward"));
    // forward: push to pop, 4 ms, on the program's thread.
    assert_eq!(ranges[0]["dur"].as_f64(), Some(4000.0));
    assert_eq!(ranges[0]["tid"], 11);

    let instants: Vec<&Value> = events.iter().copied().filter(|e| e["ph"] == "i").collect();
    assert_eq!(instants.len(), 3, "{instants:?}");
    let oom = instants.iter().find(|e| e["cat"] == "failure").unwrap();
    assert_eq!(oom["name"], "cudaMalloc out of memory");
    assert_eq!(oom["args"]["out_of_memory"], true);
    assert_eq!(oom["args"]["request_bytes"], 64u64 << 30);
    assert_eq!(oom["args"]["live_device_bytes"], 14 * MIB);
    let mark = instants.iter().find(|e| e["cat"] == "nvtx").unwrap();
    assert_eq!(mark["name"], "checkpoint");
    // The workload's alert, at step 10, where the tracer raised it.
    let alert = instants.iter().find(|e| e["cat"] == "alert").unwrap();
    assert_eq!(alert["name"], "vramtrace ALERT: device 0");
    assert_eq!(alert["args"]["step"], 10);
    assert_eq!(alert["args"]["place"], "/work/app/train.py:42 in step");
}

#[test]
fn perfetto_keeps_the_peak_when_it_samples() {
    let dir = tempfile::tempdir().unwrap();
    let trace = training(dir.path());
    let out = export(&trace, dir.path(), "perfetto", &["--samples", "8"]);
    let doc: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let events = trace_events(&doc);
    let device = counter(&events, "device 0 live bytes");
    assert!(device.len() <= 16, "{}", device.len());
    assert_eq!(device.iter().map(|p| p.1).max(), Some(22 * MIB));
    assert_eq!(device.last().unwrap().1, 14 * MIB);
}

// ---- Flame graph -----------------------------------------------------------------------------

/// The `<title>` texts of the flame graph's frames.
fn frame_titles(svg: &str) -> Vec<String> {
    // inferno's SVG declares the SVG 1.1 DTD.
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..roxmltree::ParsingOptions::default()
    };
    let doc =
        roxmltree::Document::parse_with_options(svg, options).expect("the flame graph is XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    doc.descendants()
        .filter(|n| n.has_tag_name("title"))
        .filter_map(|n| n.text().map(str::to_string))
        .collect()
}

fn has_frame(titles: &[String], prefix: &str, bytes: &str) -> bool {
    titles
        .iter()
        .any(|t| t.starts_with(prefix) && t.contains(&format!("({bytes} bytes")))
}

#[test]
fn flame_graphs_name_the_planted_sites() {
    let dir = tempfile::tempdir().unwrap();
    let trace = training(dir.path());

    let end = std::fs::read_to_string(export(&trace, dir.path(), "flamegraph", &[])).unwrap();
    let titles = frame_titles(&end);
    assert!(has_frame(&titles, "device 0", "14,680,064"), "{titles:?}");
    assert!(
        has_frame(&titles, "step (train.py:42)", "12,582,912"),
        "{titles:?}"
    );
    assert!(
        has_frame(&titles, "libnccl.so.2+0x500", "2,097,152"),
        "{titles:?}"
    );
    assert!(
        !titles.iter().any(|t| t.starts_with("forward")),
        "freed: {titles:?}"
    );

    let peak = dir.path().join("peak.svg");
    vramtrace()
        .args(["export", "-f", "flamegraph", "--at", "peak", "-o"])
        .arg(&peak)
        .arg(&trace)
        .assert()
        .success();
    let titles = frame_titles(&std::fs::read_to_string(&peak).unwrap());
    assert!(has_frame(&titles, "device 0", "23,068,672"), "{titles:?}");
    assert!(
        has_frame(&titles, "forward (train.py:30)", "8,388,608"),
        "{titles:?}"
    );

    let growth = dir.path().join("growth.svg");
    vramtrace()
        .args(["export", "-f", "flamegraph", "--at", "growth", "-o"])
        .arg(&growth)
        .arg(&trace)
        .assert()
        .success();
    let titles = frame_titles(&std::fs::read_to_string(&growth).unwrap());
    // Only the leak grows: 1 MiB a step.
    assert!(
        has_frame(&titles, "step (train.py:42)", "1,048,576"),
        "{titles:?}"
    );
    assert!(
        !titles.iter().any(|t| t.starts_with("forward")),
        "{titles:?}"
    );
}

// ---- PyTorch snapshot ------------------------------------------------------------------------

/// Loads a snapshot with Python's `pickle`, checks the keys `torch.cuda._memory_viz` and its
/// JavaScript viewer read, replays `device_traces` backwards from `segments` as the viewer does
/// (every block must lie in a segment at every step), and prints what it found as JSON.
const SNAPSHOT_CHECK: &str = r#"
import collections, json, pickle, sys
data = pickle.load(open(sys.argv[1], "rb"))
segs = data["segments"]
for s in segs:
    for k in ("device", "address", "total_size", "allocated_size", "active_size",
              "requested_size", "stream", "segment_type", "frames", "blocks"):
        assert k in s, k
    addr = s["address"]
    for b in s["blocks"]:
        for k in ("size", "requested_size", "state", "frames"):
            assert k in b, k
        assert b["state"] in ("active_allocated", "active_pending_free", "inactive")
        addr += b["size"]
    assert addr == s["address"] + s["total_size"]
    for f in s["frames"]:
        assert isinstance(f["name"], str) and isinstance(f["filename"], str)
        assert isinstance(f["line"], int)
actions = collections.Counter()
for dev, trace in enumerate(data["device_traces"]):
    segments = {s["address"]: s["total_size"] for s in segs if s["device"] == dev}
    blocks = {}
    for s in segs:
        a = s["address"]
        for b in s["blocks"]:
            if s["device"] == dev and b["state"].startswith("active"):
                blocks[a] = b["size"]
            a += b["size"]
    for e in trace:
        for k in ("action", "addr", "size", "stream", "time_us", "frames"):
            assert k in e, k
        actions[e["action"]] += 1
    for e in reversed(trace):
        a, addr = e["action"], e["addr"]
        if a == "alloc":
            blocks.pop(addr)
        elif a == "free_completed":
            blocks[addr] = e["size"]
        elif a == "segment_alloc":
            assert addr in segments and addr not in blocks
            segments.pop(addr)
        elif a == "segment_free":
            segments[addr] = e["size"]
        for b, size in blocks.items():
            assert any(sa <= b and b + size <= sa + ss for sa, ss in segments.items()), b
print(json.dumps({
    "keys": sorted(data.keys()),
    "segments": len(segs),
    "bytes": sum(s["total_size"] for s in segs),
    "leak_frames": [f["name"] + ":" + str(f["line"]) for f in segs[-1]["blocks"][0]["frames"]],
    "actions": actions,
    "omitted": data["vramtrace"]["entries_omitted"],
}))
"#;

fn check_snapshot(path: &Path) -> Value {
    let out = Command::new("python3")
        .arg("-c")
        .arg(SNAPSHOT_CHECK)
        .arg(path)
        .output()
        .expect("running python3 (the tests need it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_pytorch_snapshot_loads_in_python_and_replays() {
    let dir = tempfile::tempdir().unwrap();
    let trace = training(dir.path());
    let out = export(&trace, dir.path(), "pytorch", &[]);
    let s = check_snapshot(&out);
    assert_eq!(
        s["keys"],
        serde_json::json!(["device_traces", "segments", "vramtrace"])
    );
    // Live at the end: the NCCL buffer and the 12 leaks.
    assert_eq!(s["segments"], 13);
    assert_eq!(s["bytes"], 14 * MIB);
    // The last segment by address is the last leak; its Python frames name the planted line.
    let frames: Vec<&str> = s["leak_frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(frames.contains(&"step:42"), "{frames:?}");
    assert!(frames.contains(&"<module>:88"), "{frames:?}");
    // 25 allocations (the buffer, 12 temporaries, 12 leaks), 12 frees.
    let a = &s["actions"];
    assert_eq!(
        (a["segment_alloc"].as_u64(), a["alloc"].as_u64()),
        (Some(25), Some(25))
    );
    assert_eq!(a["free_requested"], 12);
    assert_eq!(a["free_completed"], 12);
    assert_eq!(a["segment_free"], 12);
    assert_eq!(s["omitted"], 0);

    // A ring of 10 entries keeps the latest 10, and the replay back from the end still holds.
    let out = export(&trace, dir.path(), "pytorch", &["--max-entries", "10"]);
    let s = check_snapshot(&out);
    assert_eq!(s["omitted"], 25 * 2 + 12 * 3 - 10);
    assert_eq!(s["segments"], 13);
}

// ---- CSV -------------------------------------------------------------------------------------

fn csv_rows(path: &Path) -> (csv::StringRecord, Vec<csv::StringRecord>) {
    let mut r = csv::Reader::from_path(path).unwrap();
    let headers = r.headers().unwrap().clone();
    let rows = r.records().map(Result::unwrap).collect();
    (headers, rows)
}

#[test]
fn csv_has_a_row_per_event_and_per_live_object() {
    let dir = tempfile::tempdir().unwrap();
    let trace = training(dir.path());
    let (headers, rows) = csv_rows(&export(&trace, dir.path(), "csv-events", &[]));
    assert_eq!(rows.len() as u64, TRAINING_EVENTS);
    let col = |name: &str| headers.iter().position(|h| h == name).unwrap();
    let report: Value = serde_json::from_slice(
        &vramtrace()
            .args(["report", "--json"])
            .arg(&trace)
            .assert()
            .success()
            .get_output()
            .stdout,
    )
    .unwrap();
    assert_eq!(
        rows.len() as u64,
        report["events"]["applied"].as_u64().unwrap()
    );
    let allocs = rows.iter().filter(|r| &r[col("op")] == "alloc").count();
    assert_eq!(
        allocs, 26,
        "the buffer, 12 temporaries, 12 leaks, the failed request"
    );
    let oom = rows.iter().find(|r| &r[col("result")] == "2").unwrap();
    assert_eq!(&oom[col("bytes")], (64u64 << 30).to_string());
    assert_eq!(&rows.last().unwrap()[col("step")], "12");
    let marks: Vec<&str> = rows
        .iter()
        .filter(|r| &r[col("op")] == "mark")
        .map(|r| r.get(col("name")).unwrap())
        .collect();
    assert_eq!(marks, ["checkpoint"]);

    let (headers, rows) = csv_rows(&export(&trace, dir.path(), "csv-live", &[]));
    assert_eq!(rows.len(), 13);
    let col = |name: &str| headers.iter().position(|h| h == name).unwrap();
    let leak_rows: Vec<_> = rows
        .iter()
        .filter(|r| &r[col("label")] == "train.py:42 in step")
        .collect();
    assert_eq!(leak_rows.len(), 12);
    assert!(leak_rows
        .iter()
        .all(|r| r[col("device_bytes")] == MIB.to_string()));
    let total: u64 = rows
        .iter()
        .map(|r| r[col("device_bytes")].parse::<u64>().unwrap())
        .sum();
    assert_eq!(total, 14 * MIB);
}

#[test]
fn export_errors_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = vramtrace()
        .args(["export", "-f", "perfetto", "-o"])
        .arg(dir.path().join("x.json"))
        .arg(dir.path().join("missing.vtrace"))
        .assert()
        .code(2)
        .get_output()
        .stderr
        .clone();
    let err = String::from_utf8(out).unwrap();
    assert!(
        err.starts_with("error: ") && err.lines().count() == 1,
        "{err}"
    );
    assert!(err.contains("missing.vtrace"), "{err}");
    // A failed export leaves nothing behind: no output, no temporary file.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    // A flame graph of growth in a trace where nothing grows says so.
    let (healthy, _) = write_workload(dir.path(), "w.vtrace");
    let refused = |args: &[&str]| {
        let out = vramtrace()
            .args(["export"])
            .args(args)
            .arg("-o")
            .arg(dir.path().join("n.out"))
            .arg(&healthy)
            .assert()
            .code(2)
            .get_output()
            .stderr
            .clone();
        String::from_utf8(out).unwrap()
    };
    let err = refused(&["-f", "flamegraph", "--at", "growth"]);
    assert!(err.contains("no call site grows steadily"), "{err}");
    // A growth setting where nothing judges growth would be ignored unsaid: refused.
    for args in [
        ["-f", "perfetto", "--alert-percent", "5"],
        ["-f", "flamegraph", "--horizon", "2h"],
    ] {
        assert_eq!(
            refused(&args),
            "error: --device-memory, --alert-percent, --horizon-steps and --horizon set the \
             growth analysis of --format flamegraph --at growth and --format parquet's findings \
             only\n"
        );
    }
}

// The `step` column of csv-events counts the report's steps: an H100 run whose hooks marked the
// loop's first iteration before the optimizer's step marks has 200 (the column said 201).
#[test]
fn csv_events_count_the_report_s_steps() {
    let trace = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/gpu/h100/leak_slow-run.vtrace");
    let dir = tempfile::tempdir().unwrap();
    let csv = export(&trace, dir.path(), "csv-events", &[]);
    let text = std::fs::read_to_string(csv).unwrap();
    let mut rows = text.lines();
    let header: Vec<&str> = rows.next().unwrap().split(',').collect();
    let step = header.iter().position(|h| *h == "step").unwrap();
    let last: u64 = (rows.map(|r| r.split(',').nth(step).unwrap().parse::<u64>().unwrap()))
        .max()
        .unwrap();
    assert_eq!(last, 200);
}

/// `export -o - … | head`: the reader closing the pipe early ends the export quietly, exit 0
/// (it said "error: writing the table: Broken pipe").
#[test]
fn a_table_piped_into_head_ends_quietly() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    // 400,000 events: far more CSV than a pipe holds.
    let trace = write_pairs(dir.path(), "long.vtrace", 200_000);
    let bin = assert_cmd::cargo::cargo_bin("vramtrace");
    let mut child = Command::new(bin)
        .args(["export", "--format", "csv-events", "-o", "-"])
        .arg(&trace)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("seq,time_ns,"), "{first}");
    // The read end is dropped here.
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "",
        "it printed on stderr"
    );
    assert_eq!(out.status.code(), Some(0));
}

// Every export of a trace that could not be read whole says so on stderr, as the report's
// INCOMPLETE line does, and writes what could be read: the training trace without its end
// record (a killed process) holds all its events, and says it is cut short; the flame graph of
// what is live at the end of a trace cut before any event says why there is nothing to draw.
#[test]
fn an_export_of_a_cut_trace_says_it_holds_what_could_be_read() {
    let dir = tempfile::tempdir().unwrap();
    let records: Vec<Record> = (crate::support::training().into_iter())
        .filter(|r| !matches!(r, Record::End(_)))
        .collect();
    let cut = write_records(dir.path(), "cut.vtrace", &records);
    let whole = training_rows(dir.path());
    for format in [
        "csv-live",
        "csv-events",
        "pytorch",
        "perfetto",
        "flamegraph",
    ] {
        let out = dir.path().join(format!("cut.{format}"));
        let run = vramtrace()
            .args(["export", "--format", format, "-o"])
            .arg(&out)
            .arg(&cut)
            .assert()
            .success();
        let err = String::from_utf8_lossy(&run.get_output().stderr).into_owned();
        let warning = format!(
            "warning: {} is cut short (no end record: the trace stops at byte ",
            cut.display()
        );
        assert!(
            err.starts_with(&warning)
                && err.lines().next().unwrap().ends_with(
                    " (process killed or still running)): the export holds what could be read"
                ),
            "{format}: {err}"
        );
        if format == "csv-live" {
            assert_eq!(csv_rows(&out).1.len(), whole, "{format}");
        }
    }
    // Without its end record, a trace of no event at all.
    let nothing: Vec<Record> = (crate::support::training().into_iter())
        .filter(|r| !matches!(r, Record::End(_) | Record::Event(_)))
        .collect();
    let empty = write_records(dir.path(), "empty.vtrace", &nothing);
    let run = vramtrace()
        .args(["export", "--format", "flamegraph", "-o"])
        .arg(dir.path().join("empty.svg"))
        .arg(&empty)
        .assert()
        .code(2);
    let err = String::from_utf8_lossy(&run.get_output().stderr).into_owned();
    assert!(
        err.contains(": nothing to draw (no memory is live at the end of what could be read: the trace is cut short (no end record"),
        "{err}"
    );
}

/// The rows of `csv-live` of the whole training trace.
fn training_rows(dir: &Path) -> usize {
    let out = export(&training(dir), dir, "csv-live", &[]);
    csv_rows(&out).1.len()
}
