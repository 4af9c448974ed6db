//! How `vramtrace report` reads a file: once, even when the steps of a trace without marks must
//! be found in it; twice only when its first part shows other steps than the whole; and damage
//! reported with the bytes and events it cost.

use std::path::Path;

use serde_json::Value;
use vramtrace_collector::event::{Api, Event, MemKind, Op};
use vramtrace_collector::format::{Record, TraceWriter};

use crate::support::*;

fn report_json(path: &Path) -> Value {
    let out = vramtrace()
        .args(["report", "--json"])
        .arg(path)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    serde_json::from_slice(&out).expect("one JSON document")
}

/// A training loop without step marks: each step allocates its step buffer (3 MiB at
/// `step_site`) first, then a temporary (just after), and leaks 1 MiB (further on); the step
/// buffer and the temporary are freed by the step's end. `steps` gives each phase's step site
/// and steps: a phase is a loop of its own, none of its calls recurring in another.
fn training(path: &Path, steps: &[(u64, u64)]) {
    let mut w = TraceWriter::new(std::fs::File::create(path).unwrap(), &header())
        .unwrap()
        .with_chunk_bytes(1024);
    let mut seq = 0;
    let mut next = |api: Api, op: Op, caller: u64| {
        seq += 1;
        Record::Event(Event {
            time_ns: seq * 1000,
            thread: 1,
            context: 0xc7,
            caller,
            ..Event::new(seq, api, op)
        })
    };
    let alloc = |ptr, size| Op::Alloc {
        kind: MemKind::Device,
        ptr,
        size,
        stream: 0,
        pool: 0,
        flags: 0,
        pitch: 0,
    };
    let mut leak = 0x5000_0000_0000;
    for &(step_site, count) in steps {
        for _ in 0..count {
            let (buffer, temporary) = (0x7000_0000_0000, 0x7100_0000_0000);
            w.write(&next(Api::CudaMalloc, alloc(buffer, 3 * MIB), step_site))
                .unwrap();
            w.write(&next(
                Api::CudaMalloc,
                alloc(temporary, 4096),
                step_site + 8,
            ))
            .unwrap();
            leak += MIB;
            w.write(&next(Api::CudaMalloc, alloc(leak, MIB), step_site + 0x200))
                .unwrap();
            for ptr in [temporary, buffer] {
                let free = Op::Free { ptr, stream: 0 };
                w.write(&next(Api::CudaFree, free, APP + 0x400)).unwrap();
            }
        }
    }
    w.finish().unwrap();
}

#[test]
fn a_trace_without_marks_is_read_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loop.vtrace");
    training(&path, &[(APP + 0x100, 400)]);
    if let Ok(keep) = std::env::var("KEEP_TRACE") {
        std::fs::copy(&path, keep).unwrap();
    }
    let r = report_json(&path);
    assert_eq!(r["reading"]["passes"], 1);
    assert_eq!(r["events"]["steps"], 400);
    let steps = &r["analysis"]["steps"];
    assert_eq!(steps["source"], "pattern");
    assert_eq!(steps["pattern"]["anchor"]["bytes"], 3 * MIB);
    let growth = &r["analysis"]["growth"];
    assert_eq!(growth["axis"], "steps");
    let slope = growth["steady"][0]["fit"]["slope"].as_f64().unwrap();
    assert!((slope - MIB as f64).abs() < 1.0, "{slope} bytes a step");
    // The leak's objects were made in steps 1 to 400.
    let leak = &r["analysis"]["leaks"]["sites"][0];
    assert_eq!(
        (leak["count"].as_u64(), leak["bytes"].as_u64()),
        (Some(400), Some(400 * MIB))
    );
    assert_eq!(
        (&leak["first_step"], &leak["last_step"]),
        (&Value::from(1), &Value::from(400))
    );
}

/// The first part shows one step buffer, the whole trace another: the first reading's steps are
/// wrong, and the trace is read again with the right ones.
#[test]
fn steps_that_change_after_the_first_part_are_read_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("changed.vtrace");
    training(&path, &[(APP + 0x100, 60), (APP + 0x180, 240)]);
    let r = report_json(&path);
    assert_eq!(r["reading"]["passes"], 2);
    assert_eq!(r["events"]["steps"], 240);
    assert_eq!(r["analysis"]["steps"]["pattern"]["steps"], 240);
}

/// A damaged chunk costs that chunk; the report says which bytes and how many events.
#[test]
fn damage_is_reported_with_its_bytes_and_events() {
    let dir = tempfile::tempdir().unwrap();
    let (path, boundary) = write_workload(dir.path(), "damaged.vtrace");
    let mut bytes = std::fs::read(&path).unwrap();
    // A bit of the first chunk's compressed bytes (after its 40-byte fixed part).
    let first = 2 * (20 + u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as u64);
    bytes[first as usize + 45] ^= 0x08;
    std::fs::write(&path, &bytes).unwrap();
    let r = report_json(&path);
    let unread = &r["reading"]["unread"];
    assert_eq!(unread["ranges_total"], 1);
    assert_eq!(unread["events"], 5);
    assert_eq!(unread["events_known"], true);
    assert_eq!(unread["bytes"], boundary - first);
    assert_eq!(unread["ranges"][0]["offset"], first);
    assert_eq!(unread["ranges"][0]["reason"], "checksum mismatch");
    // The second chunk (and its end record) read as written.
    assert_eq!(r["reading"]["complete"], true);
    assert_eq!(r["reading"]["records"], workload().len() - FIRST_CHUNK);
    let text = String::from_utf8(
        vramtrace()
            .arg("report")
            .arg(&path)
            .assert()
            .success()
            .get_output()
            .stdout
            .clone(),
    )
    .unwrap();
    let want = format!(
        "  unread    {} bytes in 1 place, 5 events: bytes {first}..{boundary} (checksum mismatch)",
        boundary - first
    );
    assert!(text.contains(&want), "{text}");
}

// Reading from a step of a trace without steps: the error says it has none and what to give
// instead, as replay's does (it said the trace "ends before step 10 (it has 0 steps)").
#[test]
fn since_a_step_of_a_trace_without_steps_is_said_so() {
    let trace = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/gpu/h100/ranks_gloo-rank2-bare.vtrace");
    let out = vramtrace()
        .args(["report", "--since", "step 10"])
        .arg(&trace)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(": the trace has no steps (no step marks, no repeating allocation pattern): read from a time since its start instead (--since 3s); it lasts "),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}
