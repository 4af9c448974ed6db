//! `vramtrace diff` on real traces of a PyTorch training program (GPU run 1 on an H200, trace
//! format 4, kept in `tests/fixtures/gpu/`): a GPT-style model trained for 120 steps, traced
//! twice unchanged (`healthy_gpt-traced*.vtrace`, and once with step marks), and once as
//! `gpt_leaky.py`: the same program with 3 lines inserted above the loop and one line added in
//! it that keeps 16 MiB of logits every step (`# DIFF-LEAK-LINE`). Both sources are beside the
//! traces.
//!
//! The leaked tensors never reach the driver at their own line: PyTorch's caching allocator
//! hands them memory it already holds, and asks the driver for more later, in the backward pass
//! on the autograd thread (whose Python line is only inferred). So the sites that grow are the
//! allocator's, and the added line is found in the sources: the first suspect.

use std::path::PathBuf;

use serde_json::Value;

use crate::support::*;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/gpu")
}

fn diff(extra: &[&str], a: &str, b: &str) -> (i32, Value) {
    let dir = fixtures();
    let out = vramtrace()
        .arg("diff")
        .arg("--json")
        .args(extra)
        .arg(dir.join(a))
        .arg(dir.join(b))
        .output()
        .unwrap();
    let doc = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap_or(-1), doc)
}

fn sources() -> String {
    fixtures().display().to_string()
}

#[test]
fn two_runs_of_the_unchanged_program_do_not_differ() {
    for b in ["healthy_gpt-traced2.vtrace", "healthy_gpt-marks.vtrace"] {
        let (code, d) = diff(&[], "healthy_gpt-traced.vtrace", b);
        assert_eq!(code, 0, "{b}");
        assert_eq!(d["verdict"]["regression"], false);
        let s = &d["sites"];
        assert_eq!(s["matched"], 45, "{b}");
        assert_eq!(
            (&s["only_in_a"], &s["only_in_b"]),
            (&Value::from(0), &Value::from(0))
        );
        assert_eq!(s["changed"], 0, "{b}");
        assert_eq!(d["totals"]["live_bytes"]["change"], 0);
    }
    // With marks on one side only, growth per step cannot be compared, and the verdict says so.
    let (_, d) = diff(&[], "healthy_gpt-traced.vtrace", "healthy_gpt-marks.vtrace");
    assert_eq!(d["b"]["steps"], 120);
    assert_eq!(d["totals"]["growth"], Value::Null);
    assert!(d["verdict"]["notes"][0]
        .as_str()
        .unwrap()
        .starts_with("growth per step not compared: run A has no steps"));
}

#[test]
fn the_added_line_comes_first_and_every_other_line_is_matched() {
    let (code, d) = diff(
        &["--source-dir", &sources()],
        "healthy_gpt-traced.vtrace",
        "gpt_leaky-traced.vtrace",
    );
    assert_eq!(code, 1);
    // 120 steps × 16 MiB of logits: 1.75 GiB more live at the end (the allocator's segments).
    assert_eq!(d["totals"]["live_bytes"]["change"], 1_883_242_496i64);
    let first = &d["suspects"][0];
    assert_eq!(first["file"], "/tmp/vt-acc.JdZ1n6/gpt_leaky.py");
    assert_eq!(first["line"], 57);
    assert_eq!(
        first["text"],
        "kept.append(logits[:2].detach().float())  # DIFF-LEAK-LINE"
    );
    assert_eq!(first["in_loop"], true);
    // The other code line added (`kept = []`, above the loop) comes after it.
    let rest: Vec<u64> = d["suspects"].as_array().unwrap()[1..]
        .iter()
        .map(|s| s["line"].as_u64().unwrap())
        .collect();
    assert_eq!(rest, [47]);
    // The two main scripts were paired (a guess: their names differ) and their lines matched by
    // text: 2 code lines added; every site of one run has its partner in the other.
    let main = (d["files"].as_array().unwrap().iter())
        .find(|f| f["paired_by"] == "main-script")
        .unwrap();
    assert_eq!(
        main["a"],
        "/work/main/validation/gpu/acceptance/healthy_gpt.py"
    );
    assert_eq!(
        (&main["lines"], &main["added"], &main["removed"]),
        (
            &Value::from("source-text"),
            &Value::from(2),
            &Value::from(0)
        )
    );
    let s = &d["sites"];
    assert_eq!(
        (&s["matched"], &s["only_in_a"], &s["only_in_b"]),
        (&Value::from(45), &Value::from(0), &Value::from(0))
    );
    // The loss line moved from 51 to 53 and grew by one 128 MiB segment.
    let loss = (s["list"].as_array().unwrap().iter())
        .find(|x| x["label"] == "gpt_leaky.py:53 in <module>")
        .unwrap();
    assert_eq!(loss["a_label"], "healthy_gpt.py:51 in <module>");
    assert_eq!(loss["match"], "source-text");
    assert_eq!(loss["change"]["live_bytes"], 128 << 20);
}

#[test]
fn without_the_sources_sites_are_still_paired_by_their_native_stacks() {
    let (code, d) = diff(
        &["--source-dir", "/nonexistent"],
        "healthy_gpt-traced.vtrace",
        "gpt_leaky-traced.vtrace",
    );
    assert_eq!(code, 1);
    let s = &d["sites"];
    assert_eq!(
        (&s["matched"], &s["only_in_a"], &s["only_in_b"]),
        (&Value::from(45), &Value::from(0), &Value::from(0))
    );
    let loss = (s["list"].as_array().unwrap().iter())
        .find(|x| x["label"] == "gpt_leaky.py:53 in <module>")
        .unwrap();
    assert_eq!(
        (&loss["match"], &loss["guessed"]),
        (&Value::from("native-stack"), &Value::Bool(true))
    );
}
