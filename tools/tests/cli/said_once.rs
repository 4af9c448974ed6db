//! What the outputs say of real GPU traces (`tests/fixtures/gpu/`), where two of them used to
//! give two answers: each assertion names the words that disagreed before.

use std::path::{Path, PathBuf};

use crate::support::*;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/gpu")
        .join(name)
}

fn text(out: std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn report(trace: &Path, extra: &[&str]) -> String {
    text(
        vramtrace()
            .arg("report")
            .args(extra)
            .arg(trace)
            .output()
            .unwrap(),
    )
}

/// Rank 2 keeps 40 × 8 MiB of logits: the report says the 320 MiB at exit, as `diff` and the
/// tensors table do (it said the last step's 312 MiB); its headline's time to full rests on the
/// device's own rate, which it now gives.
#[test]
fn a_tensor_line_holds_at_the_end_what_the_recorder_saw_at_exit() {
    let text = report(&fixture("h100/ranks_gloo-rank2-run.vtrace"), &[]);
    assert!(
        text.contains("312.0 MiB at the last sample; 320.0 MiB still live at the end"),
        "{text}"
    );
    assert!(
        text.contains(
            "+8.0 MiB per step at ranks_gloo.py:48 in <module> (PyTorch tensors) (device 0 grows \
             +10.7 MiB per step in all); 73.1 GiB left, full in 7,020 steps"
        ),
        "{text}"
    );
}

/// gpt_leaky's alert at step 0 was the model's loading, not the leak at line 57 that grows from
/// step 69: it is not credited to that line.
#[test]
fn an_alert_before_the_growth_began_is_not_that_growth() {
    let text = report(&fixture("gpt_leaky-recorder.vtrace"), &[]);
    let alerted = text.lines().find(|l| l.contains("alerted")).unwrap();
    assert!(
        alerted.contains("(full within the horizon)")
            && alerted.ends_with(
                "not confirmed: it came before the steady growth the whole run shows, after step \
                 69 at gpt_leaky.py:57 in <module> (PyTorch tensors)"
            ),
        "{alerted}"
    );
}

/// leak_logits_ddp's line 38 is the leak; the memory held until exit is named elsewhere (it was
/// line 38 again, "fix none needed"). It counts cuBLAS's workspace made at line 38 all the same
/// (128 MiB that no finding held when the leak's line took every place at that line): the two
/// findings hold every byte live at the end, each once.
#[test]
fn the_leaking_line_is_not_also_the_teardown_note() {
    let trace = fixture("leak_logits_ddp-marks.vtrace");
    let text = report(&trace, &[]);
    let note = text
        .lines()
        .find(|l| l.contains("note: teardown-only"))
        .unwrap();
    assert!(note.contains("leak_logits_ddp.py:30"), "{note}");
    assert!(!note.contains("leak_logits_ddp.py:38"), "{note}");
    let doc = json_of(&["report"], &trace);
    let a = &doc["analysis"];
    let held: Vec<(&str, u64)> = (a["diagnosis"].as_array().unwrap().iter())
        .map(|f| {
            (
                f["class"].as_str().unwrap(),
                f["evidence"]["bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        held,
        [
            ("steady-growth", 7_346_323_456),
            ("teardown-only", 230_950_912)
        ]
    );
    assert_eq!(
        a["leaks"]["device"]["bytes"],
        7_346_323_456u64 + 230_950_912
    );
}

/// A place whose paths are partly paired reads as paired, not "grew … only-in-b".
#[test]
fn a_place_with_a_paired_path_is_paired() {
    let text = text(
        vramtrace()
            .arg("diff")
            .arg(fixture("healthy_gpt-recorder.vtrace"))
            .arg(fixture("gpt_leaky-recorder.vtrace"))
            .output()
            .unwrap(),
    );
    let row = text
        .lines()
        .find(|l| l.contains("gpt_leaky.py:53 in <module> (libc10_cuda.so, 5 native paths)"))
        .unwrap();
    assert!(
        row.contains(" grew ") && row.trim_end().ends_with("native-stack (guess)"),
        "{row}"
    );
    // Its totals are the place's, its paths that did not change summed in: B's 1.0 GiB in 10
    // objects, as the report of that trace lists line 53, not its changed paths alone.
    assert!(
        row.contains(" 520.0 MiB     1.0 GiB   +516.0 MiB "),
        "{row}"
    );
    assert!(row.contains(" 6 → 10 "), "{row}");
}

/// A cut trace: its unread events are the file's loss, not the tracer's; and a window asked of
/// a one-file trace from a tracer without segment facts is said to be read whole.
#[test]
fn a_cut_trace_and_a_window_on_one_file_say_what_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.vtrace");
    let bytes = std::fs::read(fixture("leak_three-recorder.vtrace")).unwrap();
    std::fs::write(&cut, &bytes[..30_000]).unwrap();
    let text = report(&cut, &[]);
    assert!(
        text.contains("\n  lost      no event dropped by the tracer\n"),
        "{text}"
    );
    assert!(
        text.contains("\n  anomalies      none; no event lost by the tracer\n"),
        "{text}"
    );

    let text = report(&fixture("leak_late-marks.vtrace"), &["--since", "step 50"]);
    assert!(
        text.contains(
            "\n  segments  one, read whole: since step 50 chooses where to start among a trace's \
             segments, and this trace is one file\n"
        ),
        "{text}"
    );
}

/// leak_slow's H100 trace with 64 bytes overwritten at offset 20,000: the chunks from there on
/// fail their checksum, and 117 events are missing. The missing events are the damage's (the
/// tracer dropped none); the live line adds up to the live set with what they may have freed
/// (it said 0 B beside "334.3 MiB now"); the alert keeps the tracer's step (it was put at step
/// 148, the steps read before it, where the run had 200).
#[test]
fn a_damaged_trace_says_what_it_misses_and_what_it_may_have_freed() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = std::fs::read(fixture("h100/leak_slow-run.vtrace")).unwrap();
    bytes[20_000..20_064].fill(0xff);
    let damaged = dir.path().join("damaged.vtrace");
    std::fs::write(&damaged, bytes).unwrap();
    let text = report(&damaged, &[]);
    let line = |name: &str| {
        let start = format!("  {name:<14} ");
        text.lines()
            .find(|l| l.starts_with(&start))
            .unwrap_or_else(|| panic!("no {name} line: {text}"))
            .to_string()
    };
    assert!(
        line("trace").ends_with(
            "and is missing 117 events, in what could not be read; what follows covers only \
             what could be read"
        ),
        "{text}"
    );
    assert!(
        line("live").ends_with(
            "at 0 call sites; besides, 334.3 MiB device and 0 B host in 52 objects a lost event \
             may have freed"
        ),
        "{text}"
    );
    assert!(text.contains("LIVE AT THE END\n  device memory  334.3 MiB in 52 objects\n"));
    assert!(
        line("alerted").starts_with("  alerted        at step 201: "),
        "{text}"
    );
}

/// The teardown-only finding's objects are those of the device memory it counts, as the live
/// line says them: 80 (it counted the 3 host buffers at the same places too, and said 82 — a
/// place may hold both, and one of the 3 is at a place without device memory).
#[test]
fn a_teardown_counts_the_objects_of_its_bytes() {
    let text = report(&fixture("healthy_gpt-marks.vtrace"), &[]);
    assert!(
        text.contains("  live           at the end: 1.8 GiB device in 80 objects, 12 B host in 3,"),
        "{text}"
    );
    assert!(
        text.contains("\n     evidence  1.8 GiB in 80 objects\n"),
        "{text}"
    );
}

/// healthy_gpt's host memory rose in a few one-off steps, at other places each time: the total's
/// line is steady, no place's growth is, and the line says both (it said "+0 B sustained …
/// [steady]" under "no steady growth").
#[test]
fn a_total_that_rose_at_other_places_each_time_says_so() {
    let text = report(&fixture("healthy_gpt-traced.vtrace"), &[]);
    assert!(
        text.contains("\n  growth         no steady growth\n"),
        "{text}"
    );
    let host = (text.lines())
        .find(|l| l.starts_with("  host: "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        host.starts_with(
            "  host: +0 B per 128 ms window sustained; live 0 B -> 12 B over 47 samples"
        ) && host.ends_with(
            " [steady in total, though no place grows steadily: each rise is another \
                 place's]"
        ),
        "{host}"
    );
}

/// healthy_hf_llama's line 40 made its segments in its first steps and a pair now and then after
/// (in 8 steps of 21): a warm-up and a cache, not growth that stopped; said as made, not as
/// "without growing" either.
#[test]
fn a_warm_up_with_a_segment_now_and_then_did_not_grow() {
    let text = report(&fixture("healthy_hf_llama-marks.vtrace"), &[]);
    assert!(
        text.contains(
            "\n     cause     held until exit at 5 places; 816.0 MiB of it made in 8 steps of \
             0..21 at one place (not judged steady); named by the one that holds the most\n"
        ) && !text.contains("and stopped"),
        "{text}"
    );
}

/// gpt_leaky's segments at line 56 were made in 4 steps of 0..24 while the leak's tensors grew
/// (276 MiB): the teardown note says so, not that the memory it holds never grew.
#[test]
fn a_note_does_not_say_memory_made_over_steps_never_grew() {
    let text = report(&fixture("gpt_leaky-recorder.vtrace"), &[]);
    assert!(
        text.contains(
            "\n     cause     held until exit at 10 places; 276.0 MiB of it made in 4 steps of \
             0..24 at one place (not judged steady); named by the one that holds the most\n"
        ),
        "{text}"
    );
}

/// The rank table names a first cause as the report's verdict does: leak_slow's line 32 is where
/// PyTorch's allocator asked the driver for memory (the tensors are kept at line 33), and the
/// headline, the table and the JSON say so.
#[test]
fn the_rank_table_says_a_line_is_where_the_allocator_asked() {
    let traces = ["leak_slow-marks", "healthy_gpt-marks", "healthy_peak-marks"]
        .map(|t| fixture(&format!("{t}.vtrace")));
    let out = vramtrace().arg("report").args(&traces).output().unwrap();
    let shown = String::from_utf8(out.stdout).unwrap();
    let headline = shown
        .lines()
        .find(|l| l.starts_with("Ranks (3 traces): "))
        .unwrap();
    assert!(
        headline.contains(
            "first cause +512.0 KiB per step at leak_slow.py:32 in <module> (libc10_cuda.so) \
             (where the allocator asked the driver for memory); "
        ),
        "{headline}"
    );
    let row = shown
        .lines()
        .find(|l| l.contains("+512.0 KiB/step at leak_slow.py:32"))
        .unwrap();
    assert!(
        row.contains("(libc10_cuda.so) (where the allocator asked the driver for memory)"),
        "{row}"
    );
    let out = vramtrace()
        .args(["report", "--json"])
        .args(&traces)
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let means: Vec<&serde_json::Value> = (doc["ranks"].as_array().unwrap().iter())
        .map(|r| &r["cause_line_means"])
        .collect();
    assert_eq!(
        means,
        [
            &"asked".into(),
            &serde_json::Value::Null,
            &serde_json::Value::Null
        ]
    );
}
