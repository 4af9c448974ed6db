//! Two versions of a Python training script, traced: the second has three lines inserted at the
//! top (every line below moves down by 3) and one leaking line added in its step function. The
//! script allocates through `ctypes.PyDLL` (the GIL stays held, so each call has its own Python
//! stack); all its calls reach the runtime stand-in through one native stack, so its sites are
//! split by Python line.

use std::path::{Path, PathBuf};

use serde_json::Value;
use vramtrace_tests::source::line_of;
use vramtrace_tests::traced::{text, traced_program};

use super::{diff_json, frames_in, subdir, the_trace};
use crate::MIB;

const SCRIPT: &str = r#"import ctypes
import sys
# INSERTED
runtime = ctypes.PyDLL("libcudart.so.13")
runtime.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
runtime.cudaMalloc.restype = ctypes.c_int
runtime.cudaFree.argtypes = [ctypes.c_void_p]
runtime.cudaFree.restype = ctypes.c_int
kept = []


def step():
    p = ctypes.c_void_p()
    rc = runtime.cudaMalloc(ctypes.byref(p), 256 << 10)  # the scratch buffer
    rc |= runtime.cudaFree(p)
    rc |= runtime.cudaMalloc(ctypes.byref(p), 1 << 20)  # the history
    kept.append(p.value)
    # LEAK
    return rc


weights = ctypes.c_void_p()
rc = runtime.cudaMalloc(ctypes.byref(weights), 8 << 20)  # the weights
for i in range(20):
    rc |= step()
sys.exit(rc)
"#;

const INSERTED: &str = "import os\nimport math\nimport time";
const LEAK: &str = "    q = ctypes.c_void_p()\n    rc |= runtime.cudaMalloc(ctypes.byref(q), 4 << 20)  # the leak\n    kept.append(q.value)";

/// Version 1 of the script, or version 2 (the lines inserted and the leak).
fn version(v: u32) -> String {
    match v {
        1 => SCRIPT.to_string(),
        _ => SCRIPT
            .replace("# INSERTED", INSERTED)
            .replace("    # LEAK", LEAK),
    }
}

/// Writes version `v` of the script to `script`, runs it traced (the trace in `traces`), and
/// returns the trace.
fn run_at(script: &Path, v: u32, traces: &Path) -> PathBuf {
    std::fs::write(script, version(v)).unwrap();
    let out = traced_program("python3", traces).arg(script).output();
    let out = out.expect("running python3 (required by this test)");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    the_trace(traces)
}

/// Writes version `v` to `dir/v<v>/train.py`, runs it traced, and returns the script and its
/// trace.
fn run_version(dir: &Path, v: u32) -> (PathBuf, PathBuf) {
    let d = subdir(dir, &format!("v{v}"));
    let script = d.join("train.py");
    let trace = run_at(&script, v, &subdir(&d, "traces"));
    (script, trace)
}

fn labels(d: &Value) -> Vec<(String, String)> {
    (d["sites"]["list"].as_array().unwrap().iter())
        .map(|s| {
            (
                s["status"].as_str().unwrap().into(),
                s["label"].as_str().unwrap().into(),
            )
        })
        .collect()
}

// With both sources readable, every line of version 1 is found in version 2 by its text; the
// one new site is the leak, at its line, 20 × 4 MiB at 4 MiB per step — but the script marks
// no steps, so growth is per second and not checked; live memory is (80 MiB > 64 MiB: exit 1).
// The leak line is the first suspect too.
captest!(
    moved_python_lines_are_matched_and_the_new_line_is_the_leak,
    |dir| {
        let (v1, a) = run_version(dir, 1);
        let (v2, b) = run_version(dir, 2);
        let (code, d) = diff_json([&a, &b]);
        assert_eq!(code, 1, "{:?}", labels(&d));
        let s = &d["sites"];
        assert_eq!(s["changed"], 1, "{:?}", labels(&d));
        assert_eq!(
            (&s["only_in_a"], &s["only_in_b"]),
            (&Value::from(0), &Value::from(1))
        );
        let leak_line = line_of(&v2, "# the leak");
        let leak = &s["list"][0];
        assert_eq!(leak["label"], format!("train.py:{leak_line} in step"));
        assert_eq!(leak["status"], "new");
        assert_eq!(leak["b"]["live_bytes"], 80 * MIB);
        assert_eq!(leak["b"]["allocations"], 20);
        assert_eq!(
            frames_in(leak, &v2)[0],
            ("step".to_string(), u64::from(leak_line))
        );
        // The other lines moved by 3 and were matched by the text of both versions.
        let pair = (d["files"].as_array().unwrap().iter())
            .find(|f| f["b"] == v2.display().to_string())
            .expect("the two scripts paired");
        assert_eq!(pair["a"], v1.display().to_string());
        assert_eq!(
            (&pair["paired_by"], &pair["lines"]),
            (&Value::from("same-name"), &Value::from("source-text"))
        );
        assert_eq!(
            (&pair["added"], &pair["removed"]),
            (&Value::from(6), &Value::from(0))
        );
        assert_eq!(s["guessed"], s["matched"], "every Python line moved");
        let first = &d["suspects"][0];
        assert_eq!(
            (&first["line"], &first["in_loop"]),
            (&Value::from(leak_line), &Value::Bool(false))
        );
        assert!(first["text"].as_str().unwrap().ends_with("# the leak"));
    }
);

// Without the sources (both removed), lines are matched by their offset from the start of
// their function where the function moved whole (`step`), and the module's own line (which did
// not move whole) as the one line of its function on that native stack; the leak is still the
// one new site.
captest!(
    without_sources_moved_functions_match_by_their_start,
    |dir| {
        let (v1, a) = run_version(dir, 1);
        let (v2, b) = run_version(dir, 2);
        std::fs::remove_file(&v1).unwrap();
        std::fs::remove_file(&v2).unwrap();
        let (code, d) = diff_json([&a, &b]);
        assert_eq!(code, 1);
        let s = &d["sites"];
        assert_eq!(
            (&s["changed"], &s["only_in_a"], &s["only_in_b"]),
            (&Value::from(1), &Value::from(0), &Value::from(1)),
            "{:?}",
            labels(&d)
        );
        assert_eq!(d["files"][0]["lines"], "function-start");
        assert_eq!(d["suspects"], Value::Array(Vec::new()));
        let hows: Vec<&str> = (s["list"].as_array().unwrap().iter())
            .map(|x| x["match"].as_str().unwrap())
            .collect();
        assert_eq!(hows, ["only-in-b"]);
        assert_eq!(
            s["guessed"], 3,
            "scratch and history by their function's start, weights by function"
        );
    }
);

// One script edited in place between the runs: its recorded path now holds version 2 only, which
// does not fit run A (its functions start elsewhere), so A's lines are matched by their function's
// start; with a copy of version 1 under --source-dir, each run gets the version that fits it
// (the copy does not fit run B) and lines are matched by their text.
captest!(each_run_reads_the_version_of_its_file_that_fits_it, |dir| {
    let job = subdir(dir, "job");
    let script = job.join("train.py");
    let a = run_at(&script, 1, &subdir(dir, "a"));
    let old = subdir(dir, "old");
    std::fs::write(old.join("train.py"), version(1)).unwrap();
    let b = run_at(&script, 2, &subdir(dir, "b"));
    let (code, d) = diff_json([&a, &b]);
    assert_eq!(code, 1);
    let pair = &d["files"][0];
    assert_eq!(
        (&pair["lines"], &pair["a_source"]),
        (&Value::from("function-start"), &Value::Null)
    );
    assert_eq!(d["sites"]["changed"], 1, "{:?}", labels(&d));
    let (code, d) = diff_json([
        std::ffi::OsStr::new("--source-dir"),
        old.as_os_str(),
        a.as_os_str(),
        b.as_os_str(),
    ]);
    assert_eq!(code, 1);
    let pair = &d["files"][0];
    assert_eq!(pair["lines"], "source-text");
    assert_eq!(pair["a_source"], old.join("train.py").display().to_string());
    assert_eq!(pair["b_source"], script.display().to_string());
    assert_eq!(
        (&pair["added"], &d["sites"]["changed"]),
        (&Value::from(6), &Value::from(1))
    );
    let leak_line = line_of(&script, "# the leak");
    assert_eq!(d["suspects"][0]["line"], leak_line);
});
