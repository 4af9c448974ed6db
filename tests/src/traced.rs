//! Running a workload with and without the tracer preloaded, and reading back what it wrote.
//!
//! The tracer (`libvramtrace.so`) and the CLI (`vramtrace`) are found in the target profile
//! directory of the running test executable (`target/debug/deps/x` → `target/debug/`), so the
//! tests exercise what `cargo build --workspace` produced. Every run starts from a clean
//! environment as far as the tracer and the stand-ins are concerned (inherited `VRAMTRACE_*`,
//! `STANDIN_*`, `NCCL_DEBUG*` and `LD_PRELOAD` are removed), so only what a test sets counts.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::trace::Trace;

/// The target profile directory the running test executable was built into.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    // target/<profile>/deps/<test>-<hash>
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| panic!("{} is not inside target/<profile>/deps", exe.display()))
}

fn built(name: &str) -> PathBuf {
    let path = profile_dir().join(name);
    assert!(
        path.is_file(),
        "{} is missing: run `cargo build --workspace` first (the integration tests run the tracer \
         and the CLI that the build put next to them)",
        path.display()
    );
    path
}

/// `libvramtrace.so` of this profile.
pub fn tracer_library() -> PathBuf {
    built("libvramtrace.so")
}

/// The `vramtrace` program of this profile.
pub fn vramtrace_program() -> PathBuf {
    built("vramtrace")
}

/// A `Command` for `vramtrace` with the same clean environment as the workloads.
pub fn vramtrace_command() -> Command {
    clean_command(vramtrace_program())
}

/// `vramtrace report FLAGS TRACE` run to its end, in the workloads' clean environment.
pub fn report_of(trace: &Path, flags: &[&str]) -> Output {
    vramtrace_command()
        .arg("report")
        .args(flags)
        .arg(trace)
        .output()
        .expect("running vramtrace report")
}

/// A `Command` for any program (an installed `vramtrace`, an interpreter) with the same clean
/// environment as the workloads.
pub fn clean_command(program: impl AsRef<OsStr>) -> Command {
    let mut c = Command::new(program);
    scrub(&mut c);
    c
}

/// Removes whatever the test's own environment says to the tracer or the stand-ins.
fn scrub(c: &mut Command) {
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("VRAMTRACE_")
            || k.starts_with("STANDIN_")
            || k.starts_with("NCCL_DEBUG")
            || k == "LD_PRELOAD"
        {
            c.env_remove(&key);
        }
    }
}

/// Any program (an interpreter, say) with the tracer preloaded, writing `dir/t-%p.vtrace`, and
/// the stand-ins first on `LD_LIBRARY_PATH` so that it `dlopen`s them; the environment is as
/// clean as a workload's.
pub fn traced_program(program: impl AsRef<OsStr>, dir: &Path) -> Command {
    let mut c = Command::new(program);
    scrub(&mut c);
    c.env("LD_LIBRARY_PATH", crate::standin_ld_library_path())
        .env("LD_PRELOAD", tracer_library())
        .env("VRAMTRACE_OUTPUT", dir.join(TRACE_PATTERN));
    c
}

/// The file name pattern every traced run writes under its directory.
pub const TRACE_PATTERN: &str = "t-%p.vtrace";

/// A workload invocation: program, arguments and extra environment.
#[derive(Clone, Debug)]
pub struct Workload {
    pub name: String,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    cwd: Option<PathBuf>,
}

impl Workload {
    pub fn new(name: &str) -> Self {
        Workload {
            name: name.to_string(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
        }
    }

    pub fn arg(mut self, a: impl AsRef<OsStr>) -> Self {
        self.args.push(a.as_ref().to_os_string());
        self
    }

    pub fn env(mut self, k: impl AsRef<OsStr>, v: impl AsRef<OsStr>) -> Self {
        self.env
            .push((k.as_ref().to_os_string(), v.as_ref().to_os_string()));
        self
    }

    /// Runs the program in `dir` (where a crashing workload may leave a core file).
    pub fn current_dir(mut self, dir: &Path) -> Self {
        self.cwd = Some(dir.to_path_buf());
        self
    }

    /// The command without the tracer.
    pub fn command(&self) -> Command {
        let mut c = crate::standin_command(&self.name);
        scrub(&mut c);
        if let Some(d) = &self.cwd {
            c.current_dir(d);
        }
        c.args(&self.args);
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    /// The command with the tracer preloaded, writing `dir/t-%p.vtrace`.
    pub fn traced_command(&self, dir: &Path) -> Command {
        let mut c = self.command();
        c.env("LD_PRELOAD", tracer_library())
            .env("VRAMTRACE_OUTPUT", dir.join(TRACE_PATTERN));
        // A test's own VRAMTRACE_* settings come last and win.
        for (k, v) in self.env.iter().filter(|(k, _)| is_tracer_setting(k)) {
            c.env(k, v);
        }
        c
    }

    pub fn run_plain(&self) -> Output {
        run(self.command(), &self.name)
    }

    /// Runs with the tracer; the traces are the `*.vtrace` files in `dir` afterwards.
    pub fn run_traced(&self, dir: &Path) -> TracedRun {
        let output = run(self.traced_command(dir), &self.name);
        TracedRun {
            traces: trace_files(dir),
            output,
        }
    }

    /// Runs without and with the tracer and checks that the program could not tell: the same
    /// stdout, byte for byte, and the same exit status.
    pub fn run_both(&self, dir: &Path) -> TracedRun {
        let plain = self.run_plain();
        let traced = self.run_traced(dir);
        assert_same_behaviour(&self.to_string(), &plain, &traced.output);
        traced
    }
}

fn is_tracer_setting(k: &OsStr) -> bool {
    k.to_string_lossy().starts_with("VRAMTRACE_")
}

impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.name)?;
        for a in &self.args {
            write!(f, " {}", a.to_string_lossy())?;
        }
        for (k, v) in &self.env {
            write!(f, " [{}={}]", k.to_string_lossy(), v.to_string_lossy())?;
        }
        Ok(())
    }
}

fn run(mut c: Command, name: &str) -> Output {
    c.output()
        .unwrap_or_else(|e| panic!("cannot run {name}: {e}"))
}

/// Panics unless the two runs printed the same stdout and ended the same way.
pub fn assert_same_behaviour(what: &str, plain: &Output, traced: &Output) {
    if plain.stdout != traced.stdout {
        let (a, b) = (text(&plain.stdout), text(&traced.stdout));
        let line = a
            .lines()
            .zip(b.lines())
            .position(|(x, y)| x != y)
            .unwrap_or_else(|| a.lines().count().min(b.lines().count()));
        panic!(
            "{what}: stdout differs under the tracer, first at line {}:\n  plain:  {:?}\n  traced: \
             {:?}\ntraced stderr:\n{}",
            line + 1,
            a.lines().nth(line),
            b.lines().nth(line),
            text(&traced.stderr)
        );
    }
    assert_eq!(
        plain.status,
        traced.status,
        "{what}: exit status differs under the tracer\ntraced stderr:\n{}",
        text(&traced.stderr)
    );
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `text` with the time in brackets after each count of steps to full taken out (`full in 1,012
/// steps (1 s)` → `full in 1,012 steps`): a stand-in's steps take what the machine gives them.
pub fn untimed(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find(" steps (") {
        let from = i + " steps".len();
        out.push_str(&rest[..from]);
        rest = &rest[from..];
        if let Some(j) = rest.find(')') {
            rest = &rest[j + 1..];
        }
    }
    out.push_str(rest);
    out
}

/// Runs `c` to its end and returns what it printed; panics, with its output, unless it exited 0.
pub fn succeed(c: &mut Command) -> Output {
    let out = c.output().unwrap_or_else(|e| panic!("running {c:?}: {e}"));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{c:?}\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// The `*.vtrace` files in `dir`, sorted by name.
pub fn trace_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "vtrace"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// What a traced run left behind.
#[derive(Debug)]
pub struct TracedRun {
    pub output: Output,
    pub traces: Vec<PathBuf>,
}

impl TracedRun {
    pub fn stdout(&self) -> String {
        text(&self.output.stdout)
    }

    pub fn stderr(&self) -> String {
        text(&self.output.stderr)
    }

    /// The run's only trace, loaded.
    pub fn single_trace(&self) -> Trace {
        assert_eq!(
            self.traces.len(),
            1,
            "expected exactly one trace, found {:?}\nstderr:\n{}",
            self.traces,
            self.stderr()
        );
        Trace::load(&self.traces[0])
    }
}
