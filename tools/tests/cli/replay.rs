//! `vramtrace replay` on a known training run: the tables are titled by the moment replayed, and
//! an alert is never labelled with a shape that contradicts it.

use crate::support::*;

fn replay_text(path: &std::path::Path, args: &[&str]) -> String {
    let out = vramtrace()
        .arg("replay")
        .args(args)
        .arg(path)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    String::from_utf8(out)
        .unwrap()
        .replace(&path.display().to_string(), "[TRACE]")
}

#[test]
fn a_mid_run_replay_is_titled_by_its_moment() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_six_step_training(dir.path(), "train.vtrace");
    let text = replay_text(&path, &["--at", "step 5", "--device-memory", "512MiB"]);
    insta::assert_snapshot!("replay_at_step", text);
    assert!(!text.contains("at the end"), "{text}");
    assert!(!text.contains("[flat]"), "{text}");

    let text = replay_text(&path, &["--at", "peak", "--device-memory", "512MiB"]);
    assert!(
        text.contains("\nLive at the peak (event 13) by call site (2 of 2)\n"),
        "{text}"
    );
    assert!(
        text.contains("\n  live           at the peak (event 13): 22.0 MiB device in 7 objects"),
        "{text}"
    );
    let text = replay_text(&path, &["--at", "event 4", "--device-memory", "512MiB"]);
    assert!(
        text.contains("\nLive after event 4 by call site (2 of 2)\n"),
        "{text}"
    );
    // Step 0 of a trace whose first event is a step's: before any event, not "after event 0"
    // (events count from 1).
    let text = replay_text(&path, &["--at", "step 0"]);
    assert!(
        text.contains("\n  at        step 0 as it begins: before the first event, 0 steps begun\n"),
        "{text}"
    );
}

// One place, one name: in the demo's replay, places that read the same in a table (NCCL's
// buffers made through three paths of fw_init_process_group) are told apart by one tag each,
// the same in the live table, the peak table and the growth lists; a place alone under its
// name in a table shows the name without it.
#[test]
fn a_place_wears_the_same_name_in_every_table() {
    let dir = tempfile::tempdir().unwrap();
    let trace = crate::html::screenshot::demo_trace(dir.path());
    let out = vramtrace()
        .args(["replay", "--json", "--at", "step 10"])
        .arg(&trace)
        .assert()
        .success();
    let d: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let a = &d["analysis"];
    let mut rows: Vec<&serde_json::Value> =
        a["leaks"]["sites"].as_array().unwrap().iter().collect();
    for h in a["peaks"]["holders"].as_array().unwrap() {
        rows.extend(h["by_site"].as_array().unwrap());
    }
    for list in ["steady", "peaks", "shrinking", "one_off_rises"] {
        rows.extend(a["growth"][list].as_array().unwrap());
    }
    let mut names: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for r in rows {
        let place = format!("{} {} {}", r["stack"], r["caller"], r["py_stack"]);
        names
            .entry(place)
            .or_default()
            .insert(r["label"].as_str().unwrap().to_string());
    }
    for (place, labels) in &names {
        let labels: Vec<&String> = labels.iter().collect();
        match labels[..] {
            [_] => {}
            [short, long] => {
                assert!(
                    long.starts_with(&format!("{short} ")),
                    "{place}: {labels:?}"
                );
            }
            _ => panic!("{place}: {labels:?}"),
        }
    }
    // The demo's process group is made through two native paths inside the library from one
    // call of the program's: one place, its name untagged in every table.
    let group: std::collections::BTreeSet<&String> = (names.values().flatten())
        .filter(|l| l.contains("fw_init_process_group"))
        .collect();
    let source = include_str!("../../../tests/workloads/wl_train.c");
    let line = 1
        + (source.lines())
            .position(|l| l.contains("sym(\"fw_init_process_group\")"))
            .unwrap();
    assert_eq!(
        group.into_iter().collect::<Vec<_>>(),
        [&format!(
            "main at wl_train.c:{line} → fw_init_process_group"
        )],
        "{names:?}"
    );
}

// `--at end` is the live set `report` shows, and `--at oom` on a trace without one says so.
#[test]
fn the_end_is_a_point_and_a_missing_oom_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let trace = crate::html::screenshot::demo_trace(dir.path());
    let json = |args: &[&str]| -> serde_json::Value {
        let out = vramtrace().args(args).arg(&trace).assert().success();
        serde_json::from_slice(&out.get_output().stdout).unwrap()
    };
    let end = json(&["replay", "--json", "--at", "end"]);
    let report = json(&["report", "--json"]);
    assert_eq!(end["at"]["point"], "end");
    assert_eq!(end["at"]["event"], report["events"]["applied"]);
    assert_eq!(
        end["live"]["device_memory"],
        report["live"]["device_memory"]
    );
    assert_eq!(end["analysis"]["leaks"], report["analysis"]["leaks"]);

    let out = vramtrace()
        .args(["replay", "--at", "oom"])
        .arg(&trace)
        .assert()
        .code(2);
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        err.starts_with(&format!(
            "error: {}: the trace has no out-of-memory failure (it has ",
            trace.display()
        )),
        "{err}"
    );
}

// `replay --at end` is the report's answer, whole: the same steps (an H100 run's hooks mark a
// loop's first iteration before the optimizer's step marks: the report counts the marks alone,
// replay counted one step more), PyTorch's view of the tensors beside the driver's (replay named
// the allocator's line 32 for leak_slow's 33, and gpt_leaky's 63 for 57), and a repeating
// allocation's steps where nothing marks them (replay judged leak_slow's bare run along time).
#[test]
fn the_end_of_a_replay_is_the_report() {
    let fixtures =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/gpu");
    for name in [
        "h100/leak_slow-run.vtrace",
        "h100/ranks_gloo-rank2-run.vtrace",
        "gpt_leaky-recorder.vtrace",
        "leak_slow-traced.vtrace",
        "healthy_compile-bare.vtrace",
    ] {
        let path = fixtures.join(name);
        let report = json_of(&["report"], &path);
        let replay = json_of(&["replay", "--at", "end"], &path);
        assert_eq!(replay["analysis"], report["analysis"], "{name}");
        assert_eq!(
            replay["at"]["step"], report["analysis"]["steps"]["steps"],
            "{name}"
        );
    }
    // Mid-run, the step asked for is the report's step 20, and PyTorch's view holds only the
    // marks up to it.
    let path = fixtures.join("h100/ranks_gloo-rank2-run.vtrace");
    let replay = json_of(&["replay", "--at", "step 20"], &path);
    assert_eq!(replay["at"]["step"], 20);
    assert_eq!(replay["analysis"]["steps"]["steps"], 20);
    let end = json_of(&["replay", "--at", "end"], &path);
    let first = &end["analysis"]["diagnosis"][0];
    assert_eq!(first["site"]["label"], "ranks_gloo.py:48 in <module>");
    assert_eq!(first["evidence"]["rate"], 8_388_608.0);
}

// A step asked of a trace without steps: the error says there are none and what to give instead
// (it said the trace "ends before step 5 (it has 0 steps)").
#[test]
fn a_step_of_a_trace_without_steps_is_said_so() {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/gpu/h100/ranks_gloo-rank2-bare.vtrace");
    let out = vramtrace()
        .args(["replay", "--at", "step 5"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(": the trace has no steps (no step marks, no repeating allocation pattern): give a time since its start (--at 3s) or an event (--at 'event N'); it has 62 events over "),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

// A cut trace replayed to its end: the end is where it was cut, and the replay says so as the
// report does (it showed 103 of leak_three's 120 steps as the whole run, exit 0, not a word).
#[test]
fn a_cut_trace_replayed_to_its_end_says_it_is_cut() {
    let whole = std::fs::read(
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/gpu/h100/leak_slow-run.vtrace"),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.vtrace");
    std::fs::write(&cut, &whole[..whole.len() / 2]).unwrap();
    let doc = json_of(&["replay", "--at", "end"], &cut);
    let gaps = doc["gaps"].as_array().unwrap();
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    assert!(
        gaps[0].as_str().unwrap().starts_with("is cut short"),
        "{gaps:?}"
    );
    let text = replay_text(&cut, &["--at", "end"]);
    assert!(
        text.contains("\n  trace          INCOMPLETE: it is cut short"),
        "{text}"
    );
    // A point before the cut was read whole.
    let doc = json_of(&["replay", "--at", "step 10"], &cut);
    assert_eq!(doc["gaps"], serde_json::Value::Array(vec![]));
    let whole = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/gpu/h100/leak_slow-run.vtrace");
    let doc = json_of(&["replay", "--at", "end"], &whole);
    assert_eq!(doc["gaps"], serde_json::Value::Array(vec![]));
}

// Step 1 of an H100 run whose hooks marked the loop's first iteration before the optimizer's
// first step: the report's step 1 begins at the first step mark (event 24), and so does the
// replay's — it stopped at the iteration mark (event 5), its steps "one per model call".
#[test]
fn an_early_step_is_the_report_s_step() {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/gpu/h100/leak_slow-run.vtrace");
    let doc = json_of(&["replay", "--at", "step 1"], &path);
    assert_eq!(
        (&doc["at"]["step"], &doc["at"]["event"]),
        (&1.into(), &24.into())
    );
    let steps = &doc["analysis"]["steps"];
    assert_eq!(
        (&steps["source"], &steps["marks"]),
        (&"marks".into(), &1.into())
    );
}

// Mid-run, the replay reads the history PyTorch's recorder handed over at exit and names the
// line that keeps the tensors, as the report does. A trace cut before that history (a job still
// running) sees the growth where the caching allocator asked: the advice points at the history
// to come, not at `vramtrace run`, which recorded this trace.
#[test]
fn a_hooked_trace_is_not_told_to_use_vramtrace_run() {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/gpu/h100/leak_slow-run.vtrace");
    let doc = json_of(&["replay", "--at", "step 100"], &path);
    let first = &doc["analysis"]["diagnosis"][0];
    assert_eq!(first["site"]["label"], "leak_slow.py:33 in <module>");
    // The same trace without its last 30 %: the history is gone.
    let bytes = std::fs::read(&path).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("running.vtrace");
    std::fs::write(&path, &bytes[..bytes.len() * 7 / 10]).unwrap();
    let doc = json_of(&["replay", "--at", "step 100"], &path);
    let first = &doc["analysis"]["diagnosis"][0];
    assert_eq!(first["site"]["label"], "leak_slow.py:32 in <module>");
    let fix = first["fix"].as_str().unwrap();
    assert!(!fix.contains("`vramtrace run` records"), "{fix}");
    assert!(
        fix.contains("PyTorch's recorder names the line that keeps them from the history it hands over at exit or at an alert"),
        "{fix}"
    );
}

// PyTorch's view at step N is of the N steps begun: the iteration the hooks marked before the
// optimizer's first step is no step of the trace, so leak_oom's tensors at step 20 are the 19
// buffers of 1 GiB its segments hold (one more read the recorder one step ahead). The
// allocator's cache and its out-of-memory relief are of the snapshots taken at exit and at the
// failure: at a point before them they are not known, and left out.
#[test]
fn pytorchs_view_at_a_step_is_of_that_step() {
    let fixture = |name: &str| {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/gpu/oom")
            .join(name)
    };
    let doc = json_of(
        &["replay", "--at", "step 20"],
        &fixture("leak_oom-run.vtrace"),
    );
    let a = &doc["analysis"];
    let held: Vec<(&str, u64)> = (a["growth"]["steady"].as_array().unwrap().iter())
        .map(|s| {
            (
                s["view"].as_str().unwrap(),
                s["last_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(held, [("allocator", 19 << 30), ("driver", 19 << 30)]);
    assert_eq!(
        (
            &a["fragmentation"]["allocator"],
            &a["fragmentation"]["oom_relief"]
        ),
        (&serde_json::Value::Null, &serde_json::Value::Null)
    );

    let peak = fixture("healthy_oom_peak-run.vtrace");
    let relief = |at: &str| {
        json_of(&["replay", "--at", at], &peak)["analysis"]["fragmentation"]["oom_relief"]
            ["requested"]
            .clone()
    };
    // The request of step 31 is not known at step 5; at the failure, it is.
    assert_eq!(relief("step 5"), serde_json::Value::Null);
    assert_eq!(relief("oom"), serde_json::json!(170_034_987_008u64));
    let text = replay_text(&peak, &["--at", "step 5"]);
    assert!(!text.contains("\n  oom relief "), "{text}");
    assert!(!text.contains("\n  cache "), "{text}");
}
