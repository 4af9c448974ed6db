//! Integration tests of the capture core (issue 2): every workload of `tests/workloads/` runs
//! with and without `LD_PRELOAD=libvramtrace.so`, and what the tracer wrote is checked against
//! the ground truth documented in `tests/standins/README.md` — exact call counts, sizes, owners,
//! communicators, failures, anomalies and what is live at the end.
//!
//! One test binary split into modules (as ripgrep does). Each test gets its own temporary
//! directory for `VRAMTRACE_OUTPUT=<dir>/t-%p.vtrace` through [`captest!`]. The tracer library
//! and the CLI come from the target directory of this test executable: run
//! `cargo build --workspace` first.

/// Declares a test that gets a fresh temporary directory for its traces, as `$dir: &Path`:
/// `captest!(name, |dir| { ... });`.
macro_rules! captest {
    ($name:ident, |$dir:ident| $body:block) => {
        #[test]
        fn $name() {
            let tmp = tempfile::Builder::new()
                .prefix(concat!("vramtrace-", stringify!($name), "-"))
                .tempdir()
                .expect("creating a temporary directory");
            let $dir: &std::path::Path = tmp.path();
            $body
        }
    };
}

mod alerts;
mod analyses;
mod attribution;
mod check;
mod cli;
mod closure;
mod diff;
mod driver;
mod harm;
mod libraries;
mod metrics;
mod nccl;
mod processes;
mod python_hooks;
mod replay;
mod runtime;
mod segments;
mod settings;

/// Bytes in a MiB.
pub const MIB: u64 = 1 << 20;

/// Runs `vramtrace ARGS` (which must ask for `--json`), checks that it succeeded, and parses
/// the one JSON document it printed.
pub fn vramtrace_json<I, S>(args: I) -> serde_json::Value
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(|a| a.as_ref().into()).collect();
    let out = vramtrace_tests::traced::vramtrace_command()
        .args(&args)
        .output()
        .expect("running vramtrace");
    assert_eq!(
        out.status.code(),
        Some(0),
        "vramtrace {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("vramtrace {args:?} printed no JSON document: {e}"))
}
