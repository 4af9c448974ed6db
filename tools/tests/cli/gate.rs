//! `check` and `report --fail-on` never pass what they did not see: a trace cut short or that
//! lost events, a process that ran untraced (its trace could not be written, tracing was off),
//! a trace gone before it was read, a run the tracer never joined. Each is named and the exit is
//! 2. The program here is a shell script playing the tracer's part: it copies a known trace to
//! the output path and writes the status lines the library writes (`session::announce`).

use std::path::{Path, PathBuf};

use vramtrace_collector::format::{Record, Stats};

use crate::support::*;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The stderr of `assert`, without the loader's complaint about the stand-in library (an empty
/// file: it loads nothing).
fn stderr(assert: &assert_cmd::assert::Assert) -> String {
    text(&assert.get_output().stderr)
        .lines()
        .filter(|l| !l.starts_with("ERROR: ld.so:"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The workload without its end record: what a killed process leaves.
fn cut(dir: &Path) -> PathBuf {
    let records: Vec<Record> = (workload().into_iter())
        .filter(|r| !matches!(r, Record::End(_)))
        .collect();
    write_records(dir, "cut.vtrace", &records)
}

/// The workload, its tracer saying it dropped 5 events after the last one written.
fn lossy(dir: &Path) -> PathBuf {
    let records: Vec<Record> = (workload().into_iter())
        .map(|r| match r {
            Record::Stats(s) => Record::Stats(Stats { dropped: 5, ..s }),
            Record::End(mut e) => {
                e.stats.dropped = 5;
                Record::End(e)
            }
            other => other,
        })
        .collect();
    write_records(dir, "lossy.vtrace", &records)
}

// With --json the limits are in the document, with the verdict the exit code gives: a CI job
// reads them without parsing the text on stderr.
#[test]
fn report_json_holds_the_limits_and_their_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let (whole, _) = write_workload(dir.path(), "whole.vtrace");
    let limits = |path: &Path, fail_on: &str, code: i32| {
        let out = vramtrace()
            .args(["report", "--json", "--fail-on", fail_on])
            .arg(path)
            .assert()
            .code(code);
        let doc: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
        doc["limits"].clone()
    };
    let ok = limits(&whole, "leak=1GiB", 0);
    assert_eq!(ok["verdict"], "ok");
    assert_eq!(ok["limits"][0]["limit"], "leak");
    assert_eq!(ok["limits"][0]["max"], 1u64 << 30);
    assert_eq!(ok["limits"][0]["exceeded"], false);
    assert_eq!(ok["limits"][0]["verdict"], "ok");
    assert_eq!(ok["not_checked"], serde_json::json!([]));
    let failed = limits(&whole, "leak", 1);
    assert_eq!(failed["verdict"], "failed");
    assert_eq!(
        (
            failed["limits"][0]["max"].as_u64(),
            &failed["limits"][0]["exceeded"]
        ),
        (Some(0), &serde_json::json!(true))
    );
    assert_eq!(failed["limits"][0]["verdict"], "failed");
    let cut = cut(dir.path());
    // Not exceeded in what could be read is not ok: `--` in the text.
    let partly = limits(&cut, "leak=1GiB", 2);
    assert_eq!(partly["limits"][0]["exceeded"], false);
    assert_eq!(partly["limits"][0]["verdict"], "not-checked");
    let cut = limits(&cut, "leak", 2);
    assert_eq!(cut["verdict"], "not-checked");
    assert!(
        cut["not_checked"][0]
            .as_str()
            .unwrap()
            .starts_with("is cut short"),
        "{cut}"
    );
    // Without --fail-on there are none.
    let out = vramtrace()
        .args(["report", "--json"])
        .arg(&whole)
        .assert()
        .success();
    let doc: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert!(doc.get("limits").is_none());
    // A directory's document says the verdict of all its traces together, as the exit code.
    let job = dir.path().join("job");
    std::fs::create_dir(&job).unwrap();
    write_workload(&job, "rank0.vtrace");
    write_workload(&job, "rank1.vtrace");
    let of_job = |code: i32| {
        let out = vramtrace()
            .args(["report", "--json", "--fail-on", "leak=1GiB"])
            .arg(&job)
            .assert()
            .code(code);
        let doc: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
        doc["limits_verdict"].clone()
    };
    assert_eq!(of_job(0), "ok");
    std::fs::write(job.join("rank2.vtrace"), b"").unwrap();
    assert_eq!(of_job(2), "not-checked");
}

#[test]
fn report_fail_on_names_a_cut_or_lossy_trace_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let (whole, _) = write_workload(dir.path(), "whole.vtrace");
    let fail_on = |path: &Path| {
        vramtrace()
            .args(["report", "--fail-on", "leak=1GiB"])
            .arg(path)
            .assert()
    };
    fail_on(&whole).success();
    let cut = cut(dir.path());
    let out = fail_on(&cut).code(2);
    let err = text(&out.get_output().stderr);
    let why = "is cut short (no end record: the trace stops at byte";
    assert!(
        err.contains(&format!("  not checked: the trace {why}")),
        "{err}"
    );
    assert!(
        err.ends_with(&format!(
            "error: could not check: {} {why} {} (process killed or still running))\n",
            cut.display(),
            std::fs::metadata(&cut).unwrap().len()
        )),
        "{err}"
    );
    let lossy = lossy(dir.path());
    let out = fail_on(&lossy).code(2);
    assert!(
        text(&out.get_output().stderr).ends_with(&format!(
            "error: could not check: {} is missing 5 events the tracer lost\n",
            lossy.display()
        )),
        "{}",
        text(&out.get_output().stderr)
    );
}

struct Setup {
    dir: tempfile::TempDir,
    lib: PathBuf,
    out: PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libvramtrace.so");
    std::fs::write(&lib, b"").unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    Setup {
        lib: std::fs::canonicalize(lib).unwrap(),
        dir,
        out,
    }
}

/// `vramtrace COMMAND --lib <stand-in> -o <out>/t-%p.vtrace -- sh -c SCRIPT sh ARGS`.
fn traced(s: &Setup, command: &str, script: &str, args: &[&Path]) -> assert_cmd::assert::Assert {
    vramtrace()
        .env_remove("LD_PRELOAD")
        .env_remove("VRAMTRACE_DISABLE")
        .arg(command)
        .arg("--lib")
        .arg(&s.lib)
        .arg("-o")
        .arg(s.out.join("t-%p.vtrace"))
        .args(["--", "sh", "-c", script, "sh"])
        .args(args)
        .assert()
}

/// What a process whose trace could not be created says.
const UNTRACED: &str = r#"printf 'tracing\nuntraced cannot write the trace: cannot create %s/t-%s.vtrace: Read-only file system (os error 30)\n' "${VRAMTRACE_OUTPUT%/*}" $$ >> "$VRAMTRACE_RUN_STATUS/$$""#;

#[test]
fn a_process_that_ran_untraced_is_never_ok() {
    let s = setup();
    let assert = traced(&s, "check", UNTRACED, &[]).code(2);
    let err = stderr(&assert);
    let created = format!(
        " ran untraced: cannot write the trace: cannot create {}/t-",
        s.out.display()
    );
    assert!(
        err.starts_with("error: could not check: pid ")
            && err.contains(&created)
            && err.ends_with(".vtrace: Read-only file system (os error 30)\n")
            && err.lines().count() == 1,
        "{err}"
    );
    // `run` says the same, not "the program made no GPU memory call".
    let assert = traced(&s, "run", UNTRACED, &[]).success();
    let err = stderr(&assert);
    assert!(err.starts_with("vramtrace: pid "), "{err}");
    assert!(
        err.trim_end()
            .ends_with(".vtrace: Read-only file system (os error 30)"),
        "{err}"
    );
    assert!(!err.contains("no GPU memory call"), "{err}");

    // Beside a trace that passes, the untraced process still stops the gate; the limits of
    // the trace it did see are printed, then the one thing not checked.
    let script = format!(
        r#"t="${{VRAMTRACE_OUTPUT%/*}}/t-$$.vtrace"; cp "$1" "$t"; printf 'tracing\ntrace %s\n' "$t" > "$VRAMTRACE_RUN_STATUS/$$"; sh -c '{}'"#,
        UNTRACED.replace('\'', r"'\''")
    );
    let (sample, _) = write_workload(s.dir.path(), "sample.vtrace");
    let assert = traced(&s, "check", &script, &[&sample]).code(2);
    let err = stderr(&assert);
    assert!(err.contains("  ok    growth (alert)"), "{err}");
    assert!(
        err.lines()
            .last()
            .unwrap()
            .starts_with("error: could not check: "),
        "{err}"
    );
}

/// A process the command left running is waited for a while: one that ends then is checked, one
/// still running is not whole and never ok (`sh -c 'train & exit 0'`).
#[test]
fn a_process_left_running_is_waited_for_and_never_ok_while_it_runs() {
    let s = setup();
    let (sample, _) = write_workload(s.dir.path(), "sample.vtrace");
    let late = r#"sleep 1; t="${VRAMTRACE_OUTPUT%/*}/t-$$.vtrace"; cp "$0" "$t"; printf "tracing\ntrace %s\n" "$t" > "$VRAMTRACE_RUN_STATUS/$$""#;
    let script = format!("sh -c '{late}' \"$1\" & exit 0");
    let assert = traced(&s, "check", &script, &[&sample]).success();
    let err = stderr(&assert);
    // The processes left running share stderr (the stand-in library makes ld.so warn in them),
    // so the line is looked for among the others.
    assert!(
        err.lines().any(
            |l| l.starts_with("vramtrace: the command exited and left pid ")
                && l.ends_with("waiting up to 5 s for it")
        ) && err.contains("  ok    growth (alert)")
            && err.contains("ok: 1 trace within the limits"),
        "{err}"
    );
    let assert = traced(&s, "check", "sleep 7 & exit 0", &[]).code(2);
    let err = stderr(&assert);
    let last = err.lines().last().unwrap();
    assert!(
        last.starts_with("error: could not check: pid ")
            && last.contains(" (sleep) still running after the command exited: "),
        "{err}"
    );
    // `run` says it too.
    let assert = traced(&s, "run", "sleep 7 & exit 0", &[]).success();
    let err = stderr(&assert);
    assert!(
        err.contains(" (sleep) still running after the command exited: "),
        "{err}"
    );
}

#[test]
fn disabled_gone_and_cut_traces_are_never_ok() {
    let s = setup();
    let assert = traced(
        &s,
        "check",
        r#"echo disabled > "$VRAMTRACE_RUN_STATUS/$$""#,
        &[],
    )
    .code(2);
    let err = stderr(&assert);
    assert!(
        err.starts_with("error: could not check: pid ")
            && err.ends_with(" ran untraced: VRAMTRACE_DISABLE is set\n"),
        "{err}"
    );

    // A trace the process said it created, gone before the run ended.
    let gone = r#"printf 'tracing\ntrace %s/t-%s.vtrace\n' "${VRAMTRACE_OUTPUT%/*}" $$ > "$VRAMTRACE_RUN_STATUS/$$""#;
    let assert = traced(&s, "check", gone, &[]).code(2);
    let err = stderr(&assert);
    assert!(
        err.ends_with(".vtrace is gone (moved or deleted while the program ran)\n"),
        "{err}"
    );

    // A cut trace: its limits are measured, and it is not checked in full.
    let cut = cut(s.dir.path());
    let copy = r#"t="${VRAMTRACE_OUTPUT%/*}/t-$$.vtrace"; cp "$1" "$t"; printf 'tracing\ntrace %s\n' "$t" > "$VRAMTRACE_RUN_STATUS/$$""#;
    let assert = traced(&s, "check", copy, &[&cut]).code(2);
    let err = stderr(&assert);
    // Not exceeded in what could be read is not "ok".
    assert!(err.contains("  --    growth (alert)"), "{err}");
    assert!(err.contains(", in what could be read\n"), "{err}");
    assert!(!err.contains("  ok  "), "{err}");
    assert!(
        err.contains("  not checked: the trace is cut short (no end record"),
        "{err}"
    );
    assert!(!err.contains("vramtrace check: ok"), "{err}");
    // The whole trace passes: the same run, the end record kept.
    let (whole, _) = write_workload(s.dir.path(), "whole.vtrace");
    let assert = traced(&s, "check", copy, &[&whole]).success();
    let err = stderr(&assert);
    assert!(
        err.ends_with("vramtrace check: ok: 1 trace within the limits\n"),
        "{err}"
    );
}

// A driver function the tracer handed out without its wrapper (an ABI version it does not
// wrap): the program may have allocated through it unseen. The report lists it, and no gate
// passes the trace.
#[test]
fn a_driver_function_handed_out_untraced_is_never_ok() {
    let dir = tempfile::tempdir().unwrap();
    let mut records = workload();
    let end = records.len() - 1;
    records.insert(end, lookup());
    let path = write_records(dir.path(), "lookup.vtrace", &records);
    let out = vramtrace()
        .args(["report", "--json"])
        .arg(&path)
        .assert()
        .success();
    let r: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(r["lookups"]["total"], 1);
    assert_eq!(r["lookups"]["list"][0]["symbol"], "cuMemAlloc");
    let gate = vramtrace()
        .args(["report", "--fail-on", "leak=1GiB"])
        .arg(&path)
        .assert()
        .code(2);
    assert!(stderr(&gate).ends_with(&format!(
        "error: could not check: {} handed out 1 driver entry point untraced (cuMemAlloc of CUDA \
         11020): calls through them are not in the trace\n",
        path.display()
    )));
}
