//! The `vramtrace` wheel end to end (docs/python.md): installed into a fresh virtual environment,
//! its own command traces a stand-in workload from a directory far from the repository, with the
//! library it installed, and its report has the planted numbers; the Python module marks steps
//! under the tracer and does nothing without it, and its `load()` says it needs pyarrow when the
//! environment lacks it; uninstalling removes both files.
//!
//! Ignored by default: the wheel is built by `python/build_wheel.sh` (a release build and
//! maturin), which `cargo test` does not run. CI builds it and runs
//! `VRAMTRACE_WHEEL=target/wheels/vramtrace-….whl cargo test -p vramtrace-tests --test wheel --
//! --ignored` (.ci/run). Needs `python3` with `venv` (Debian: python3-venv).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use vramtrace_tests::traced::{clean_command, succeed, text, trace_files};
use vramtrace_tests::{standin_ld_library_path, workload};

const MIB: u64 = 1 << 20;

/// The wheel under test, from `VRAMTRACE_WHEEL`.
fn wheel() -> PathBuf {
    let path = std::env::var_os("VRAMTRACE_WHEEL")
        .map(PathBuf::from)
        .expect("VRAMTRACE_WHEEL names the wheel to test (python/build_wheel.sh prints it)");
    assert!(path.is_file(), "{}: no such file", path.display());
    std::path::absolute(&path).unwrap()
}

/// A fresh virtual environment with the wheel installed, in its own temporary directory (also
/// the working directory of everything run from it: nothing of the repository is near).
struct Installed {
    dir: tempfile::TempDir,
}

impl Installed {
    fn new() -> Installed {
        let dir = tempfile::Builder::new()
            .prefix("vramtrace-wheel-")
            .tempdir()
            .unwrap();
        let venv = dir.path().join("venv");
        succeed(clean_command("python3").arg("-m").arg("venv").arg(&venv));
        let i = Installed { dir };
        succeed(
            i.command("pip")
                .args([
                    "install",
                    "--no-index",
                    "--disable-pip-version-check",
                    "--quiet",
                ])
                .arg(wheel()),
        );
        i
    }

    fn venv(&self) -> PathBuf {
        self.dir.path().join("venv")
    }

    fn work(&self) -> &Path {
        self.dir.path()
    }

    /// `venv/bin/<program>`, run in the temporary directory, with the stand-ins on
    /// `LD_LIBRARY_PATH` and nothing of the test's environment that could point elsewhere.
    fn command(&self, program: &str) -> Command {
        let mut c = clean_command(self.venv().join("bin").join(program));
        c.current_dir(self.work())
            .env("LD_LIBRARY_PATH", standin_ld_library_path())
            .env_remove("PYTHONPATH")
            .env_remove("PYTHONHOME");
        c
    }

    fn report_json(&self, trace: &Path) -> Value {
        let out = succeed(
            self.command("vramtrace")
                .arg("report")
                .arg("--json")
                .arg(trace),
        );
        serde_json::from_slice(&out.stdout).expect("report --json prints JSON")
    }
}

// The command and the library land in the environment's bin/ and lib/, the wheel's version is
// the command's, and `python -m vramtrace` is the same command.
#[test]
#[ignore = "needs the wheel: VRAMTRACE_WHEEL (python/build_wheel.sh)"]
fn installs_the_command_and_the_library() {
    let i = Installed::new();
    assert!(i.venv().join("bin/vramtrace").is_file());
    assert!(i.venv().join("lib/libvramtrace.so").is_file());
    let version = format!("vramtrace {}\n", env!("CARGO_PKG_VERSION"));
    let out = succeed(i.command("vramtrace").arg("--version"));
    assert_eq!(text(&out.stdout), version);
    let out = succeed(i.command("python").args(["-m", "vramtrace", "--version"]));
    assert_eq!(text(&out.stdout), version);
    let name = wheel().file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(&format!(
            "vramtrace-{}-py3-none-manylinux_2_",
            env!("CARGO_PKG_VERSION")
        )) && name.ends_with("_x86_64.whl"),
        "{name}"
    );

    // Uninstalling takes both away again.
    succeed(
        i.command("pip")
            .args(["uninstall", "--yes", "--quiet", "vramtrace"]),
    );
    assert!(!i.venv().join("bin/vramtrace").exists());
    assert!(!i.venv().join("lib/libvramtrace.so").exists());
}

// The installed `vramtrace run` on wl_train (the README's example), from the temporary
// directory: it finds its own library, the program's output passes through, and `vramtrace
// report` of the one trace has the planted numbers (as tests/tests/capture/cli.rs): 20 steps,
// 20 MiB of history in 20 objects owned by libtorch_standin.so, and the 4 MiB registration
// orphaned with its communicator.
#[test]
#[ignore = "needs the wheel: VRAMTRACE_WHEEL (python/build_wheel.sh)"]
fn the_installed_command_traces_a_workload() {
    let i = Installed::new();
    let out = succeed(
        i.command("vramtrace")
            .args(["run", "-o", "traces/t-%p.vtrace", "--"])
            .arg(workload("wl_train")),
    );
    let plain = succeed(
        clean_command(workload("wl_train")).env("LD_LIBRARY_PATH", standin_ld_library_path()),
    );
    assert_eq!(text(&out.stdout), text(&plain.stdout));
    let summary = text(&out.stderr);
    assert!(summary.contains("20.0 MiB in 20 objects"), "{summary}");
    let traces = trace_files(&i.work().join("traces"));
    assert_eq!(traces.len(), 1, "{traces:?}");

    let r = i.report_json(&traces[0]);
    assert_eq!(r["reading"]["complete"], true);
    assert_eq!(r["tracer"]["dropped"], 0);
    assert_eq!(r["events"]["steps"], 20);
    assert_eq!(r["live"]["device_memory"]["count"], 20);
    assert_eq!(r["live"]["device_memory"]["bytes"], 20 * MIB);
    let modules = r["live"]["by_module"].as_array().unwrap();
    assert_eq!(modules.len(), 1, "{modules:?}");
    assert_eq!(modules[0]["name"], "libtorch_standin.so");
    assert_eq!(r["orphans_total"], 1);
    assert_eq!(r["orphans"][0]["bytes"], 4 * MIB);
}

/// A Python training loop over the CUDA runtime stand-in: 5 steps marked with
/// `vramtrace.mark_step()`, each keeping a 1 MiB allocation.
const LOOP: &str = r#"import ctypes
import vramtrace

cudart = ctypes.CDLL("libcudart.so.13")
kept = []
marks = []
for _ in range(5):
    marks.append(vramtrace.mark_step())
    p = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(1 << 20)) == 0
    kept.append(p)
print(vramtrace.enabled(), marks)
"#;

// The Python module: without the tracer `mark_step()` is a no-op and `enabled()` false, and the
// paths are the environment's; under `python -m vramtrace run` the marks are the tracer's
// (numbered from 1), and the report counts 5 steps over the 5 MiB kept and finds the growth of
// 1 MiB per step at the script's line.
#[test]
#[ignore = "needs the wheel: VRAMTRACE_WHEEL (python/build_wheel.sh)"]
fn the_python_module_marks_steps_under_the_tracer_only() {
    let i = Installed::new();
    let script = i.work().join("loop.py");
    std::fs::write(&script, LOOP).unwrap();

    let out = succeed(i.command("python").arg(&script));
    assert_eq!(text(&out.stdout), "False [None, None, None, None, None]\n");
    let out = succeed(i.command("python").args([
        "-c",
        "import vramtrace; print(vramtrace.library_path()); print(vramtrace.executable())",
    ]));
    let venv = std::fs::canonicalize(i.venv()).unwrap();
    assert_eq!(
        text(&out.stdout),
        format!(
            "{}\n{}\n",
            venv.join("lib/libvramtrace.so").display(),
            venv.join("bin/vramtrace").display()
        )
    );

    let out = succeed(
        i.command("python")
            .args(["-m", "vramtrace", "run", "-o", "py-%p.vtrace", "--"])
            .arg(i.venv().join("bin/python"))
            .arg(&script),
    );
    assert_eq!(text(&out.stdout), "True [1, 2, 3, 4, 5]\n");
    let traces = trace_files(i.work());
    assert_eq!(traces.len(), 1, "{traces:?}");
    let r = i.report_json(&traces[0]);
    assert_eq!(r["events"]["steps"], 5);
    assert_eq!(r["live"]["device_memory"]["count"], 5);
    assert_eq!(r["live"]["device_memory"]["bytes"], 5 * MIB);
    // Growth per marked step, at the script's cudaMalloc line.
    let diagnosis = r["analysis"]["diagnosis"].as_array().unwrap();
    assert_eq!(diagnosis.len(), 1, "{diagnosis:?}");
    assert_eq!(diagnosis[0]["class"], "steady-growth");
    assert_eq!(diagnosis[0]["site"]["label"], "loop.py:10 in <module>");
    assert_eq!(diagnosis[0]["evidence"]["rate"], MIB as f64);
    assert_eq!(diagnosis[0]["evidence"]["axis"], "steps");
}

// `vramtrace.load` needs pyarrow, which the wheel does not pull in: without it, one line says so
// (the rest of the module works as ever).
#[test]
#[ignore = "needs the wheel: VRAMTRACE_WHEEL (python/build_wheel.sh)"]
fn load_without_pyarrow_says_what_is_missing() {
    let i = Installed::new();
    let out = i
        .command("python")
        .args(["-c", "import vramtrace; vramtrace.load('x.vtrace')"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert_eq!(
        err.lines().last(),
        Some("ImportError: vramtrace.load() needs pyarrow: pip install pyarrow"),
        "{err}"
    );
}
