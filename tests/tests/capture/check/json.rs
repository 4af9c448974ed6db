//! `vramtrace check --json`: the gate's verdict as a document a CI job reads, with the numbers
//! its lines on stderr print, written whatever the verdict — and a file that exists left alone
//! before the program runs.

use serde_json::{json, Value};

use vramtrace_tests::trace::Trace;
use vramtrace_tests::traced::{text, trace_files};
use vramtrace_tests::workload;

use super::{check, check_command, only_trace};

fn document(path: &std::path::Path) -> Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).expect("check --json writes JSON")
}

// wl_train leaks 1 MiB a step (20 MiB at exit): the document's verdict is the exit code's, and
// each limit says what stderr says of it.
captest!(check_json_says_what_the_gate_said, |dir| {
    let json_path = dir.join("check.json");
    let json_arg = json_path.to_str().unwrap();
    let out = check(
        dir,
        &["--max-leak", "1MiB", "--json", json_arg],
        workload("wl_train"),
        &[],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let trace = only_trace(dir);
    let pid = Trace::load(&trace).header.pid;
    let d = document(&json_path);
    assert_eq!(d["schema"], "vramtrace-check/1");
    assert_eq!(
        (&d["verdict"], &d["exit_code"], &d["program_exit_code"]),
        (&json!("failed"), &json!(1), &json!(0))
    );
    assert_eq!((&d["not_checked"], &d["error"]), (&json!([]), &Value::Null));
    let t = &d["traces"][0];
    assert_eq!(d["traces"].as_array().map(Vec::len), Some(1));
    assert_eq!(t["trace"], trace.to_str().unwrap());
    assert_eq!((&t["pid"], &t["verdict"]), (&json!(pid), &json!("failed")));
    let limits: Vec<(&str, &Value, &str)> = (t["limits"].as_array().unwrap().iter())
        .map(|l| {
            (
                l["limit"].as_str().unwrap(),
                &l["max"],
                l["verdict"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        limits,
        [
            ("growth", &Value::Null, "failed"),
            ("leak", &json!(1048576), "failed")
        ]
    );
    for l in t["limits"].as_array().unwrap() {
        let found = l["found"].as_str().unwrap();
        assert!(err.contains(&format!(" {found}")), "{found}\n{err}");
    }
    assert_eq!(
        t["limits"][1]["found"],
        "20.0 MiB live at the end (20971520 B in 20 objects), limit 1.0 MiB (1048576 B)"
    );
    assert_eq!(
        t["notes"],
        json!([
            "1 orphan, holding 0 B of device memory: 1 registration whose buffer is gone \
                (4.0 MiB registered); not a limit of this check (--max-orphans 0 makes it one)"
        ])
    );

    // The same name again: refused before the program runs (no trace), the file as it was.
    let before = std::fs::read(&json_path).unwrap();
    let again = dir.join("again");
    std::fs::create_dir(&again).unwrap();
    let out = check(&again, &["--json", json_arg], workload("wl_train"), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        format!("error: {json_arg} already exists and is left alone; --force replaces it\n")
    );
    assert!(out.stdout.is_empty(), "the program ran");
    assert!(trace_files(&again).is_empty());
    assert_eq!(std::fs::read(&json_path).unwrap(), before);

    // --force replaces it: the fixed workload passes.
    let out = check(
        &again,
        &["--json", json_arg, "--force"],
        workload("wl_train"),
        &["--fix-leak"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let d = document(&json_path);
    assert_eq!((&d["verdict"], &d["exit_code"]), (&json!("ok"), &json!(0)));
    assert_eq!(d["traces"][0]["limits"][0]["verdict"], "ok");
});

// What could not be looked at is no "ok" in the document either: a program run untraced is
// `not-checked`, exit 2, with the reason; a program that failed is `program-failed`, its code.
captest!(check_json_never_says_ok_for_what_it_did_not_see, |dir| {
    let json_path = dir.join("untraced.json");
    let out = check_command(
        dir,
        &["--json", json_path.to_str().unwrap()],
        workload("wl_train"),
        &[],
    )
    .env("VRAMTRACE_DISABLE", "1")
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let d = document(&json_path);
    assert_eq!(
        (&d["verdict"], &d["exit_code"], &d["traces"]),
        (&json!("not-checked"), &json!(2), &json!([]))
    );
    let why = d["not_checked"][0].as_str().unwrap();
    assert!(
        why.ends_with(" ran untraced: VRAMTRACE_DISABLE is set"),
        "{why}"
    );
    assert_eq!(d["error"], format!("could not check: {why}"));

    let json_path = dir.join("failed.json");
    let out = check(
        dir,
        &["--json", json_path.to_str().unwrap()],
        "sh",
        &["-c", "exit 3"],
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let d = document(&json_path);
    assert_eq!(
        (&d["verdict"], &d["exit_code"], &d["program_exit_code"]),
        (&json!("program-failed"), &json!(3), &json!(3))
    );

    // A program that cannot be started fails as a shell and `run` say it: 127.
    let json_path = dir.join("missing.json");
    let missing = dir.join("no-such-program");
    let out = check(dir, &["--json", json_path.to_str().unwrap()], &missing, &[]);
    assert_eq!(out.status.code(), Some(127), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        format!(
            "error: cannot run {}: no such file or directory (os error 2)\n",
            missing.display()
        )
    );
    let d = document(&json_path);
    assert_eq!(
        (&d["verdict"], &d["exit_code"], &d["program_exit_code"]),
        (&json!("program-failed"), &json!(127), &json!(127))
    );
});

// A --json name the program's tracer took while it ran (a segment of its own trace): left
// alone, even with --force, which replaces only what was there when the check began; the check
// says so and does not pass.
captest!(
    check_json_never_replaces_what_appeared_while_it_ran,
    |dir| {
        let segment = dir.join("t.seg2.vtrace");
        let out = vramtrace_tests::traced::vramtrace_command()
            .arg("check")
            .args(["-o", dir.join("t.vtrace").to_str().unwrap()])
            .args(["--segment-bytes", "1MiB", "--max-bytes", "0"])
            .args(["--json", segment.to_str().unwrap(), "--force"])
            .arg("--")
            .arg(workload("wl_soak"))
            .args(["2000", "500", "0"])
            .env(
                "LD_LIBRARY_PATH",
                vramtrace_tests::standin_ld_library_path(),
            )
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.ends_with(&format!(
                "error: {} appeared while it was being written, and is left alone; choose another \
             name\n",
                segment.display()
            )),
            "{err}"
        );
        // Still the trace's segment.
        let report =
            crate::vramtrace_json(["report".as_ref(), "--json".as_ref(), segment.as_os_str()]);
        assert!(report["reading"]["segments"]["last_there"].as_u64() >= Some(2));
    }
);
