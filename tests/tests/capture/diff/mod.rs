//! `vramtrace diff` and `vramtrace report` of many traces on traced runs of the stand-ins
//! (issue 19): [`train`] compares runs of wl_train (at other load addresses, rebuilt, with one
//! more leak, with a leak fixed, eight ranks with one odd); [`python`] compares two versions of a
//! Python program whose lines moved. Sites are checked by the source lines their stacks name
//! (`line_of` on the sources), never by addresses.

mod python;
mod train;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use serde_json::Value;
use vramtrace_tests::traced::{text, vramtrace_command};

/// Runs `vramtrace diff --json ARGS…`: its exit code and document.
/// `vramtrace diff A B` as text: its exit code and stdout.
fn diff_text(a: &Path, b: &Path) -> (Option<i32>, String) {
    let out = vramtrace_command()
        .arg("diff")
        .args([a, b])
        .output()
        .expect("running vramtrace");
    (out.status.code(), text(&out.stdout))
}

fn diff_json<I, S>(args: I) -> (i32, Value)
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let out = vramtrace_command()
        .arg("diff")
        .arg("--json")
        .args(args)
        .output()
        .expect("running vramtrace");
    let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "vramtrace diff printed no JSON ({e}); stderr:\n{}",
            text(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), doc)
}

/// The `(function, line)` of the native frames of a site's stack in `src`, and of its Python
/// frames when `src` is a Python file.
fn frames_in(site: &Value, src: &Path) -> Vec<(String, u64)> {
    let file = src.display().to_string();
    site["frames"]
        .as_array()
        .expect("a stack")
        .iter()
        .filter(|f| f["file"].as_str() == Some(&*file))
        .map(|f| {
            (
                f["function"].as_str().unwrap_or("?").to_string(),
                f["line"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// The one trace a run wrote into `dir`.
fn the_trace(dir: &Path) -> PathBuf {
    let traces = vramtrace_tests::traced::trace_files(dir);
    assert_eq!(traces.len(), 1, "{traces:?}");
    traces[0].clone()
}

/// A subdirectory of `dir`, made.
fn subdir(dir: &Path, name: &str) -> PathBuf {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}
