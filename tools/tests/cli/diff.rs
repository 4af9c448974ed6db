//! `vramtrace diff` and `vramtrace report` of several traces on synthetic runs of one program
//! (see [`crate::runs`]): sites matched across ASLR and moved lines, exactly the planted leak
//! found, the JSON document (snapshot), exit codes, the rank table.

use std::path::Path;

use serde_json::Value;

use crate::runs::{write_run, Variant, STEPS};
use crate::support::*;

/// Runs `vramtrace ARGS` and returns its exit code and stdout.
fn run(args: &[&str]) -> (i32, String) {
    let out = vramtrace().args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
    )
}

fn json(args: &[&str]) -> (i32, Value) {
    let (code, out) = run(args);
    (code, serde_json::from_str(&out).expect("one JSON document"))
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The base run, and run B: libraries loaded 0x1234000 further, two lines inserted above
/// `Model.step`, and `extra` when asked.
fn pair(dir: &Path, extra: bool) -> (std::path::PathBuf, std::path::PathBuf) {
    let a = write_run(
        dir,
        "a.vtrace",
        Variant {
            pid: 100,
            ..Variant::default()
        },
    );
    let b = write_run(
        dir,
        "b.vtrace",
        Variant {
            aslr: 0x123_4000,
            inserted_lines: 2,
            extra_leak: extra,
            pid: 200,
            rank: None,
        },
    );
    (a, b)
}

#[test]
fn moved_libraries_and_lines_give_an_empty_diff() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = pair(dir.path(), false);
    let (code, d) = json(&["diff", "--json", path(&a), path(&b)]);
    assert_eq!(code, 0);
    assert_eq!(d["verdict"]["regression"], false);
    let s = &d["sites"];
    assert_eq!(
        (
            &s["matched"],
            &s["only_in_a"],
            &s["only_in_b"],
            &s["changed"]
        ),
        (
            &Value::from(2),
            &Value::from(0),
            &Value::from(0),
            &Value::from(0)
        )
    );
    // Both Python lines moved by 2 and were matched by their offset in Model.step: a guess.
    assert_eq!(s["guessed"], 2);
    assert_eq!(d["files"][0]["lines"], "function-start");
    assert_eq!(d["steps"]["aligned"], true);
    assert_eq!(d["steps"]["first_difference"], Value::Null);
    assert_eq!(d["steps"]["rows"].as_array().unwrap().len(), STEPS as usize);
}

#[test]
fn the_planted_leak_is_the_only_difference() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = pair(dir.path(), true);
    let (code, d) = json(&["diff", "--json", path(&a), path(&b)]);
    assert_eq!(code, 1, "a regression");
    let s = &d["sites"];
    assert_eq!(
        (&s["changed"], &s["only_in_b"]),
        (&Value::from(1), &Value::from(1))
    );
    let leak = &s["list"][0];
    assert_eq!(leak["label"], "train.py:15 in Model.step");
    assert_eq!(leak["status"], "new");
    assert_eq!(leak["match"], "only-in-b");
    assert_eq!(leak["b"]["live_bytes"], 40 * MIB);
    assert_eq!(leak["b"]["live_count"], 10);
    assert_eq!(leak["b"]["allocations"], 10);
    assert_eq!(leak["b"]["growth"], 4.0 * MIB as f64);
    assert_eq!(leak["change"]["live_bytes"], 40 * MIB);
    let checks: Vec<(&str, bool)> = d["verdict"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["metric"].as_str().unwrap(),
                c["exceeded"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        checks,
        [
            ("live_bytes", false),
            ("peak_bytes", false),
            ("growth_per_step", true),
            ("orphans", false),
            ("orphan_bytes", false),
            ("failures", false),
            ("new_growth", true)
        ]
    );
    // The leak is a new steady growth: 10 rises of 4 MiB, above the floor.
    let new = &d["verdict"]["new_growth"];
    assert_eq!(new.as_array().unwrap().len(), 1);
    assert_eq!(
        (&new[0]["label"], &new[0]["rate"], &new[0]["regression"]),
        (
            &Value::from("train.py:15 in Model.step"),
            &Value::from(4.0 * MIB as f64),
            &Value::Bool(true)
        )
    );
    // Step N of A against step N of B: B holds 4 MiB more after each step; rows are named by
    // the step they are the start of, the first step begun at the first mark.
    let rows = d["steps"]["rows"].as_array().unwrap();
    assert_eq!(d["steps"]["first_difference"], 2);
    let steps: Vec<u64> = rows.iter().map(|r| r["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, (1..=STEPS).collect::<Vec<_>>());
    let changes: Vec<u64> = rows.iter().map(|r| r["change"].as_u64().unwrap()).collect();
    assert_eq!(changes, (0..STEPS).map(|k| k * 4 * MIB).collect::<Vec<_>>());

    // Thresholds decide the exit code: the new growth's floor among them.
    let lenient = ["diff", "--max-growth", "8MiB", "--min-new-growth", "8MiB"];
    let with = |more: &[&str]| {
        let mut args = lenient.to_vec();
        args.extend_from_slice(more);
        args.extend([path(&a), path(&b)]);
        run(&args).0
    };
    assert_eq!(with(&[]), 0);
    assert_eq!(with(&["--max-live", "32MiB"]), 1);
    assert_eq!(
        run(&["diff", "--max-growth", "8MiB", path(&a), path(&b)]).0,
        1
    );
    // Below the floor, the new growth is still a regression when it would fill the device
    // within the horizon: 1 GiB less the 45 MiB B held at its last step, at 4 MiB a step, is
    // full in 244.75 steps.
    assert_eq!(with(&["--device-memory", "1GiB"]), 1);
    let (_, d) = json(&[
        "diff",
        "--json",
        "--min-new-growth",
        "8MiB",
        "--device-memory",
        "1GiB",
        path(&a),
        path(&b),
    ]);
    let new = &d["verdict"]["new_growth"][0];
    assert_eq!(new["steps_to_full"], 244.75);
    assert_eq!(
        (&new["within_horizon"], &new["above_floor"]),
        (&Value::Bool(true), &Value::Bool(false))
    );
    assert_eq!(
        with(&[
            "--device-memory",
            "1GiB",
            "--horizon-steps",
            "200",
            "--horizon",
            "0s"
        ]),
        0
    );
    // B against A: the leak is gone, and that is no regression.
    let (code, d) = json(&["diff", "--json", path(&b), path(&a)]);
    assert_eq!(code, 0);
    assert_eq!(d["sites"]["list"][0]["status"], "gone");
    assert_eq!(d["sites"]["list"][0]["label"], "train.py:15 in Model.step");
}

/// The document, with the temporary directory replaced: its shape is the schema of
/// docs/report-json.md ("Diff").
#[test]
fn the_json_document() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = pair(dir.path(), true);
    let (code, out) = run(&["diff", "--json", path(&a), path(&b)]);
    assert_eq!(code, 1);
    let out = out.replace(path(dir.path()), "[dir]");
    insta::assert_snapshot!("diff_json", out);
}

#[test]
fn the_tables_say_what_changed() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = pair(dir.path(), true);
    let (code, out) = run(&["diff", path(&a), path(&b)]);
    assert_eq!(code, 1);
    for line in [
        "VERDICT  REGRESSION (exit 1): growth +4.0 MiB per step (limit 1.0 MiB per step)",
        "Call sites, view driver: 2 paired (2 by a guess), 0 only in A, 1 only in B; 2 unchanged, 1 \
         changed",
        "train.py:15 in Model.step",
        "first differs at step 2, made during step 1",
    ] {
        assert!(out.contains(line), "{line:?} missing from:\n{out}");
    }
}

#[test]
fn bad_inputs_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = pair(dir.path(), false);
    let err = |args: &[&str]| {
        let out = vramtrace().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty());
        String::from_utf8(out.stderr).unwrap()
    };
    assert!(err(&["diff", path(&a)]).starts_with("error: diff takes two runs"));
    let missing = dir.path().join("missing.vtrace");
    assert_eq!(
        err(&["diff", path(&a), path(&missing)]),
        format!(
            "error: {}: no such file or directory (os error 2)\n",
            missing.display()
        )
    );
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert_eq!(
        err(&["diff", path(&a), path(&empty)]),
        format!(
            "error: {}: no trace files (*.vtrace) in this directory\n",
            empty.display()
        )
    );
    assert!(err(&["diff", "--rank", "5", path(&a)]).starts_with("error: --rank and --pid"));
    assert!(err(&["diff", "--rank", "1", "--pid", "2", path(&a)]).starts_with("error: "));
    assert!(err(&["diff", "--max-live", "lots", path(&a), path(&a)]).starts_with("error: "));
}

/// Eight ranks of one job, rank 5 with the extra leak.
fn job(dir: &Path) {
    for rank in 0..8 {
        write_run(
            dir,
            &format!("rank{rank}.vtrace"),
            Variant {
                aslr: rank as u64 * 0x10_0000,
                extra_leak: rank == 5,
                pid: 1000 + rank as u32,
                rank: Some(rank),
                ..Variant::default()
            },
        );
    }
}

// Two jobs rank by rank, B's rank 1 trace cut short: the set has no verdict (exit 2), its first
// line names the cut trace, and rank 1's row is no "ok" (it said ok, whatever the trace held).
#[test]
fn a_pair_with_a_cut_trace_has_no_verdict_in_the_rank_by_rank_table() {
    let (x, y) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    job(x.path());
    job(y.path());
    let cut = y.path().join("rank1.vtrace");
    let bytes = std::fs::read(&cut).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let (code, shown) = run(&["diff", path(x.path()), path(y.path())]);
    assert_eq!(code, 2, "{shown}");
    let first = shown.lines().next().unwrap();
    assert!(
        first.starts_with("VERDICT  none (exit 2): a trace could not be compared in full: B (")
            && first.contains("rank1.vtrace) is cut short ("),
        "{first}"
    );
    let verdicts: Vec<&str> = shown
        .lines()
        .skip_while(|l| !l.starts_with("Rank by rank"))
        .skip(3)
        .take(8)
        .map(|l| l.trim_end().rsplit("   ").next().unwrap().trim())
        .collect();
    let mut want = vec!["ok"; 8];
    want[1] = "none: not whole";
    assert_eq!(verdicts, want, "{shown}");
}

#[test]
fn report_of_a_directory_names_the_odd_rank_first() {
    let dir = tempfile::tempdir().unwrap();
    job(dir.path());
    let (code, d) = json(&["report", "--json", path(dir.path())]);
    assert_eq!(code, 0);
    assert_eq!(d["schema"], "vramtrace-ranks/1");
    let ranks = d["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 8);
    assert_eq!(ranks[0]["rank"], 5);
    assert_eq!(ranks[0]["differs_in"], "live_bytes");
    assert_eq!(ranks[0]["live_bytes"], 50 * MIB);
    assert_eq!(ranks[0]["median"], (10 * MIB) as f64);
    assert!(ranks[1..].iter().all(|r| r["distance"] == 0.0));
    assert_eq!(d["reports"][0]["trace"]["rank"], 5);
    assert_eq!(d["reports"].as_array().unwrap().len(), 8);
    let (code, out) = run(&["report", path(dir.path())]);
    assert_eq!(code, 0);
    assert!(
        out.contains(
            "Ranks (8 traces): 7 of 8 traces grow alike: first cause +1.0 MiB/step at train.py:12 \
             in Model.step (libtorch_cuda.so) (where the allocator asked the driver for memory); \
             rank 5 differs most: live at end 50.0 MiB against a median of 10.0 MiB"
        ),
        "{out}"
    );
}

#[test]
fn one_rank_against_the_median_of_the_others() {
    let dir = tempfile::tempdir().unwrap();
    job(dir.path());
    let (code, d) = json(&["diff", "--json", "--rank", "5", path(dir.path())]);
    assert_eq!(code, 1);
    assert_eq!(d["a"]["path"], "median of 7 traces");
    assert_eq!(d["a"]["median_of"].as_array().unwrap().len(), 7);
    assert_eq!(d["b"]["rank"], 5);
    assert_eq!(d["ranks"][0]["rank"], 5);
    assert_eq!(d["sites"]["changed"], 1);
    assert_eq!(d["sites"]["list"][0]["label"], "train.py:13 in Model.step");
    assert_eq!(d["sites"]["list"][0]["status"], "new");
    assert!(d["verdict"]["notes"].as_array().unwrap().is_empty());
    let (code, d) = json(&["diff", "--json", "--pid", "1002", path(dir.path())]);
    assert_eq!(code, 0, "rank 2 is like the others");
    assert_eq!(d["sites"]["changed"], 0);
    // The verdict on rank 2 comes first; the odd rank is named under it, and the table follows.
    let odd = "7 of 8 traces grow alike: first cause +1.0 MiB/step at train.py:12 in Model.step \
               (libtorch_cuda.so) (where the allocator asked the driver for memory); rank 5 \
               differs most: live at end 50.0 MiB against a median of 10.0 MiB; its own \
               finding: steady growth at train.py:13 in Model.step (libtorch_cuda.so)";
    assert_eq!(
        d["verdict"]["notes"][0],
        format!("{odd}; `vramtrace diff --rank 5` compares it with the others")
    );
    let (code, out) = run(&["diff", "--rank", "2", path(dir.path())]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("VERDICT  no regression (exit 0)\n"),
        "{out}"
    );
    let verdict = 0;
    let table = out.find(&format!("\nRanks (8 traces): {odd}\n")).unwrap();
    assert!(verdict < table, "{out}");
}

#[test]
fn two_jobs_are_compared_rank_by_rank() {
    let (x, y) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    job(x.path());
    job(y.path());
    std::fs::remove_file(y.path().join("rank5.vtrace")).unwrap();
    write_run(
        y.path(),
        "rank5.vtrace",
        Variant {
            pid: 1005,
            rank: Some(5),
            ..Variant::default()
        },
    );
    let (code, d) = json(&["diff", "--json", path(x.path()), path(y.path())]);
    assert_eq!(code, 0, "rank 5 lost its leak: no regression");
    assert_eq!(d["schema"], "vramtrace-diff-set/1");
    let pairs = d["pairs"].as_array().unwrap();
    let changed: Vec<(i64, u64)> = pairs
        .iter()
        .map(|p| {
            (
                p["b"]["rank"].as_i64().unwrap(),
                p["sites"]["changed"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        changed,
        (0..8).map(|r| (r, u64::from(r == 5))).collect::<Vec<_>>()
    );
    let (code, _) = json(&["diff", "--json", path(y.path()), path(x.path())]);
    assert_eq!(code, 1, "the other way round, rank 5 regressed");
    // The text opens with the set's verdict, the exit code, and the first regressed pair's
    // reason (its line and rate); each pair's verdict below is its own, without an exit code (the seven pairs that did not regress said "exit 0").
    let (code, out) = run(&["diff", path(y.path()), path(x.path())]);
    assert_eq!(code, 1);
    assert!(
        out.starts_with(
            "VERDICT  REGRESSION (exit 1): 1 of 8 pairs (rank 5); rank 5: new steady growth \
             +4.0 MiB/step at train.py:13 in Model.step (libtorch_cuda.so): above 64.0 KiB\n"
        ),
        "{out}"
    );
    assert_eq!(
        out.matches("\nVERDICT  no regression\n").count(),
        7,
        "{out}"
    );
    assert_eq!(out.matches("(exit ").count(), 1, "{out}");
}

/// The fields of the table under `heading` (`## Diff`, `### SiteDiff`) in
/// docs/report-json.md, sorted (a row may name several: `` `a`, `b` ``).
fn documented(heading: &str) -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/report-json.md"
    ))
    .unwrap();
    let body = doc.split(&format!("\n{heading}\n")).nth(1).unwrap();
    let section = body.split("\n#").next().unwrap();
    let mut fields: Vec<String> = section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .flat_map(|l| {
            let cell = l.split(" |").next().unwrap_or("");
            cell.split(", ")
                .map(|f| f.trim_matches('`').to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    fields.sort();
    fields
}

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

#[test]
fn every_field_is_documented() {
    let dir = tempfile::tempdir().unwrap();
    job(dir.path());
    let (_, d) = json(&["diff", "--json", "--rank", "5", path(dir.path())]);
    // `ranks` comes with --rank only, `tensors` with two traces holding PyTorch's recorder
    // history (real ones, from `tests/fixtures/gpu/`).
    let gpu = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/gpu/");
    let (a, b) = (
        format!("{gpu}healthy_gpt-recorder.vtrace"),
        format!("{gpu}gpt_leaky-recorder.vtrace"),
    );
    let (_, t) = json(&["diff", "--json", &a, &b]);
    let mut all = keys(&d);
    all.extend(keys(&t));
    all.sort();
    all.dedup();
    assert_eq!(all, documented("## Diff"));
    assert_eq!(keys(&d["sites"]["list"][0]), documented("### SiteDiff"));
    assert_eq!(keys(&t["tensors"]), documented("### TensorList"));
    // `limits_verdict` comes with --fail-on.
    let (_, r) = json(&[
        "report",
        "--json",
        "--fail-on",
        "leak=1TiB",
        path(dir.path()),
    ]);
    assert_eq!(keys(&r), documented("## Ranks"));
    assert_eq!(keys(&r["ranks"][0]), documented("### RankRow"));
}

// `--max-growth` reads as in `check` and `report --fail-on growth=…`: a size per step
// (`4MiB/step`, or `4MiB`), exceeded when the growth is above it. Run A grows 1 MiB a step and
// B 5 MiB: B's growth is 4 MiB a step more, which `diff` measures against its limit as `report
// --fail-on` measures B's own 5 MiB.
#[test]
fn max_growth_is_a_size_per_step_as_in_check() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = pair(dir.path(), true);
    // B's new 4 MiB a step is also a new steady growth: its floor is raised out of the way.
    let growth_exceeded = |limit: &str| {
        let (code, d) = json(&[
            "diff",
            "--json",
            "--max-growth",
            limit,
            "--min-new-growth",
            "8MiB/step",
            path(&a),
            path(&b),
        ]);
        let check = (d["verdict"]["checks"].as_array().unwrap().iter())
            .find(|c| c["metric"] == "growth_per_step")
            .unwrap()
            .clone();
        assert_eq!(check["change"], 4.0 * MIB as f64);
        (code, check["exceeded"].as_bool().unwrap())
    };
    assert_eq!(growth_exceeded("4MiB/step"), (0, false));
    assert_eq!(growth_exceeded("4MiB"), (0, false));
    assert_eq!(growth_exceeded("3MiB/step"), (1, true));
    let fail_on = |limit: &str| {
        let (code, _) = run(&["report", "--fail-on", limit, path(&b)]);
        code
    };
    assert_eq!(fail_on("growth=5MiB/step"), 0);
    assert_eq!(fail_on("growth=4MiB/step"), 1);
    let out = vramtrace()
        .args(["diff", "--max-growth", "4MiB/s", path(&a), path(&b)])
        .assert()
        .code(2);
    assert_eq!(
        String::from_utf8_lossy(&out.get_output().stderr),
        "error: invalid value '4MiB/s' for '--max-growth <SIZE/step>': not a growth per step \
         (examples: 1MiB/step, 512KiB) (see --help)\n"
    );
    // --max-orphans counts orphans, as in `check`; their memory is --max-orphan-bytes.
    let out = vramtrace()
        .args(["diff", "--max-orphans", "64MiB", path(&a), path(&b)])
        .assert()
        .code(2);
    assert!(String::from_utf8_lossy(&out.get_output().stderr)
        .contains("not a number of orphans (for the memory they hold, use --max-orphan-bytes)"));
}

// A trace cut short gets no verdict: the two healthy runs, B cut at half its bytes, exit 2
// (where the whole pair exits 0), the verdict line and the error say which trace and why, and
// the document carries its gaps; the same when B had the extra leak (whole: exit 1).
#[test]
fn a_cut_trace_gets_no_verdict() {
    let dir = tempfile::tempdir().unwrap();
    for extra in [false, true] {
        let (a, b) = pair(dir.path(), extra);
        let bytes = std::fs::read(&b).unwrap();
        let cut = dir.path().join(format!("cut-{extra}.vtrace"));
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
        assert_eq!(run(&["diff", path(&a), path(&b)]).0, i32::from(extra));

        let out = vramtrace()
            .args(["diff", path(&a), path(&cut)])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let stdout = String::from_utf8(out.stdout).unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        let verdict = stdout
            .lines()
            .find(|l| l.starts_with("VERDICT"))
            .unwrap_or_else(|| panic!("{stdout}"));
        let gap = format!("B ({}) is cut short (", cut.display());
        assert!(
            verdict.starts_with(&format!("VERDICT  none (exit 2): {gap}")),
            "{verdict}"
        );
        assert!(
            stderr.starts_with(&format!("error: could not compare: {gap}")),
            "{stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");

        let (code, d) = json(&["diff", "--json", path(&a), path(&cut)]);
        assert_eq!(code, 2);
        assert!(d["a"].get("gaps").is_none());
        let gaps = d["b"]["gaps"].as_array().unwrap();
        assert!(
            gaps[0].as_str().unwrap().starts_with("is cut short ("),
            "{gaps:?}"
        );
        // No verdict is no "false": a script reading it cannot pass what was not compared.
        assert_eq!(d["verdict"]["regression"], serde_json::Value::Null);
        // The whole pair has its verdict.
        let (code, d) = json(&["diff", "--json", path(&a), path(&b)]);
        assert_eq!(code, i32::from(extra));
        assert_eq!(d["verdict"]["regression"], extra);
    }
}

// With two traces, the median of the others is one trace: the comparison says so.
#[test]
fn a_median_of_one_trace_is_said_to_be_that_trace() {
    let dir = tempfile::tempdir().unwrap();
    job(dir.path());
    let (a, b) = (
        dir.path().join("rank0.vtrace"),
        dir.path().join("rank5.vtrace"),
    );
    let (code, d) = json(&["diff", "--json", "--rank", "5", path(&a), path(&b)]);
    assert_eq!(code, 1);
    assert_eq!(d["a"]["path"], "median of 1 trace");
    let note = format!(
        "the median of one trace is that trace: this compares rank 5 with {} alone, and which of \
         two traces differs most says nothing; give the job's other traces",
        a.display()
    );
    assert!(
        d["verdict"]["notes"]
            .as_array()
            .unwrap()
            .contains(&note.into()),
        "{}",
        d["verdict"]
    );
    let (_, d) = json(&["diff", "--json", "--rank", "5", path(dir.path())]);
    let notes = d["verdict"]["notes"].as_array().unwrap();
    assert!(!notes
        .iter()
        .any(|n| n.as_str().unwrap().contains("median of one")));
}
