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
//! allocator's, and the added line is found in the sources: the first suspect. Traces that also
//! carry PyTorch's recorder history (`*-recorder*.vtrace`, run 4) are compared tensor by tensor
//! too, and there the added line is the top difference, with its bytes and rate.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::*;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/gpu")
}

/// What `vramtrace ARGS` printed on stdout, `ARGS` ending with the fixture `name`.
fn stdout_of(args: &[&str], name: &str) -> String {
    let out = vramtrace()
        .args(args)
        .arg(fixtures().join(name))
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
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
        // The run through `stepmark.py` reaches the script's lines from the launcher's lines:
        // paths of files one run has are no paths, so no line is made one place of several.
        let notes = d["verdict"]["notes"].as_array().unwrap();
        let joined = |n: &&Value| n.as_str().unwrap().contains("compared as one");
        assert_eq!(notes.iter().filter(joined).count(), 0, "{b}: {notes:?}");
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
    // text: 2 code lines added; every site of A has its partner in B. Only in B: the segments
    // the allocator asked for from autograd's thread at lines 56 and 63 (inferred from the main
    // thread, as the report names them), where A's allocator asked for none.
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
        (&Value::from(45), &Value::from(0), &Value::from(2))
    );
    let only_b: Vec<(&str, u64)> = (s["list"].as_array().unwrap().iter())
        .filter(|x| x["match"] == "only-in-b")
        .map(|x| {
            (
                x["label"].as_str().unwrap(),
                x["change"]["live_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        only_b,
        [
            ("gpt_leaky.py:63 in <module>", 11 * 128 * MIB),
            ("gpt_leaky.py:56 in <module>", 2 * 128 * MIB)
        ]
    );
    // The loss line moved from 51 to 53 and grew by one 128 MiB segment.
    let loss = (s["list"].as_array().unwrap().iter())
        .find(|x| x["label"] == "gpt_leaky.py:53 in <module>" && x["python_inferred"] == false)
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
    // One native stack has inferred lines 53, 56 and 63 in B: nothing says which of them A's
    // inferred line 51 is, so those stay apart; every line of the program's own pairs.
    let s = &d["sites"];
    assert_eq!(
        (&s["matched"], &s["only_in_a"], &s["only_in_b"]),
        (&Value::from(44), &Value::from(1), &Value::from(3))
    );
    let loss = (s["list"].as_array().unwrap().iter())
        .find(|x| x["label"] == "gpt_leaky.py:53 in <module>" && x["python_inferred"] == false)
        .unwrap();
    assert_eq!(
        (&loss["match"], &loss["guessed"]),
        (&Value::from("native-stack"), &Value::Bool(true))
    );
}

// The same programs recorded again (GPU run 4) by `vramtrace run` with its Python hooks: step
// marks from the optimizer, and PyTorch's recorder history (every tensor live at the end, with
// its Python line) in the trace. `gpt_leaky.py` keeps 2 × 256 × 8192 float32 logits a step:
// 16 MiB, 120 times.

/// `healthy_gpt.py` run twice, and `gpt_leaky.py`, with the recorder's history.
const RECORDED_A: &str = "healthy_gpt-recorder.vtrace";
const RECORDED_A2: &str = "healthy_gpt-recorder2.vtrace";
const RECORDED_B: &str = "gpt_leaky-recorder.vtrace";

fn diff_text(extra: &[&str], a: &str, b: &str) -> (i32, String) {
    let dir = fixtures();
    let out = vramtrace()
        .arg("diff")
        .args(extra)
        .arg(dir.join(a))
        .arg(dir.join(b))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
    )
}

#[test]
fn the_recorder_names_the_added_line_first() {
    let leaked = 120 * 16 * MIB;
    for dirs in [sources(), "/nonexistent".to_string()] {
        let (code, d) = diff(&["--source-dir", &dirs], RECORDED_A, RECORDED_B);
        assert_eq!(code, 1, "{dirs}");
        let top = &d["top_difference"];
        assert_eq!(top["view"], "allocator-tensors");
        assert_eq!(top["view_name"], "tensors (PyTorch recorder)");
        assert_eq!(top["label"], "gpt_leaky.py:57 in <module>", "{dirs}");
        assert_eq!(top["status"], "new");
        assert_eq!(top["live_bytes"], leaked);
        assert_eq!(top["growth"], (16 * MIB) as f64);
        let t = &d["tensors"];
        assert_eq!(t["explains"], true);
        assert_eq!(t["live_bytes"]["a"], 574_652_612);
        assert_eq!(t["live_bytes"]["change"], leaked);
        assert_eq!(t["live_count"]["change"], 120);
        assert_eq!(t["growth"]["a"], 0.0);
        assert_eq!(t["growth"]["change"], (16 * MIB) as f64);
        assert_eq!(
            (&t["a"]["steps"], &t["a"]["steps_measured"]),
            (&120.into(), &50.into())
        );
        // Every other line is paired with its moved self (7 of them below the inserted lines:
        // by the sources' text, or without them by holding the same tensors) and unchanged;
        // `batch()`'s line is two, on its paths from training and from evaluation.
        assert_eq!(
            [
                &t["matched"],
                &t["guessed"],
                &t["only_in_a"],
                &t["only_in_b"],
                &t["unchanged"]
            ],
            [8, 7, 0, 1, 8].map(Value::from).each_ref(),
            "{dirs}"
        );
        assert_eq!(t["changed"], 1);
        let line = &t["list"][0];
        assert_eq!(line["match"], "only-in-b");
        assert_eq!(line["b"]["line"]["line"], 57);
        assert_eq!(line["b"]["live_count"], 120);
        assert_eq!(line["b"]["live_bytes"], leaked);
        // The verdict holds the view's checks beside the driver's, and the new growth of both:
        // the line that keeps the tensors (the cause), and the allocator's segments for them
        // (its evidence, not a regression of their own).
        let checks: Vec<(&str, bool)> = (d["verdict"]["checks"].as_array().unwrap().iter())
            .map(|c| (c["metric"].as_str().unwrap(), c["exceeded"] == true))
            .skip(6)
            .collect();
        assert_eq!(
            checks,
            [
                ("new_growth", false),
                ("tensor_live_bytes", true),
                ("tensor_growth_per_step", true),
                ("tensor_new_growth", true)
            ]
        );
        let new: Vec<(&str, f64, &str, bool)> = (d["verdict"]["new_growth"].as_array())
            .unwrap()
            .iter()
            .map(|g| {
                (
                    g["view"].as_str().unwrap(),
                    g["rate"].as_f64().unwrap(),
                    g["role"].as_str().unwrap(),
                    g["regression"] == true,
                )
            })
            .collect();
        assert_eq!(
            new,
            [
                ("allocator-tensors", (16 * MIB) as f64, "cause", true),
                ("driver", (16 * MIB) as f64, "segments", false)
            ]
        );
        assert_eq!(
            d["verdict"]["new_growth"][0]["label"],
            "gpt_leaky.py:57 in <module>"
        );
        // The driver's view still sees the allocator's segments grow, at the line inferred for
        // autograd's thread, as the report names it (`report` of this trace: line 63).
        assert_eq!(d["sites"]["view"], "driver");
        assert_eq!(
            d["sites"]["list"][0]["label"],
            "gpt_leaky.py:63 in <module>"
        );
    }
    let (_, d) = diff(&["--source-dir", &sources()], RECORDED_A, RECORDED_B);
    let moved = (d["files"].as_array().unwrap().iter())
        .find(|f| f["paired_by"] == "main-script")
        .unwrap();
    assert_eq!(moved["lines"], "source-text");
    assert_eq!(d["suspects"][0]["line"], 57);
    let (_, d) = diff(&["--source-dir", "/nonexistent"], RECORDED_A, RECORDED_B);
    let t = &d["tensors"];
    assert_eq!(t["list"].as_array().unwrap().len(), 1);

    // The tables: the top difference under the verdict, the tensors' lines before the sites.
    let (code, out) = diff_text(&["--source-dir", &sources()], RECORDED_A, RECORDED_B);
    assert_eq!(code, 1);
    assert!(out.contains(
        "  top difference, view tensors (PyTorch recorder): gpt_leaky.py:57 in <module> \
         (PyTorch tensors): new, +1.9 GiB live at end, +16.0 MiB/step\n"
    ));
    let lines = out.find("Changed Python lines, view tensors (PyTorch recorder)");
    let sites = out.find("Changed places, view driver");
    assert!(lines.unwrap() < sites.unwrap(), "{out}");
}

#[test]
fn the_fixed_leak_is_gone_in_the_tensors_view() {
    let (code, d) = diff(&["--source-dir", &sources()], RECORDED_B, RECORDED_A);
    assert_eq!(code, 0, "B holding less is no regression");
    let top = &d["top_difference"];
    assert_eq!(
        (&top["view"], &top["label"], &top["status"]),
        (
            &Value::from("allocator-tensors"),
            &Value::from("gpt_leaky.py:57 in <module>"),
            &Value::from("gone")
        )
    );
    assert_eq!(top["live_bytes"], -(120 * 16 * MIB as i64));
    assert_eq!(d["tensors"]["explains"], true);
}

#[test]
fn two_recorded_runs_of_the_unchanged_program_do_not_differ() {
    let (code, d) = diff(&[], RECORDED_A, RECORDED_A2);
    assert_eq!(code, 0);
    assert_eq!(d["verdict"]["regression"], false);
    assert_eq!(d["top_difference"], Value::Null);
    let t = &d["tensors"];
    assert_eq!(
        [
            &t["matched"],
            &t["guessed"],
            &t["only_in_a"],
            &t["only_in_b"],
            &t["unchanged"]
        ],
        [8, 0, 0, 0, 8].map(Value::from).each_ref()
    );
    assert_eq!(t["changed"], 0);
    assert_eq!(t["list"].as_array().unwrap().len(), 0);
    assert_eq!(t["live_bytes"]["change"], 0);
    assert_eq!(t["growth"]["change"], 0.0);
    assert_eq!(t["explains"], false);
    let (code, out) = diff_text(&[], RECORDED_A, RECORDED_A2);
    assert_eq!(code, 0);
    assert!(out.contains(
        "Python lines, view tensors (PyTorch recorder): 548.0 MiB live at end in A, 548.0 MiB \
         in B (+0 B); 8 paired (0 by a guess), 0 only in A, 0 only in B; 8 unchanged, 0 changed"
    ));
    // A run without the recorder's history beside one with it: the view is not compared.
    let (_, d) = diff(&[], "healthy_gpt-traced.vtrace", RECORDED_A);
    assert!(d.get("tensors").is_none());
    let notes = d["verdict"]["notes"].as_array().unwrap();
    assert!(
        notes.iter().any(|n| n
            .as_str()
            .unwrap()
            .starts_with("tensors (PyTorch recorder) not compared: run A has no recorder")),
        "{notes:?}"
    );
}

// Four ranks of one job on the H200 (`ranks_gloo/`, the run of 2026-12-04), with PyTorch's
// recorder: rank 2 keeps 8 MiB of logits a step at line 48. Against the median of the others,
// `diff --rank 2` names that line, labelled as its report's first finding labels it, with its own
// rate, not the caching allocator's segments (+11.1 MiB a step, asked for at line 42); the rank
// table gives each rank the growth of its first cause; the report of the directory is one page.

fn ranks_dir() -> String {
    fixtures().join("ranks_gloo").display().to_string()
}

/// A directory holding copies of the fixtures `names`: a job made of them.
fn job_of(names: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in names {
        std::fs::copy(fixtures().join(name), dir.path().join(name)).unwrap();
    }
    dir
}

#[test]
fn one_rank_against_the_others_is_named_at_the_line_that_keeps_its_tensors() {
    let out = vramtrace()
        .args(["diff", "--json", "--rank", "2", &ranks_dir()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    let top = &d["top_difference"];
    assert_eq!(
        (
            &top["view"],
            &top["label"],
            &top["owner"],
            &top["line_means"]
        ),
        (
            &Value::from("allocator-tensors"),
            &Value::from("ranks_gloo.py:48 in <module>"),
            &Value::from("PyTorch tensors"),
            &Value::from("keeps")
        )
    );
    assert_eq!(top["growth"], (8 * MIB) as f64);
    assert_eq!(top["status"], "new");
    let new = &d["verdict"]["new_growth"];
    assert_eq!(new.as_array().unwrap().len(), 1, "{new}");
    assert_eq!(new[0]["label"], "ranks_gloo.py:48 in <module>");
    // The report of rank 2 names the same line first.
    let trace = fixtures().join("ranks_gloo/traced-rank2-2011.vtrace");
    let out = vramtrace()
        .args(["report", "--json"])
        .arg(&trace)
        .output()
        .unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let first = &r["analysis"]["diagnosis"][0];
    assert_eq!(first["site"]["label"], top["label"]);
    assert_eq!(first["site"]["module_name"], top["owner"]);
    // The rank table: rank 2 first, by its devices' growth (the verdict's), its first cause at
    // its own rate; the only odd one.
    let ranks = d["ranks"].as_array().unwrap();
    assert_eq!(ranks[0]["rank"], 2);
    assert_eq!(
        (
            &ranks[0]["cause_growth"],
            &ranks[0]["differs_in"],
            &ranks[0]["odd"]
        ),
        (
            &Value::from((8 * MIB) as f64),
            &Value::from("growth"),
            &Value::Bool(true)
        )
    );
    assert_eq!(
        ranks[0]["growth_at"],
        "ranks_gloo.py:48 in <module> (PyTorch tensors)"
    );
    assert!(ranks[1..]
        .iter()
        .all(|r| r["odd"] == false && r["growth"] == 0.0 && r["growth_at"].is_null()));
    let text = vramtrace()
        .args(["diff", "--rank", "2", &ranks_dir()])
        .output()
        .unwrap();
    let shown = String::from_utf8(text.stdout).unwrap();
    assert!(
        shown.contains(
            "  top difference, view tensors (PyTorch recorder): ranks_gloo.py:48 in <module> \
             (PyTorch tensors): new, +320.0 MiB live at end, +8.0 MiB/step\n"
        ),
        "{shown}"
    );
    // The headline names the cause first, at its own rate (8 MiB a step planted), then the
    // devices' growth in all (the allocator's segments, reserved ahead).
    assert!(
        shown.contains(
            "rank 2 differs most in growth: first cause +8.0 MiB per step at ranks_gloo.py:48 in \
             <module> (PyTorch tensors); its devices grow +11.1 MiB per step against a median of \
             +0 B per step"
        ),
        "{shown}"
    );
    // The growth is the verdict's, in the same words.
    assert!(shown.contains("; growth +11.1 MiB per step (limit 1.0 MiB per step); "));
    let growth = ranks[0]["growth"].as_f64().unwrap();
    assert_eq!((growth / MIB as f64 * 10.0).round(), 111.0, "{growth}");
    // Every other rank is like the median of the rest.
    for rank in ["0", "1", "3"] {
        let out = vramtrace()
            .args(["diff", "--rank", rank, &ranks_dir()])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "rank {rank}");
    }
}

#[test]
fn the_report_of_four_ranks_is_one_page() {
    let out = vramtrace().args(["report", &ranks_dir()]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let shown = String::from_utf8(out.stdout).unwrap();
    let full: Vec<&str> = shown.lines().filter(|l| l.starts_with("════ ")).collect();
    assert_eq!(full.len(), 1, "{shown}");
    assert!(full[0].starts_with("════ rank 2 ("));
    // Rank 2's distance, +11.1 MiB per step against a median of none, is in 64 KiB per step,
    // and the column says so under the table.
    let row = shown.lines().find(|l| l.starts_with(" 1      2 ")).unwrap();
    assert!(row.contains("   178.09   growth "), "{row}");
    assert!(
        shown.contains(
            "\n  distance: the largest gap between a trace's number and the traces' median, in \
             units of the median (or of 1.0 MiB, 64.0 KiB per step or 1 failed call, where the \
             median is less); 0.50 or more differs\n"
        ),
        "{shown}"
    );
    let (_, rest) = shown
        .split_once(
            "\nThe other traces, like the median: one line each (--all prints every report)\n",
        )
        .unwrap();
    let lines: Vec<&str> = rest.lines().collect();
    assert_eq!(lines.len(), 3, "{rest}");
    for (line, rank) in lines.iter().zip([0, 1, 3]) {
        assert!(line.starts_with(&format!("  rank {rank} (pid ")), "{line}");
        assert!(line.contains(": 830.3 MiB live at end, peak 830.3 MiB, growth +0 B/step, "));
    }
    // A growth of none is 0 in the document, not -0.0 (an empty sum of reals).
    let out = vramtrace()
        .args(["report", "--json", &ranks_dir()])
        .output()
        .unwrap();
    let json = String::from_utf8(out.stdout).unwrap();
    assert!(json.contains("\"growth\": 0.0"), "a growth of none");
    assert!(!json.contains("-0.0"), "{json}");
}

/// Four ranks of one data-parallel job on one GPU (`ranks_alike`, over gloo), each keeping 4 MiB
/// of logits a step at line 47: no trace is odd, and the leak is still the page's answer — said
/// in the table's headline, and in one full report standing for all.
#[test]
fn traces_alike_that_all_leak_say_the_leak_in_full() {
    let dir = fixtures().join("ranks_alike");
    let out = vramtrace().arg("report").arg(&dir).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let shown = String::from_utf8(out.stdout).unwrap();
    assert!(
        shown.contains(
            "\nRanks (4 traces): all 4 traces alike, each growing: first cause +4.0 MiB/step at \
             ranks_alike.py:47 in <module> (PyTorch tensors)\n"
        ),
        "{shown}"
    );
    let full: Vec<&str> = shown.lines().filter(|l| l.starts_with("════ ")).collect();
    assert_eq!(full.len(), 1, "{shown}");
    assert!(
        full[0].starts_with("════ rank 0 (")
            && full[0].ends_with("): the traces are alike, its report stands for all of them ════"),
        "{}",
        full[0]
    );
    assert!(
        shown.contains(
            "\n  1. ALERT: steady growth at ranks_alike.py:47 in <module> (PyTorch tensors) on \
             device 0\n"
        ),
        "{shown}"
    );
    let (_, rest) = shown
        .split_once("\nThe other traces, like it: one line each (--all prints every report)\n")
        .unwrap_or_else(|| panic!("{shown}"));
    let lines: Vec<&str> = rest.lines().collect();
    assert_eq!(lines.len(), 3, "{rest}");
    for (line, rank) in lines.iter().zip([1, 2, 3]) {
        assert!(line.starts_with(&format!("  rank {rank} (pid ")), "{line}");
        // The device's rate, then the line's own: +5.3 MiB beside the line read as its.
        assert!(
            line.contains(
                ", growth +5.3 MiB/step, first cause +4.0 MiB/step at ranks_alike.py:47 in \
                 <module> (PyTorch tensors), "
            ),
            "{line}"
        );
    }
    // Healthy traces alike are still one line each.
    let dir = job_of(&["healthy_gpt-traced.vtrace", "healthy_gpt-traced2.vtrace"]);
    let out = vramtrace().arg("report").arg(dir.path()).output().unwrap();
    let shown = String::from_utf8(out.stdout).unwrap();
    assert!(
        shown.contains("\nRanks (2 traces): all 2 traces alike\n"),
        "{shown}"
    );
    assert!(!shown.contains("════ "), "{shown}");
}

/// The verdict heads the report: the most urgent finding with its rate, how many more; a run
/// with nothing to fix says that first.
#[test]
fn the_report_opens_with_its_verdict() {
    let verdict = |name: &str| {
        let out = vramtrace()
            .arg("report")
            .arg(fixtures().join(name))
            .output()
            .unwrap();
        let shown = String::from_utf8(out.stdout).unwrap();
        shown.lines().nth(1).unwrap_or_default().to_string()
    };
    assert_eq!(
        verdict("leak_three-recorder.vtrace"),
        "  verdict   ALERT: steady growth at leak_three.py:39 in <module> (PyTorch tensors) on \
         device 0, +8.0 MiB per step; 2 more ALERTs, 1 other finding (DIAGNOSIS below)"
    );
    // Steps guessed from the allocation pattern: here each is one of the caching allocator's
    // 2 MiB segments, four of the program's steps of 512 KiB; the unit says it was guessed. The
    // line is the one that made the allocator grow (the leak is line 33, which only PyTorch's
    // recorder names): the verdict says so, not only DIAGNOSIS.
    assert_eq!(
        verdict("leak_slow-traced.vtrace"),
        "  verdict   ALERT: steady growth at leak_slow.py:32 in <module> (libc10_cuda.so) on \
         device 0, +2.0 MiB per guessed step (that line is where the allocator asked the driver \
         for memory: what keeps it may be another); 1 more finding (DIAGNOSIS below)"
    );
    assert_eq!(
        verdict("healthy_gpt-marks.vtrace"),
        "  verdict   no ALERT or warning; 1 note: teardown-only at healthy_gpt.py:51 in <module> \
         (libc10_cuda.so)"
    );
    // A trace cut before its first event: nothing found, and said to be incomplete.
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.vtrace");
    let bytes = std::fs::read(fixtures().join("leak_slow-marks.vtrace")).unwrap();
    std::fs::write(&cut, &bytes[..5570]).unwrap();
    let out = vramtrace().arg("report").arg(&cut).output().unwrap();
    let shown = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        shown.lines().nth(1).unwrap(),
        "  verdict   INCOMPLETE trace (FINDINGS says why); in what could be read: no finding"
    );
}

/// leak_late runs PyTorch's cudaMallocAsync backend: at the end its pool keeps up to 202 MiB
/// free for reuse, the leak's memory its teardown freed. That is a cache, not fragmentation:
/// the FINDINGS line says which it is, and no finding is raised of it.
#[test]
fn a_pool_s_reserve_is_not_called_unusable() {
    let shown = stdout_of(&["report"], "leak_late-marks.vtrace");
    let line = (shown.lines())
        .find(|l| l.starts_with("  fragmentation  "))
        .unwrap_or_default();
    assert_eq!(
        line,
        "  fragmentation  up to 202.0 MiB kept by memory pools for reuse (51.1% of the allocated \
         device memory); 0 B reserved VA, 0 B mapped"
    );
    assert!(!shown.contains(": fragmentation"), "{shown}");
    // Its one anomaly is named by its kind, as the Anomalies table below names it.
    assert!(
        shown.contains("\n  anomalies      1 (1 address-reused); no event lost\n"),
        "{shown}"
    );
}

/// ranks_alike's rank 0 alerted at step 11 with its device growing +19.1 MiB a step over the
/// steps the tracer had seen (a warm-up among them); the whole run grows +5.3 MiB. The report's
/// line of that alert says both, as its time to full differs as much.
#[test]
fn an_alert_far_from_the_whole_run_s_rate_says_that_rate() {
    let shown = stdout_of(&["report"], "ranks_alike/traced-rank0-795.vtrace");
    let alerted = (shown.lines())
        .find(|l| l.starts_with("  alerted  "))
        .unwrap_or_default();
    assert!(
        alerted.ends_with(
            "(full within the horizon); full in 3,925 steps (3 min) at the run's step time; \
             over the whole run the device grew +5.3 MiB per step"
        ),
        "{alerted}"
    );
}

/// A trace without steps is judged per time window; a window is said with the time it begins,
/// counted from the first event as `replay --at` counts time, so that the moment can be
/// replayed (leak_comm's growth after window 47 of 128 ms: 6 s).
#[test]
fn a_window_says_when_it_begins() {
    let trace = fixtures().join("leak_comm-traced.vtrace");
    let out = vramtrace().arg("report").arg(&trace).output().unwrap();
    let shown = String::from_utf8(out.stdout).unwrap();
    assert!(
        shown.contains(
            "\n  phases         device 0: steady from window 1 (128 ms), growth after window 47 \
             (6 s), teardown from window 57 (7.3 s), "
        ),
        "{shown}"
    );
    vramtrace()
        .args(["replay", "--at", "6s"])
        .arg(&trace)
        .assert()
        .success();
}

/// leak_slow ran 200 steps; without marks its steps are guessed from the allocation pattern, each
/// one of the caching allocator's segments, four of the program's: step 100 is past the 50
/// found, and the error says why a step the program reached may be.
#[test]
fn a_step_past_the_guessed_ones_says_they_were_guessed() {
    let out = vramtrace()
        .args(["replay", "--at", "step 100"])
        .arg(fixtures().join("leak_slow-traced.vtrace"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.ends_with(
            ": the trace ends before step 100 (it has 77 events, 50 steps and 0 out-of-memory \
             failures; its steps are guessed from the allocation pattern, and one may span \
             several of the program's: mark steps for its own)\n"
        ),
        "{err}"
    );
}

/// healthy_compile without the hooks: its pattern is torch.compile's warm-up burst (6 steps),
/// and the 64 quiet samples after it are in every series; the Growth heading says so, or its
/// "6 samples" and the series' "70 samples" read as two counts of one thing.
#[test]
fn the_quiet_after_a_pattern_is_counted_where_samples_are() {
    let trace = fixtures().join("healthy_compile-bare.vtrace");
    let out = vramtrace().arg("report").arg(&trace).output().unwrap();
    let shown = String::from_utf8(out.stdout).unwrap();
    assert!(
        shown.contains(
            "\nGrowth (6 samples kept; and 64 at its last value for the quiet after the \
             allocation pattern's last step)\n  device 0: "
        ),
        "{shown}"
    );
    assert!(shown.contains(" over 70 samples; "), "{shown}");
    let out = vramtrace()
        .args(["report", "--json"])
        .arg(&trace)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let g = &doc["analysis"]["growth"];
    assert_eq!((&g["ticks"], &g["quiet"]), (&6.into(), &64.into()));
}

/// A replay before the first step mark of a trace that marks its steps: no step yet, said of
/// that point, not "no step marks" of a trace that has 120.
#[test]
fn a_replay_before_the_first_mark_says_none_up_to_its_point() {
    let shown = stdout_of(&["replay", "--at", "step 0"], "healthy_peak-marks.vtrace");
    assert!(
        shown.contains(
            "\n  steps          no steps up to this point (at step 0: no step mark, no repeating \
             allocation pattern before it): sampled per time window\n"
        ),
        "{shown}"
    );
}

/// A time past the end says the trace's span to the millisecond: 4.885 s, not a "4.9 s" that
/// reads as reaching the 4.89 s asked.
#[test]
fn a_time_past_the_end_says_the_span_to_the_millisecond() {
    let trace = fixtures().join("leak_slow-marks.vtrace");
    let out = vramtrace()
        .args(["replay", "--at", "4.89s"])
        .arg(&trace)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "error: {}: the trace ends before 4.89 s after the first event (it has 476 events \
             over 4.885 s, 200 steps and 0 out-of-memory failures)\n",
            trace.display()
        )
    );
}

/// A finding's time to full is the device's, every cause on it together: said where that is not
/// the finding's own rate (leak_three's three leaks, +13 MiB a step in all), not where it is
/// (leak_slow's one). Two figures of live tensors say what each counts.
#[test]
fn each_number_says_whose_it_is() {
    let said = |name: &str| {
        let out = vramtrace()
            .arg("report")
            .arg(fixtures().join(name))
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let three = said("leak_three-recorder.vtrace");
    let whole = "; device full in 10,669 steps (18 s) at its whole growth (+13.0 MiB per step);";
    assert_eq!(three.matches(whole).count(), 3, "{three}");
    let one = said("leak_slow-marks.vtrace");
    assert!(
        one.contains("; device full in 281,070 steps (8 min); "),
        "{one}"
    );
    assert!(!one.contains("at its whole growth"), "{one}");
    let healthy = said("healthy_gpt-recorder.vtrace");
    assert!(
        healthy.contains("548.0 MiB in 312 tensors live at exit"),
        "{healthy}"
    );
    assert!(
        healthy.contains(
            ", 556.5 MiB in tensors' blocks (their sizes rounded up to the allocator's), "
        ),
        "{healthy}"
    );
}

/// `--top` shortens the lists, never the alerts: three lines leaking are three findings shown.
#[test]
fn top_never_hides_an_alert() {
    for top in ["0", "1"] {
        let out = vramtrace()
            .args(["report", "--top", top])
            .arg(fixtures().join("leak_three-recorder.vtrace"))
            .output()
            .unwrap();
        let shown = String::from_utf8(out.stdout).unwrap();
        let diagnosis = &shown[shown.find("\nDIAGNOSIS").unwrap()..];
        let alerts: Vec<&str> = (diagnosis.lines())
            .filter(|l| l.contains(". ALERT: steady growth at leak_three.py:"))
            .collect();
        assert_eq!(alerts.len(), 3, "--top {top}: {diagnosis}");
        assert!(
            diagnosis.contains("\n  (1 more in --json)\n"),
            "{diagnosis}"
        );
        // Nor the growth table's ALERT rows: the three causes and their segments, all six.
        let table = &shown[shown.find("\nSteady growth by place").unwrap()..];
        let table = &table[..table[1..].find("\n\n").unwrap()];
        assert!(
            table.starts_with("\nSteady growth by place (Python line, else call site; 6 places)"),
            "{table}"
        );
        assert_eq!(
            (table.lines())
                .filter(|l| l.trim_end().ends_with(" ALERT"))
                .count(),
            6,
            "{table}"
        );
        // The page too, which opens with the text's verdict and has its table's columns.
        let dir = tempfile::tempdir().unwrap();
        let page = dir.path().join("p.html");
        vramtrace()
            .args(["report", "--top", top, "--html"])
            .arg(&page)
            .arg(fixtures().join("leak_three-recorder.vtrace"))
            .assert()
            .success();
        let html = std::fs::read_to_string(&page).unwrap();
        let verdict = shown
            .lines()
            .nth(1)
            .unwrap()
            .trim_start_matches("  verdict   ");
        let escaped = verdict.replace('<', "&lt;").replace('>', "&gt;");
        assert!(
            html.contains(&format!(
                "<p class=\"verdict\"><span class=\"label\">verdict</span> {escaped}</p>"
            )),
            "{verdict}"
        );
        let steady = &html[html.find("<h3>Steady growth by place").unwrap()..];
        let steady = &steady[..steady.find("</table>").unwrap()];
        assert_eq!(
            steady.matches("<tr class=\"alert\">").count(),
            6,
            "{steady}"
        );
        assert!(
            steady.contains(">after</th>") && steady.contains("<th class=\"num\">at end</th>"),
            "{steady}"
        );
    }
}

/// `report` of a directory of four traces: what it prints, and its rank table's headline.
fn report_of_ranks(dir: &std::path::Path) -> (String, String) {
    let out = vramtrace().arg("report").arg(dir).output().unwrap();
    let shown = String::from_utf8(out.stdout).unwrap();
    let headline = (shown.lines())
        .find(|l| l.starts_with("Ranks (4 traces): "))
        .unwrap_or_else(|| panic!("no rank table: {shown}"))
        .to_string();
    (shown, headline)
}

/// A copy of the four ranks with rank 1's trace cut after its first 50,000 bytes.
fn ranks_with_rank1_cut() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(ranks_dir()).unwrap() {
        let e = e.unwrap();
        let mut bytes = std::fs::read(e.path()).unwrap();
        if e.file_name() == "traced-rank1-2010.vtrace" {
            bytes.truncate(50_000);
        }
        std::fs::write(dir.path().join(e.file_name()), bytes).unwrap();
    }
    dir
}

// The same run against that copy: one process wrote each pair's two traces, so nothing can
// differ; refused (exit 2), not passed as "no regression" (a cut trace in a comparison of two
// runs has no verdict: diff.rs).
#[test]
fn a_run_against_a_copy_of_itself_is_refused() {
    let dir = ranks_with_rank1_cut();
    let out = vramtrace()
        .arg("diff")
        .arg(ranks_dir())
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("error: A and B are the same trace (") && err.contains(": pid 2009 on "),
        "{err}"
    );
}

// Rank 3's trace not there (a rank that died before its tracer wrote, or a file not copied):
// the traces name a world of 4, so the page says what it leaves out, and the gate cannot pass.
#[test]
fn a_rank_with_no_trace_is_said_and_never_passes() {
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(ranks_dir()).unwrap() {
        let e = e.unwrap();
        if e.file_name() != "traced-rank3-2012.vtrace" {
            std::fs::copy(e.path(), dir.path().join(e.file_name())).unwrap();
        }
    }
    let out = vramtrace()
        .args(["report", "--fail-on", "leak=100GiB"])
        .arg(dir.path())
        .output()
        .unwrap();
    let shown = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        shown.lines().take(2).collect::<Vec<_>>(),
        [
            "vramtrace report: 3 traces",
            "INCOMPLETE: rank 3 of 4 has no trace here (a rank that died before its tracer wrote, \
             or a file not copied): its memory is in no number of this page"
        ]
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.ends_with("error: could not check: rank 3 of 4 has no trace here\n"),
        "{err}"
    );
    let out = vramtrace()
        .args(["report", "--json", "--fail-on", "leak=100GiB"])
        .arg(dir.path())
        .output()
        .unwrap();
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d["missing_ranks"], serde_json::json!([3]));
    assert_eq!(d["limits_verdict"], "not-checked");
    // diff --rank makes no verdict either, whatever it found: the median is not the job's.
    let out = vramtrace()
        .args(["diff", "--rank", "2"])
        .arg(dir.path())
        .output()
        .unwrap();
    let shown = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(2), "{shown}");
    assert!(
        shown.starts_with(
            "VERDICT  none (exit 2): the job is INCOMPLETE: rank 3 of 4 has no trace here (a \
             rank that died before its tracer wrote, or a file not copied): the median is of the \
             2 others here\n  in what could be read: "
        ),
        "{shown}"
    );
    // Nor does diff of two runs that both lack a rank of the job.
    let other = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(fixtures().join("ranks_alike")).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if name.ends_with(".vtrace") && !name.contains("rank3") {
            std::fs::copy(&p, other.path().join(&name)).unwrap();
        }
    }
    let out = vramtrace()
        .arg("diff")
        .arg(other.path())
        .arg(dir.path())
        .output()
        .unwrap();
    let shown = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(2), "{shown}");
    assert!(
        shown.contains(
            "rank 3 has no trace in either run (a rank that died before its tracer wrote, or a \
             file not copied): not compared"
        ),
        "{shown}"
    );
    // All four there: nothing missing, and the limit passes.
    let out = vramtrace()
        .args(["report", "--json", "--fail-on", "leak=100GiB", &ranks_dir()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d["missing_ranks"], serde_json::json!([]));
}

// Rank 0 of the one-rank leak (A) against rank 0 of the every-rank leak (B): the line the
// verdict names keeps tensors the caching allocator served without asking the driver, so no
// call's stack passed it; it is the first likely cause all the same, then the guard B removed
// (`if rank == 2:`, A's line), before the constants B changed.
#[test]
fn the_likely_cause_is_the_verdicts_line_and_the_guard_b_removed() {
    let acceptance = format!(
        "{}/../validation/gpu/acceptance",
        env!("CARGO_MANIFEST_DIR")
    );
    let (code, d) = diff(
        &["--source-dir", &acceptance],
        "ranks_gloo/traced-rank0-2009.vtrace",
        "ranks_alike/traced-rank0-795.vtrace",
    );
    assert_eq!(code, 1);
    let said: Vec<(String, u64, String)> = (d["suspects"].as_array().unwrap().iter())
        .map(|s| {
            let file = s["file"].as_str().unwrap();
            let name = file.rsplit('/').next().unwrap().to_string();
            (
                name,
                s["line"].as_u64().unwrap(),
                s["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let at = |f: &str, l: u64, k: &str| (f.to_string(), l, k.to_string());
    assert_eq!(
        said[..3],
        [
            at("ranks_alike.py", 47, "added"),
            at("ranks_gloo.py", 47, "removed"),
            at("ranks_gloo.py", 48, "removed"),
        ],
        "{said:?}"
    );
    assert_eq!(
        d["verdict"]["new_growth"][0]["label"],
        "ranks_alike.py:47 in <module>"
    );
}

// The same program and leak (512 KiB a step), traced with step marks and without (its steps
// guessed, one per four of the program's: +2.0 MiB a guessed step): growth is not compared
// across steps counted differently, so neither is called odd for it.
#[test]
fn the_rank_table_compares_growth_only_across_steps_counted_alike() {
    let dir = job_of(&["leak_slow-traced.vtrace", "leak_slow-marks.vtrace"]);
    let out = vramtrace().arg("report").arg(dir.path()).output().unwrap();
    let shown = String::from_utf8(out.stdout).unwrap();
    // Each rate in its own unit, in the headline and the rows.
    assert!(
        shown.contains(
            "\nRanks (2 traces): all 2 traces alike, each growing: first cause +2.0 \
             MiB/guessed step and +512.0 KiB/step at leak_slow.py:32 in <module> (libc10_cuda.so) \
             (where the allocator asked the driver for memory)\n"
        ),
        "{shown}"
    );
    for row in [
        "   +2.0 MiB/guessed step   +2.0 MiB/guessed step at leak_slow.py:32",
        "         +512.0 KiB/step   +512.0 KiB/step at leak_slow.py:32",
    ] {
        assert!(shown.contains(row), "{row}\n{shown}");
    }
}

// One trace without a rank against a job of four: nothing to pair them by, said with what to
// give instead.
#[test]
fn runs_that_cannot_be_paired_say_why() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixtures().join("healthy_gpt-traced.vtrace"),
        dir.path().join("one.vtrace"),
    )
    .unwrap();
    let out = vramtrace()
        .arg("diff")
        .arg(dir.path())
        .arg(ranks_dir())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: cannot pair the traces of the two runs: A has 1 trace and B 4, and some have no \
         rank to pair them by (RANK was not set): give one trace of each run\n"
    );
}

// Rank 1's trace cut short (its first 50,000 bytes): its numbers look like the others', so the
// table must say it is not whole, in the headline and its row, and print its report in full.
#[test]
fn a_rank_whose_trace_is_cut_is_not_whole_in_the_rank_table() {
    let dir = ranks_with_rank1_cut();
    let (shown, headline) = report_of_ranks(dir.path());
    assert!(
        headline.contains("against a median of +0 B per step; NOT WHOLE: rank 1's trace is cut short (truncated: "),
        "{headline}"
    );
    let row = shown.lines().find(|l| l.starts_with(" 3      1 ")).unwrap();
    assert!(row.contains("   0.00   not whole "), "{row}");
    assert!(shown.contains("\n════ rank 1 ("), "{shown}");
    let out = vramtrace()
        .args(["report", "--json"])
        .arg(dir.path())
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ranks = doc["ranks"].as_array().unwrap();
    let one = ranks.iter().find(|r| r["rank"] == 1).unwrap();
    assert_eq!(one["odd"], true);
    let gaps = one["gaps"].as_array().unwrap();
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    assert!(gaps[0]
        .as_str()
        .unwrap()
        .starts_with("is cut short (truncated: "));
    assert!(ranks
        .iter()
        .filter(|r| r["rank"] != 1)
        .all(|r| r["gaps"] == serde_json::json!([])));
}

// Rank 1 against the others with its trace cut short: the recorder was on (`vramtrace run`),
// but its history, handed over at exit, never reached the trace. The note says so, rather than
// telling the user to run it again with the recorder (exit 2: a cut trace has no verdict).
#[test]
fn a_cut_rank_lacks_its_recorder_history_for_what_it_is() {
    let dir = ranks_with_rank1_cut();
    let out = vramtrace()
        .args(["diff", "--rank", "1"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(
            "\n  note: tensors (PyTorch recorder) not compared: run B has no recorder history: \
             the recorder was on, but no snapshot reached the trace\n"
        ),
        "{text}"
    );
}

// ranks_alike's ranks each keep 4 MiB a step at line 47; ranks_gloo's keep less at the end but
// for rank 2. Each pair is a regression (more live at the end): its top difference is a line
// that grew, not line 47's 160 MiB that went away (the tensors' view ranked it first by size).
#[test]
fn the_top_difference_of_a_regression_is_a_line_that_got_worse() {
    let out = vramtrace()
        .arg("diff")
        .arg(fixtures().join("ranks_alike"))
        .arg(ranks_dir())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    let tops: Vec<&str> = (text.lines())
        .filter(|l| l.starts_with("  top difference, "))
        .collect();
    assert_eq!(tops.len(), 4, "{text}");
    for top in tops {
        assert!(top.contains(": grew, +"), "{top}");
    }
}

// Run A lacks rank 2 (it died before its tracer wrote): the three ranks both runs have are
// compared and what they found is said, but the set has no verdict (exit 2), since rank 2 was
// not compared; `--json` names it in `unpaired`.
#[test]
fn a_rank_one_run_lacks_is_not_compared_and_said() {
    let a = tempfile::tempdir().unwrap();
    for name in [
        "traced-rank0-2009",
        "traced-rank1-2010",
        "traced-rank3-2012",
    ] {
        let name = format!("{name}.vtrace");
        std::fs::copy(Path::new(&ranks_dir()).join(&name), a.path().join(&name)).unwrap();
    }
    let b = fixtures().join("ranks_alike");
    let out = vramtrace()
        .arg("diff")
        .arg(a.path())
        .arg(&b)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8(out.stdout).unwrap();
    let only = format!(
        "rank 2 is in run B only ({}): not compared",
        b.join("traced-rank2-797.vtrace").display()
    );
    assert_eq!(
        text.lines().next().unwrap(),
        format!(
            "VERDICT  none (exit 2): a trace could not be compared in full: {only}; in what \
             could be compared, REGRESSION in 3 of 3 pairs (rank 0, rank 1, rank 3)"
        )
    );
    assert!(
        text.contains(&format!("\nNot compared (1)\n  {only}\n")),
        "{text}"
    );
    // The set's document, of a comparison that has no verdict (exit 2).
    let no_verdict = || {
        let out = vramtrace()
            .args(["diff", "--json"])
            .arg(a.path())
            .arg(&b)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let doc = no_verdict();
    assert_eq!(doc["regression"], Value::Null);
    assert_eq!(doc["unpaired"], serde_json::json!([only]));
    assert_eq!(doc["pairs"].as_array().unwrap().len(), 3);
    // Rank 2's trace there but empty (the rank died before its tracer wrote): said first, as
    // why its rank has no pair, and the other ranks compared all the same.
    let empty = a.path().join("traced-rank2-2011.vtrace");
    std::fs::write(&empty, b"").unwrap();
    let doc = no_verdict();
    let cannot = format!(
        "a trace of run A cannot be read ({}: the trace is empty (0 bytes): the tracer wrote \
         nothing to it (it had not begun, or the process was killed first)); not compared",
        empty.display()
    );
    assert_eq!(doc["unpaired"], serde_json::json!([cannot, only]));
    assert_eq!(doc["pairs"].as_array().unwrap().len(), 3);
}

// A run with step marks against one whose steps are a repeating allocation: the verdict stands,
// and a note says the per-step figures count different things (gpt_leaky's pattern step spans
// eight optimizer steps: +128 MiB "per step" for 16 MiB per marked step). Runs that count steps
// alike say nothing of it.
#[test]
fn steps_counted_differently_are_said() {
    let note = "steps counted differently: run A's are its step marks, run B's a repeating \
                allocation (one may span several of the other's): growth per step not \
                compared; mark steps in both runs";
    let (code, d) = diff(
        &[],
        "healthy_gpt-recorder.vtrace",
        "gpt_leaky-traced.vtrace",
    );
    assert_eq!(code, 1);
    let notes = d["verdict"]["notes"].as_array().unwrap();
    assert!(notes.iter().any(|n| n == note), "{notes:?}");
    // Nor is their growth per step a check: leak_three's run with marks against its own run
    // without hooks (a pattern step of two training steps) failed on +13.2 MiB "per step" with
    // nothing more live at the end, and passed the other way round.
    let checked = |d: &Value| {
        (d["verdict"]["checks"].as_array().unwrap().iter())
            .any(|c| c["metric"] == "growth_per_step")
    };
    assert!(!checked(&d));
    for (a, b) in [
        ("leak_three-recorder.vtrace", "h100/leak_three-bare.vtrace"),
        ("h100/leak_three-bare.vtrace", "leak_three-recorder.vtrace"),
    ] {
        let (code, d) = diff(&[], a, b);
        assert!(!checked(&d), "{a} {b}");
        assert_eq!(code, 0, "{a} {b}: {}", d["verdict"]);
    }
    let (code, d) = diff(
        &[],
        "healthy_gpt-recorder.vtrace",
        "gpt_leaky-recorder.vtrace",
    );
    assert_eq!(code, 1);
    let notes = d["verdict"]["notes"].as_array().unwrap();
    assert!(!notes.iter().any(|n| n == note), "{notes:?}");
    // Both guessed: their rates said to be per guessed step, and growth per step no check
    // (+126 MiB "per step" failed the 1 MiB limit, where `report --fail-on` does not compare);
    // --max-growth asked for is a gap of the pair.
    let (_, d) = diff(&[], "leak_slow-traced.vtrace", "gpt_leaky-traced.vtrace");
    let notes = d["verdict"]["notes"].as_array().unwrap();
    let guessed = "steps guessed from the allocation pattern in both runs, not marked: a rate \
                   per step is per guessed step, which may span several of the program's steps \
                   or part of one; growth per step not compared with its limit (mark steps for \
                   exact rates)";
    assert!(notes.iter().any(|n| n == guessed), "{notes:?}");
    assert!(!checked(&d));
    let (code, d) = diff(
        &["--max-growth", "1MiB/step"],
        "leak_slow-traced.vtrace",
        "gpt_leaky-traced.vtrace",
    );
    assert_eq!(code, 2);
    let gap = "has steps guessed from the allocation pattern, as run A has: --max-growth, a size \
               per step, cannot be compared with growth per guessed step (mark steps in both runs)";
    assert!(
        (d["b"]["gaps"].as_array().unwrap().iter()).any(|g| g == gap),
        "{}",
        d["b"]
    );
}

// Only B has PyTorch's recorder: the tensors cannot be compared, but B's own findings name the
// line that keeps what its allocator grew for (57, where the allocator asked at 63), and the
// verdict names it as B's report does; the top difference, a driver site, says where its
// tensors are kept, not "run it with the recorder".
#[test]
fn a_new_growth_is_named_at_bs_recorders_line_when_a_has_none() {
    let (code, d) = diff(
        &[],
        "healthy_gpt-traced.vtrace",
        "gpt_leaky-recorder.vtrace",
    );
    assert_eq!(code, 1);
    let g = &d["verdict"]["new_growth"][0];
    assert_eq!(
        (&g["label"], &g["owner"], &g["line_means"], &g["regression"]),
        (
            &Value::from("gpt_leaky.py:57 in <module>"),
            &Value::from("PyTorch tensors"),
            &Value::from("keeps"),
            &Value::Bool(true)
        )
    );
    assert_eq!(g["rate"], (16 * MIB) as f64);
    let top = &d["top_difference"];
    assert_eq!(top["label"], "gpt_leaky.py:63 in <module>");
    assert_eq!(top["kept_at"], "gpt_leaky.py:57 in <module>");
    let (_, text) = diff_text(
        &[],
        "healthy_gpt-traced.vtrace",
        "gpt_leaky-recorder.vtrace",
    );
    assert!(
        text.contains(
            "; the line where the allocator asked the driver for memory, for the tensors B's \
             recorder finds kept at gpt_leaky.py:57 in <module>\n"
        ),
        "{text}"
    );
    assert!(
        !text.contains("PyTorch's recorder names that line"),
        "{text}"
    );
}

// With the recorder in both runs, the verdict names the tensors' line (57); the driver's table
// lists first the place where the allocator asked for their memory (63), marked as their
// segments and said to be so, not as a second growth.
#[test]
fn the_driver_row_of_the_verdicts_tensors_is_marked_as_their_segments() {
    let (code, text) = diff_text(
        &[],
        "healthy_gpt-recorder.vtrace",
        "gpt_leaky-recorder.vtrace",
    );
    assert_eq!(code, 1);
    let table = &text[text.find("\nChanged places, view driver").unwrap()..];
    let first = table.lines().nth(4).unwrap();
    assert!(
        first.starts_with(" 1   new (segments) ")
            && first.contains(" gpt_leaky.py:63 in <module> (libc10_cuda.so) "),
        "{table}"
    );
    assert!(
        table.contains(
            "\n  (segments): where the framework's allocator asked the driver for the memory of \
             the verdict's tensors (the tensors' view names the line that keeps them): their \
             evidence, not a growth of its own\n"
        ),
        "{table}"
    );
    assert_eq!(table.matches("(segments)").count(), 2, "{table}");
}

// A run without steps (A grows nowhere) against one whose steps come from its repeating
// allocation: growth in all does not compare, but no growth is none in any unit, so B's new
// steady growth is still judged. A CI gate passed this leak (exit 0 on the bare runs of the
// H100's CuPy and slow leaks against healthy ones) while B's own report alerted.
#[test]
fn a_new_growth_is_judged_when_only_b_counts_steps() {
    let (code, d) = diff(&[], "healthy_gpt-traced.vtrace", "gpt_leaky-traced.vtrace");
    assert_eq!(code, 1);
    let g = &d["verdict"]["new_growth"][0];
    assert_eq!(
        (&g["label"], &g["unit"], &g["regression"]),
        (
            &Value::from("gpt_leaky.py:63 in <module>"),
            &Value::from("step"),
            &Value::Bool(true)
        )
    );
    // 8 training steps of 16 MiB make one repeat of the allocation pattern.
    assert_eq!(g["rate"], Value::from((128 * MIB) as f64));
    assert_eq!(d["totals"]["growth"], Value::Null);
    // A healthy run with steps against the same run without: nothing grows.
    let (code, d) = diff(&[], "healthy_gpt-traced.vtrace", "healthy_gpt-marks.vtrace");
    assert_eq!(code, 0, "{}", d["verdict"]);
    assert_eq!(d["verdict"]["new_growth"], Value::Array(vec![]));
}

// `--max-growth` given is a limit asked for: where B has no steps to compare it on (the bare
// run of the rank that keeps 8 MiB a step), the pair has no verdict (exit 2), as `check
// --max-growth` has it; left at its default, the note says growth was not compared.
#[test]
fn a_growth_limit_asked_for_and_not_compared_gives_no_verdict() {
    let pair = (
        "ranks_gloo/traced-rank0-2009.vtrace",
        "h100/ranks_gloo-rank2-bare.vtrace",
    );
    let wide = ["--max-live", "1GiB", "--max-peak", "1GiB"];
    let (code, d) = diff(&wide, pair.0, pair.1);
    assert_eq!(code, 0, "{}", d["verdict"]);
    let asked = [&wide[..], &["--max-growth", "1MiB/step"]].concat();
    let (code, d) = diff(&asked, pair.0, pair.1);
    assert_eq!(code, 2, "{}", d["verdict"]);
    assert_eq!(d["verdict"]["regression"], Value::Null);
    let gaps = d["b"]["gaps"].as_array().unwrap();
    assert_eq!(
        gaps[..],
        [Value::from(
            "has no steps: --max-growth cannot be compared with its growth (mark steps with \
             vramtrace_mark_step(), or name an NVTX range with VRAMTRACE_STEP_RANGE)"
        )]
    );
}

// Another program against the healthy one: the raw `cudaMalloc` of `leak_extension.py` (3 MiB a
// step at line 39, libleaky.so) is the verdict's new growth, and the line under the verdict names
// it too — not the healthy run's loss line, gone from B with more bytes (384 MiB) than the leak
// holds at the end (360 MiB), which ranked first by bytes.
#[test]
fn the_top_difference_is_the_growth_the_verdict_names() {
    let (code, d) = diff(
        &[],
        "healthy_gpt-marks.vtrace",
        "leak_extension-marks.vtrace",
    );
    assert_eq!(code, 1);
    let g = &d["verdict"]["new_growth"][0];
    assert_eq!(
        (&g["label"], &g["regression"], &g["rate"]),
        (
            &Value::from("leak_extension.py:39 in <module>"),
            &Value::Bool(true),
            &Value::from((3 * MIB) as f64)
        )
    );
    let top = &d["top_difference"];
    assert_eq!(
        (&top["label"], &top["owner"], &top["status"], &top["growth"]),
        (
            &Value::from("leak_extension.py:39 in <module>"),
            &Value::from("libleaky.so"),
            &Value::from("new"),
            &Value::from((3 * MIB) as f64)
        )
    );
    // The sites are still listed most changed first.
    assert_eq!(
        d["sites"]["list"][0]["label"],
        "healthy_gpt.py:51 in <module>"
    );
    // The line under the verdict quotes the first row of the table by place, which is its place.
    let place = &d["sites"]["places"][0];
    assert_eq!(place["label"], d["top_difference"]["label"]);
    let live = place["change"]["live_bytes"].as_i64().unwrap()
        + place["change"]["host_bytes"].as_i64().unwrap();
    assert_eq!(d["top_difference"]["live_bytes"], live);
    assert_eq!(d["top_difference"]["status"], place["status"]);
}

// A process group every 5 steps (`leak_comm.py:49`), its buffers made by five of NCCL's functions
// and all freed by `destroy_process_group` at the end: nothing of it is live at the end, and the
// report finds +77.6 MiB a step there. The comparison sees the same growth — the live state's
// own series of that line, not what is left of it at the end — once, at the report's rate.
#[test]
fn a_leak_freed_at_the_end_is_one_new_growth_at_the_report_s_rate() {
    let (code, d) = diff(&[], "healthy_gpt-marks.vtrace", "leak_comm-marks.vtrace");
    assert_eq!(code, 1);
    let growths = d["verdict"]["new_growth"].as_array().unwrap();
    assert_eq!(growths.len(), 1, "{growths:?}");
    let g = &growths[0];
    assert_eq!(
        (&g["label"], &g["owner"], &g["regression"]),
        (
            &Value::from("leak_comm.py:49 in <module>"),
            &Value::from("libnccl.so.2"),
            &Value::Bool(true)
        )
    );
    // 3 × 25.6 MiB and 2 × 409.6 KiB a step: the report's 81,369,497.6 B, and its 1,730 steps.
    let rate = g["rate"].as_f64().unwrap();
    assert!((rate - 81_369_497.6).abs() < 1e-3, "{rate}");
    assert_eq!(g["steps_to_full"].as_f64().unwrap().floor(), 1730.0);
    let top = &d["top_difference"];
    assert_eq!(
        (&top["label"], &top["status"], &top["live_bytes"]),
        (
            &Value::from("leak_comm.py:49 in <module>"),
            &Value::from("new"),
            &Value::from(0)
        )
    );
    assert!((top["growth"].as_f64().unwrap() - rate).abs() < 1e-9);
    // The table by place opens with that line, its 20 native paths one row at the verdict's
    // rate (freed at the end, it changed nothing live: by bytes it would not be listed).
    let places = d["sites"]["places"].as_array().unwrap();
    let first = &places[0];
    assert_eq!(
        (&first["label"], &first["module"], &first["paths"]),
        (
            &Value::from("leak_comm.py:49 in <module>"),
            &Value::from("libnccl.so.2"),
            &Value::from(20)
        )
    );
    assert!((first["change"]["growth"].as_f64().unwrap() - rate).abs() < 1e-3);
    let mut seen = std::collections::BTreeSet::new();
    for p in places {
        assert!(
            seen.insert((p["label"].to_string(), p["module"].to_string())),
            "one row per place: {p}"
        );
    }
}

// Two different programs (`healthy_gpt.py`, `leak_comm.py`), both sources found: their main
// scripts share less than half their code, so they are no two versions of one file, and none
// of leak_comm.py's 40-odd lines (its docstring among them) is "a line B added".
#[test]
fn two_programs_are_not_two_versions_of_one_script() {
    let acceptance = fixtures().join("../../../validation/gpu/acceptance");
    let acceptance = acceptance.display().to_string();
    let extra = ["--source-dir", &acceptance, "--source-dir", &sources()];
    let (code, d) = diff(
        &extra,
        "healthy_gpt-traced.vtrace",
        "leak_comm-traced.vtrace",
    );
    assert_eq!(code, 1);
    let paired: Vec<&Value> = (d["files"].as_array().unwrap().iter())
        .map(|f| &f["paired_by"])
        .collect();
    assert!(!paired.contains(&&Value::from("main-script")), "{paired:?}");
    assert_eq!(d["suspects"], Value::Array(vec![]));
    // Said first: the regression is a change of program.
    assert_eq!(
        d["verdict"]["notes"][0],
        "the runs ran different main scripts (A healthy_gpt.py, B leak_comm.py) whose code is \
         not one program's: two programs, not two runs of one"
    );
    // A renamed script that kept its code is one program's next version: no such note.
    let (_, d) = diff(
        &extra,
        "healthy_gpt-traced.vtrace",
        "gpt_leaky-traced.vtrace",
    );
    let notes = d["verdict"]["notes"].to_string();
    assert!(!notes.contains("different main scripts"), "{notes}");
}

// `h100/` holds traces of three programs, two of them rank 2 of a job: the headline says a rank
// came twice, and that the table compares programs, rather than ranking them silently as one
// job.
#[test]
fn a_rank_in_two_traces_is_said() {
    let (_, headline) = report_of_ranks(&fixtures().join("h100"));
    assert!(
        headline.ends_with(
            "; rank 2 in more than one trace (a restarted job, or traces of several jobs); the \
             traces ran 3 programs (leak_slow.py, leak_three.py, ranks_gloo.py): the table \
             compares programs, not ranks of one job"
        ),
        "{headline}"
    );
}

// A trace named twice (a directory and a trace in it, overlapping globs) is read once, with a
// warning: counted twice, a healthy rank would make the median and the planted rank look odd.
#[test]
fn a_trace_named_twice_is_read_once() {
    let again = std::path::Path::new(&ranks_dir()).join("traced-rank0-2009.vtrace");
    let out = vramtrace()
        .arg("report")
        .arg(ranks_dir())
        .arg(&again)
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains(&format!(
            "warning: {} given twice: read once",
            again.display()
        )),
        "{stderr}"
    );
    let shown = String::from_utf8(out.stdout).unwrap();
    let (_, headline) = report_of_ranks(std::path::Path::new(&ranks_dir()));
    assert!(shown.contains(&format!("{headline}\n")), "{shown}");
    assert!(!headline.contains("more than one trace"), "{headline}");
}

// A flame graph of growth draws the driver's calls: gpt_leaky's is the caching allocator's line
// 63, where the report names line 57, which keeps the logits (PyTorch's tensors). The graph and
// the export's line say so; a trace without that view says nothing more.
#[test]
fn a_flame_graph_of_growth_names_the_line_the_report_names() {
    let dir = tempfile::tempdir().unwrap();
    let export = |trace: &str, svg: &str| {
        let out = vramtrace()
            .args(["export", "--format", "flamegraph", "--at", "growth", "-o"])
            .arg(dir.path().join(svg))
            .arg(fixtures().join(trace))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        (said, std::fs::read_to_string(dir.path().join(svg)).unwrap())
    };
    let (said, svg) = export("gpt_leaky-recorder.vtrace", "leaky.svg");
    assert!(
        said.contains(
            "; the driver's view: the report names gpt_leaky.py:57 in <module> (PyTorch \
             tensors), the line that keeps the memory, "
        ),
        "{said}"
    );
    assert!(svg.contains("the report names gpt_leaky.py:57 in &lt;module&gt; (PyTorch tensors)"));
    let (said, svg) = export("leak_slow-marks.vtrace", "slow.svg");
    assert!(
        !said.contains("report names") && !svg.contains("report names"),
        "{said}"
    );
}

// PyTorch's recorder hands its history over at exit, after any point a replay stops at: the
// replay still reads it, and names the line the report names (57 keeps the logits; 63 is where
// the caching allocator asked the driver), at a step and at the peak as at the end.
#[test]
fn a_replay_before_the_end_names_the_line_the_report_names() {
    let first = |args: &[&str]| -> Value {
        let doc = json_of(args, &fixtures().join("gpt_leaky-recorder.vtrace"));
        doc["analysis"]["diagnosis"][0]["site"]["label"].clone()
    };
    let report = first(&["report"]);
    assert_eq!(report, "gpt_leaky.py:57 in <module>");
    for at in ["step 100", "peak", "end"] {
        assert_eq!(first(&["replay", "--at", at]), report, "--at {at}");
    }
}

// Two runs of a job compared rank by rank: a rank in two traces of one run is named, not paired
// by the traces' order with whatever is beside it.
#[test]
fn a_rank_twice_in_one_run_is_named_not_paired_by_order() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for run in [&a, &b] {
        std::fs::create_dir(run).unwrap();
        for e in std::fs::read_dir(ranks_dir()).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), run.join(e.file_name())).unwrap();
        }
    }
    let again = b.join("again-rank0.vtrace");
    std::fs::copy(b.join("traced-rank0-2009.vtrace"), &again).unwrap();
    let out = vramtrace().arg("diff").arg(&a).arg(&b).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "error: cannot pair the traces of the two runs: run B has rank 0 in 2 traces ({}, \
             {}): give each run one trace per rank\n",
            again.display(),
            b.join("traced-rank0-2009.vtrace").display()
        )
    );
}

// The driver counts every process on the device: where it reports less used at the end than
// the baseline holds (another process freed its memory), the remainder below 0 is said to mean
// nothing, not left as a negative number to puzzle over.
#[test]
fn a_remainder_below_zero_is_explained() {
    let out = vramtrace()
        .arg("report")
        .arg(fixtures().join("healthy_hf_llama-marks.vtrace"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("      -6.2 GiB "), "{text}");
    assert!(
        text.contains(
            "\n  unexplained below 0: the driver reported less memory used at the last sample \
             than the baseline holds: memory of other processes on the device (the driver \
             counts every process) was freed during the run, so the baseline does not hold and \
             the remainder says nothing.\n"
        ),
        "{text}"
    );
}

// leak_slow traced with step marks against the same program whose steps the tools found in its
// allocation pattern: a pattern's step may span several marked ones, so their growth per step
// is no comparison — not in the verdict, not in the totals, not in the step table, and no place
// whose only change is its growth opens the comparison.
#[test]
fn growth_is_not_compared_across_steps_counted_differently() {
    let a = fixtures().join("leak_slow-marks.vtrace");
    let d = json_of(
        &["diff", a.to_str().unwrap()],
        &fixtures().join("leak_slow-traced.vtrace"),
    );
    assert_eq!(d["totals"]["growth"], Value::Null);
    assert_eq!(d["totals"]["growth_unit"], Value::Null);
    assert_eq!(d["steps"]["aligned"], false);
    assert_eq!(d["top_difference"], Value::Null);
    let notes = d["verdict"]["notes"].to_string();
    assert!(notes.contains("growth per step not compared"), "{notes}");
}

/// The exit code of `vramtrace ARGS` whose standard output (or error, with `stderr`) is a pipe
/// its reader closed before a word was written, as `| head` does once it has its lines; and
/// what it wrote on the other stream.
fn verdict_with_reader_gone(args: &[&str], stderr: bool) -> (i32, String) {
    use std::io::Read;
    use std::process::Stdio;
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_vramtrace"));
    cmd.args(args).current_dir(fixtures());
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    // The closed end is dropped here, before the command has read its trace.
    let mut kept: Box<dyn Read> = match stderr {
        false => {
            drop(out);
            Box::new(err)
        }
        true => {
            drop(err);
            Box::new(out)
        }
    };
    let mut said = String::new();
    kept.read_to_string(&mut said).unwrap();
    (child.wait().unwrap().code().unwrap_or(-1), said)
}

/// A CI log trimmed with `| head` keeps the verdict: the pipe closed early is no reason to exit
/// 0 on a regression or a limit exceeded (under `set -o pipefail` that passed a known leak),
/// and a closed standard error is no panic (exit 101).
#[test]
fn a_reader_that_leaves_early_keeps_the_verdict() {
    let diff = [
        "diff",
        "healthy_gpt-recorder.vtrace",
        "gpt_leaky-recorder.vtrace",
    ];
    assert_eq!(verdict_with_reader_gone(&diff, false).0, 1);
    let json = [
        "diff",
        "--json",
        "healthy_gpt-recorder.vtrace",
        "gpt_leaky-recorder.vtrace",
    ];
    assert_eq!(verdict_with_reader_gone(&json, false).0, 1);
    let (code, limits) = verdict_with_reader_gone(
        &["report", "--fail-on", "growth", "leak_slow-marks.vtrace"],
        false,
    );
    assert_eq!(code, 1);
    assert!(
        limits.contains(
            "  FAIL  growth (alert)   device 0: +512.0 KiB per step (524288 B) at leak_slow.py:32"
        ),
        "{limits}"
    );
    let (code, _) = verdict_with_reader_gone(
        &["report", "--fail-on", "growth", "leak_slow-marks.vtrace"],
        true,
    );
    assert_eq!(code, 1);
    // A report without limits has no verdict: a closed pipe ends it well.
    assert_eq!(
        verdict_with_reader_gone(&["report", "leak_slow-marks.vtrace"], false).0,
        0
    );
    // An export to a pipe its reader closed ends well in every format that streams.
    for format in [
        "perfetto",
        "csv-live",
        "csv-events",
        "pytorch",
        "flamegraph",
    ] {
        let args = [
            "export",
            "--format",
            format,
            "-o",
            "-",
            "leak_slow-marks.vtrace",
        ];
        let (code, said) = verdict_with_reader_gone(&args, false);
        assert_eq!(code, 0, "{format}: {said}");
    }
    // Errors said on a closed standard error are still errors, not panics.
    assert_eq!(
        verdict_with_reader_gone(&["report", "missing.vtrace"], true).0,
        2
    );
}

/// The lines `report --fail-on LIMIT TRACE` writes on stderr, and its exit code.
fn limits_of(limit: &str, trace: &Path) -> (i32, String) {
    let out = vramtrace()
        .args(["report", "--fail-on", limit])
        .arg(trace)
        .output()
        .unwrap();
    let code = out.status.code().unwrap_or(-1);
    (code, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A growth limit says what its steps rest on: steps guessed from the allocation pattern (the
/// leaky GPT's guessed step spans 8 of its steps: +128 MiB a step where it keeps 16), or none
/// (growth per time window, where a rank's leak in a few large rises passes the alert); a size
/// per step against a trace without steps is not compared (exit 2), never an "ok" with two
/// units side by side. A limit exceeded beside a trace cut short is said in the last line too.
#[test]
fn a_growth_limit_says_what_its_steps_rest_on() {
    let dir = fixtures();
    let (code, said) = limits_of("growth", &dir.join("gpt_leaky-traced.vtrace"));
    assert_eq!(code, 1);
    assert!(said.ends_with(
        "\n        note: steps guessed from the allocation pattern, one every 144 ms, not marked: \
         one may span several of the program's steps, and its rate with it (mark steps for \
         exact rates)\n"
    ), "{said}");
    // A size per step against its guessed steps: +128 MiB a guessed step is not 128 of the
    // program's 16 MiB steps, nor under 20 MiB of them: not checked, where it failed.
    let trace = dir.join("gpt_leaky-traced.vtrace");
    let (code, said) = limits_of("growth=20MiB/step", &trace);
    assert_eq!(code, 2);
    let gap = "has steps guessed from the allocation pattern, one every 144 ms, not marked: one \
               may span several of the program's steps or part of one, so a growth limit per \
               step cannot be compared with its growth per guessed step (mark steps with \
               vramtrace_mark_step(), as `vramtrace run` does at PyTorch's optimizer steps, or \
               name an NVTX range with VRAMTRACE_STEP_RANGE; or gate on the growth alert)";
    assert_eq!(
        said,
        format!(
            "vramtrace report: limits of {t}\n  --    growth           device 0: +128.0 MiB per \
             guessed step (134217728 B) at gpt_leaky.py:63 in <module> (libc10_cuda.so), not \
             comparable with the limit 20.0 MiB/step (20971520 B)\n  not checked: the trace \
             {gap}\nerror: could not check: {t} {gap}\n",
            t = trace.display()
        )
    );
    // Where nothing grows, none is none per any step: it passes.
    let (code, said) = limits_of("growth=1MiB/step", &dir.join("healthy_compile-bare.vtrace"));
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains(
            "  ok    growth           device 0: +0 B per guessed step (0 B), limit 1.0 MiB/step"
        ),
        "{said}"
    );
    let (code, said) = limits_of("growth", &dir.join("h100/ranks_gloo-rank2-bare.vtrace"));
    assert_eq!(code, 0);
    assert!(said.ends_with(
        "  ok    growth (alert)   device 0: +0 B per 128 ms window (0 B)\n        note: no steps: \
         growth judged per 128 ms window, where a leak that grew in a few large rises is not \
         told from a one-off rise (mark steps)\n"
    ), "{said}");
    // Marked steps need no note.
    let (code, said) = limits_of("growth", &dir.join("leak_slow-marks.vtrace"));
    assert_eq!(code, 1);
    assert!(!said.contains("note:"), "{said}");

    let trace = dir.join("leak_comm-traced.vtrace");
    let (code, said) = limits_of("growth=2GiB/step", &trace);
    assert_eq!(code, 2);
    let gap = "has no steps (none marked, no repeating allocation pattern): a growth limit per \
               step cannot be compared with its growth per 128 ms window (mark steps with \
               vramtrace_mark_step(), or name an NVTX range with VRAMTRACE_STEP_RANGE; or gate on \
               the growth alert)";
    assert_eq!(
        said,
        format!(
            "vramtrace report: limits of {t}\n  --    growth           device 0: +1.3 GiB per 128 \
             ms window (1366084813 B) at leak_comm.py:49 in <module> (libnccl.so.2), not \
             comparable with the limit 2.0 GiB/step (2147483648 B)\n  not checked: the trace \
             {gap}\nerror: could not check: {t} {gap}\n",
            t = trace.display()
        )
    );

    let job = tempfile::tempdir().unwrap();
    std::fs::copy(
        dir.join("leak_slow-marks.vtrace"),
        job.path().join("a.vtrace"),
    )
    .unwrap();
    let whole = std::fs::read(dir.join("healthy_peak-marks.vtrace")).unwrap();
    std::fs::write(job.path().join("b.vtrace"), &whole[..5000]).unwrap();
    let (code, said) = limits_of("growth", job.path());
    assert_eq!(code, 2);
    let last = said.lines().last().unwrap();
    assert!(
        last.starts_with("error: could not check: ")
            && last.ends_with("; limits exceeded in what was read (1 trace, above)"),
        "{said}"
    );
}

/// `diff` of one pair opens with its verdict (the line a CI log is read for), then the top
/// difference, then the runs; a rank compared with the median of ranks that all leak alike is
/// told why that shows nothing, and how to see it.
#[test]
fn a_diff_opens_with_its_verdict() {
    let dir = fixtures();
    let out = vramtrace()
        .arg("diff")
        .arg(dir.join("healthy_gpt-recorder.vtrace"))
        .arg(dir.join("gpt_leaky-recorder.vtrace"))
        .assert()
        .code(1);
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    let lines: Vec<&str> = text.lines().take(4).collect();
    assert!(
        lines[0].starts_with("VERDICT  REGRESSION (exit 1): "),
        "{text}"
    );
    assert_eq!(
        lines[1],
        "  top difference, view tensors (PyTorch recorder): gpt_leaky.py:57 in <module> \
         (PyTorch tensors): new, +1.9 GiB live at end, +16.0 MiB/step"
    );
    assert!(
        lines[2].starts_with("  A  ")
            && lines[2].ends_with(
                "healthy_gpt-recorder.vtrace  (pid 701, host vm, 120 steps from step marks)"
            ),
        "{text}"
    );
    assert!(lines[3].starts_with("  B  "), "{text}");

    let out = vramtrace()
        .args(["diff", "--rank", "1"])
        .arg(dir.join("ranks_alike"))
        .assert()
        .code(0);
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    let lines: Vec<&str> = text.lines().take(2).collect();
    assert_eq!(
        lines,
        [
            "VERDICT  no regression (exit 0)",
            "  note: all 4 traces alike, each growing: first cause +4.0 MiB/step at \
             ranks_alike.py:47 in <module> (PyTorch tensors): a leak they all share is no \
             difference from their median; compare the job with an earlier run of it (vramtrace \
             diff OLD_DIR NEW_DIR), or read it in vramtrace report"
        ]
    );
}

// HF Llama under expandable segments (real H200 trace): most of its memory is in virtual-memory
// handles, which PyTorch's snapshot format has no segment for. The pickle's segments and the
// bytes it says it left out add up to the report's live device memory, and the export says so.
#[test]
fn the_pytorch_snapshot_says_what_it_cannot_hold() {
    let dir = tempfile::tempdir().unwrap();
    let trace = fixtures().join("healthy_hf_llama-marks.vtrace");
    let out = dir.path().join("hf.pickle");
    let run = vramtrace()
        .args(["export", "--format", "pytorch", "-o"])
        .arg(&out)
        .arg(&trace)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0));
    let said = String::from_utf8_lossy(&run.stderr);
    assert!(
        said.contains("; 954.0 MiB live in virtual-memory handles and arrays is not in it (`report` counts it)"),
        "{said}"
    );
    let read = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import pickle, sys\ns = pickle.load(open(sys.argv[1], 'rb'))\n\
             print(sum(x['total_size'] for x in s['segments']), \
             s['vramtrace']['device_bytes_left_out'])",
        )
        .arg(&out)
        .output()
        .expect("python3 (required by the tests)");
    assert_eq!(
        String::from_utf8_lossy(&read.stdout),
        "134532616 1000341504\n"
    );
    let report = stdout_of(&["report", "--json"], "healthy_hf_llama-marks.vtrace");
    let report: Value = serde_json::from_str(&report).unwrap();
    assert_eq!(
        report["live"]["device_memory"]["bytes"],
        134_532_616u64 + 1_000_341_504
    );
}

// The leaky GPT with the recorder (real H200 trace) pushes 360 NVTX ranges without a name: each
// is a slice Perfetto can name, none a blank one.
#[test]
fn unnamed_nvtx_ranges_have_a_name_in_perfetto() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("g.json");
    vramtrace()
        .args(["export", "--format", "perfetto", "-o"])
        .arg(&out)
        .arg(fixtures().join("gpt_leaky-recorder.vtrace"))
        .assert()
        .success();
    let doc: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let ranges: Vec<&Value> = (doc["traceEvents"].as_array().unwrap().iter())
        .filter(|e| e["cat"] == "nvtx" && e["ph"] == "X")
        .collect();
    let unnamed = ranges
        .iter()
        .filter(|e| e["name"] == "(unnamed NVTX range)");
    assert_eq!(unnamed.count(), 360);
    assert!(ranges.iter().all(|e| e["name"] != ""));
}

/// An out-of-memory post-mortem of a real run says what was free as the trace counts it and as
/// the driver told PyTorch's recorder, and the difference: memory no hook sees.
#[test]
fn a_failure_says_what_was_free_as_the_driver_told_it() {
    let shown = stdout_of(&["report"], "oom/leak_oom-run.vtrace");
    let line = |start: &str| {
        (shown.lines())
            .find(|l| l.trim_start().starts_with(start))
            .unwrap_or_else(|| panic!("no {start} line in\n{shown}"))
            .to_string()
    };
    assert_eq!(
        line("free then"),
        "  free then 992.7 MiB of the device's 79.2 GiB as the trace counts it, 372.2 MiB as the \
         driver told PyTorch (620.6 MiB held by what the trace does not see: the CUDA context, \
         other processes); the request was more than that"
    );
    assert_eq!(
        line("oom relief"),
        "  oom relief     device 0: 1.0 GiB requested with 372.2 MiB free on the device (as the \
         driver told PyTorch), 0 B in whole free segments, 11.0 MiB cached free in all: neither \
         empty_cache() nor expandable_segments:True would have served it"
    );
    assert!(shown.contains(
        "verdict   ALERT: steady growth at leak_oom.py:49 in <module> (PyTorch tensors) on device \
         0, +1.0 GiB per step, out of memory at step 79;"
    ));
    // A request larger than the whole device: said so at its line, and the run is not a leak.
    let peak = stdout_of(&["report"], "oom/healthy_oom_peak-run.vtrace");
    assert_eq!(
        peak.lines().nth(1).unwrap(),
        "  verdict   OUT OF MEMORY (2 failures; the first: cudaMalloc of 158.4 GiB at \
         healthy_oom_peak.py:31 in <module> (libc10_cuda.so) on device 0 at step 31 with 280.3 \
         MiB live, more than all that was free (78.9 GiB)); no ALERT or warning; 2 notes, the \
         first: peak at healthy_oom_peak.py:24 in <module> (libc10_cuda.so) on device 0"
    );
    // The device was not full: the steps after the failure are judged with those before (it
    // said "out of memory from step 31 (the course after it is not judged …)").
    assert!(
        peak.contains(
            "\n  phases         device 0: steady from step 0, a one-off rise at step 31 (+4.0 MiB, \
             kept)\n"
        ),
        "{peak}"
    );
    assert!(peak.contains("  and 1 more failure like it, from the same place, in step 31"));
}

/// B's steps guessed from its allocation pattern, A without steps: the new growth's rate and
/// time to full are per guessed step, as the report of B says them, and a note says why.
#[test]
fn a_new_growth_over_guessed_steps_says_so() {
    let dir = fixtures();
    let out = vramtrace()
        .arg("diff")
        .arg("--source-dir")
        .arg(&dir)
        .arg(dir.join("healthy_gpt-traced.vtrace"))
        .arg(dir.join("gpt_leaky-traced.vtrace"))
        .output()
        .unwrap();
    let said = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{said}");
    let verdict = said.lines().next().unwrap();
    assert!(
        verdict.contains(
            "new steady growth +128.0 MiB/guessed step at gpt_leaky.py:63 in <module> \
             (libc10_cuda.so): above 64.0 KiB; device full in 1,005 guessed steps (2 min)"
        ),
        "{verdict}"
    );
    assert!(
        said.contains(
            "\n  note: run B's steps are guessed from the allocation pattern, not marked: its \
             rates per step are per guessed step, which may span several of the program's steps \
             or part of one (mark steps for exact rates)\n"
        ),
        "{said}"
    );
}
