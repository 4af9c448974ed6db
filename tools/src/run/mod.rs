//! `vramtrace run`: starts a program with the tracer preloaded, passes signals on, exits as the
//! program did, then summarises the traces it wrote.

mod args;
mod leftover;
mod python;
mod signals;
mod status;
mod traces;

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use anyhow::{anyhow, bail, Context, Result};
use vramtrace_collector::units::pattern::{
    unknown_placeholders, DEFAULT, IN_DIRECTORY, PLACEHOLDERS,
};

use self::leftover::Leftover;
pub use self::status::Reported;
use self::status::StatusDir;
use self::traces::OutputPattern;
pub use self::traces::{say_others, unseen, why_no_trace};
use crate::options::TracerArgs;

use crate::load::lower_first;
pub use args::{RunArgs, EXAMPLES};

/// The tracer's file name.
const LIB_NAME: &str = "libvramtrace.so";

/// Runs `vramtrace run`; returns the exit code to leave with.
pub fn run(args: &RunArgs) -> Result<u8> {
    let ran = match launch(&args.tracer, &args.command, Layers::AsSet) {
        Ok(ran) => ran,
        // As a shell says it: 127 for a program not found, 126 for one that cannot run, so
        // that its own exit code 2 is not taken for vramtrace's.
        Err(e) => match e.downcast_ref::<NotStarted>() {
            Some(n) => {
                say!("error: {n}");
                return Ok(n.exit_code());
            }
            None => return Err(e),
        },
    };
    if !args.no_summary {
        let mut err = std::io::stderr().lock();
        traces::summarize(&mut err, &ran).context("writing the summary")?;
    }
    Ok(ran.exit_code)
}

/// The program could not be started.
#[derive(Debug)]
pub struct NotStarted {
    program: String,
    error: std::io::Error,
}

impl NotStarted {
    /// The exit code a shell gives: 127 not found, 126 found but not runnable.
    pub fn exit_code(&self) -> u8 {
        match self.error.kind() {
            std::io::ErrorKind::NotFound => 127,
            _ => 126,
        }
    }
}

impl std::fmt::Display for NotStarted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let why = lower_first(self.error.to_string());
        write!(f, "cannot run {}: {why}", self.program)?;
        // A trace, or a directory of them, given where a program goes: the commands that
        // read traces are others.
        let path = std::path::Path::new(&self.program);
        if path.is_dir() || path.extension().is_some_and(|x| x == "vtrace") {
            write!(
                f,
                " (run and check run a program; for traces already taken: vramtrace report \
                 --fail-on growth,orphans {})",
                self.program
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for NotStarted {}

/// What a traced run left.
pub struct Ran {
    /// The program's exit code, or 128 + the signal that killed it.
    pub exit_code: u8,
    /// The traces its processes wrote, oldest first.
    pub traces: Vec<PathBuf>,
    /// Traces that other processes wrote where the run's go, while it ran: left out.
    pub others: Vec<PathBuf>,
    /// What its processes said became of them (`None`: unknown, no status directory could be
    /// made).
    pub reported: Option<Reported>,
    /// Processes the command started that were still running after it exited (and a grace
    /// period): their traces are not whole yet.
    pub left_running: Vec<Leftover>,
    /// The library preloaded, when it is not the tracer (`--lib` named another file): why no
    /// process reported in.
    pub not_tracer: Option<PathBuf>,
}

/// What a launch must see of the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layers {
    /// The layers `VRAMTRACE_CAPTURE` names, as the user set them (`run`).
    AsSet,
    /// Every layer, whatever `VRAMTRACE_CAPTURE` says (`check`: a gate that traced NCCL alone
    /// would see no device memory, and pass a leak).
    All,
}

/// Refuses segment and trace sizes the tracer cannot keep, before the program starts (the
/// tracer would raise them, and say so only in the program's stderr): a segment holds its
/// snapshot and some chunks, and the trace the segment being written and the one before.
fn bounds_fit(args: &TracerArgs) -> Result<()> {
    const MIN_SEGMENT: u64 = 1 << 20;
    let size = crate::render::units::bytes;
    if let Some(b) = args.segment_bytes.filter(|&b| b > 0 && b < MIN_SEGMENT) {
        return Err(anyhow!(
            "--segment-bytes {} is below the smallest segment, {}",
            size(b),
            size(MIN_SEGMENT)
        ));
    }
    if let Some(b) = args.max_bytes.filter(|&b| b > 0 && b < 2 * MIN_SEGMENT) {
        return Err(anyhow!(
            "--max-bytes {} cannot hold two segments of the smallest size ({} each): give at \
             least {}",
            size(b),
            size(MIN_SEGMENT),
            size(2 * MIN_SEGMENT)
        ));
    }
    Ok(())
}

/// Runs `argv` (the program and its arguments) with the tracer preloaded as `args` ask, tracing
/// the `layers` asked, passing signals on, until it exits.
pub fn launch(args: &TracerArgs, argv: &[OsString], layers: Layers) -> Result<Ran> {
    bounds_fit(args)?;
    let lib = find_library(args.lib.as_deref())?;
    let (given, from) = output_setting(args.output.as_deref());
    let output = output_path(&given, from)?;
    let pattern = OutputPattern::new(&output);
    let before = pattern.snapshot();
    let status_dir = StatusDir::new();

    let (program, rest) = argv
        .split_first()
        .ok_or_else(|| anyhow!("no command to run"))?;
    let mut command = Command::new(program);
    command
        .args(rest)
        .env("LD_PRELOAD", preload_value(&lib))
        // The library preloaded, for what in the program asks where it is (the Python
        // module's `library_path()`, a launcher that preloads it into its own children).
        .env("VRAMTRACE_LIB", &lib)
        .env("VRAMTRACE_OUTPUT", &output);
    if layers == Layers::All {
        if let Some(set) = std::env::var_os("VRAMTRACE_CAPTURE").filter(|v| v != "all") {
            say!(
                "vramtrace: VRAMTRACE_CAPTURE={} left out: the check traces every layer",
                set.to_string_lossy()
            );
            command.env_remove("VRAMTRACE_CAPTURE");
        }
    }
    if let Some(dir) = &status_dir {
        command.env(status::RUN_STATUS, dir.path());
    }
    if let Some(depth) = args.stack_depth {
        command.env("VRAMTRACE_STACK_DEPTH", depth.to_string());
    }
    if let Some(depth) = args.python_depth {
        command.env("VRAMTRACE_PYTHON_DEPTH", depth.to_string());
    }
    if let Some(range) = &args.step_range {
        command.env("VRAMTRACE_STEP_RANGE", range);
    }
    if let Some(bytes) = args.max_bytes {
        command.env("VRAMTRACE_MAX_BYTES", bytes.to_string());
    }
    if let Some(bytes) = args.segment_bytes {
        command.env("VRAMTRACE_SEGMENT_BYTES", bytes.to_string());
    }
    if let Some(ns) = args.segment_time {
        // In milliseconds, the grammar's finest unit: whole seconds made `500ms` 0, never.
        let ms = ns.div_ceil(1_000_000);
        command.env("VRAMTRACE_SEGMENT_SECONDS", format!("{ms}ms"));
    }
    // Kept until the program has exited: its directory is removed on drop.
    let bootstrap = if args.no_python_hooks {
        None
    } else {
        match python::Bootstrap::write() {
            Ok(b) => Some(b),
            Err(e) => {
                say!("vramtrace: warning: {e:#}; Python programs run without the hooks");
                None
            }
        }
    };
    if let Some(b) = &bootstrap {
        command.env(
            "PYTHONPATH",
            python::python_path(b.path(), std::env::var_os("PYTHONPATH")),
        );
    }
    if args.per_tensor {
        for (name, value) in python::per_tensor_env(|name| std::env::var(name).ok()) {
            command.env(name, value);
        }
    }
    if !args.no_nvtx {
        // NVTX loads one injection library; a profiler the user already named keeps its place.
        match std::env::var_os("NVTX_INJECTION64_PATH").filter(|v| !v.is_empty()) {
            Some(other) if Path::new(&other) != lib => say!(
                "vramtrace: NVTX_INJECTION64_PATH is already {}; NVTX ranges will not reach the trace",
                other.to_string_lossy()
            ),
            _ => {
                command.env("NVTX_INJECTION64_PATH", &lib);
            }
        }
    }

    let adopting = leftover::adopt_orphans();
    signals::catch();
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            signals::release();
            return Err(NotStarted {
                program: program.to_string_lossy().into_owned(),
                error: e,
            }
            .into());
        }
    };
    signals::forward_to(child.id());
    wait_for_exit(child.id());
    // Stop forwarding before the child is reaped, so its pid cannot be reused under us.
    signals::release();
    let status = child.wait().context("waiting for the program")?;
    // Stopped by a signal, the run does not wait for what the program left behind.
    let left_running = match adopting {
        true if signals::received() => leftover::still_running(),
        true => leftover::wait_for_leftovers(),
        false => Vec::new(),
    };
    drop(bootstrap);
    let reported = status_dir.as_ref().map(StatusDir::read);
    let mut traces = pattern.written_since(&before);
    // A trace another job wrote into the same directory meanwhile is not this run's: where the
    // processes reported in, only theirs count (a file whose header does not read is kept, to
    // be judged as the damaged trace it may be). A run none of whose processes reported in (no
    // tracer library loaded) takes what the directory holds, and says why it saw nothing.
    let mut others = Vec::new();
    if let Some(r) = reported.as_ref().filter(|r| !r.processes.is_empty()) {
        let reported_path = |path: &Path| r.traces().any(|(_, t)| t == path);
        let ours = |path: &Path| {
            reported_path(path)
                || vramtrace_collector::format::SegmentFile::open(path)
                    .map_or(true, |f| r.processes.iter().any(|p| p.pid == f.header.pid))
        };
        (traces, others) = traces.into_iter().partition(|t| ours(t));
    }
    // A process may write where the pattern does not point (a program that sets its children's
    // VRAMTRACE_OUTPUT): what it said it created counts too.
    for (_, path) in reported.iter().flat_map(Reported::traces) {
        if path.is_file() && !traces.iter().any(|t| t == path) {
            traces.push(path.to_path_buf());
        }
    }
    Ok(Ran {
        exit_code: exit_code(status),
        traces,
        others,
        reported,
        left_running,
        not_tracer: (!is_tracer(&lib)).then_some(lib),
    })
}

/// Blocks until the child has exited, without reaping it.
fn wait_for_exit(pid: u32) {
    loop {
        // SAFETY: a zeroed siginfo_t is valid for waitid to fill; pid is our own child.
        let rc = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if rc == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// The child's exit code, or 128 + the signal that killed it (as shells report it).
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => (128 + sig) as u8,
        (None, None) => 1,
    }
}

/// `LD_PRELOAD` with the tracer first, keeping whatever was preloaded already.
fn preload_value(lib: &Path) -> OsString {
    let mut value = OsString::from(lib);
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        value.push(":");
        value.push(existing);
    }
    value
}

/// The tracer library: `--lib`, else `VRAMTRACE_LIB`, else beside this program, else in
/// `../lib/` from it.
fn find_library(flag: Option<&Path>) -> Result<PathBuf> {
    let explicit = flag
        .map(|p| ("--lib", p.to_path_buf()))
        .or_else(|| std::env::var_os("VRAMTRACE_LIB").map(|v| ("VRAMTRACE_LIB", v.into())));
    if let Some((from, path)) = explicit {
        if !path.is_file() {
            bail!("{from} {}: no such file", path.display());
        }
        return canonical(&path);
    }
    let exe = std::env::current_exe().context("finding the vramtrace program")?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let candidates = [dir.join(LIB_NAME), dir.join("../lib").join(LIB_NAME)];
    match candidates.iter().find(|p| p.is_file()) {
        Some(found) => canonical(found),
        None => bail!(
            "cannot find {LIB_NAME} (looked in {} and {}); pass --lib PATH or set VRAMTRACE_LIB",
            dir.display(),
            dir.join("../lib").display()
        ),
    }
}

/// Whether `path` is the tracer: a shared object that exports `vramtrace_mark_step`. Anything
/// else given as the library is ignored by the loader, or loaded without tracing, and the run
/// would read as "the tracer was not loaded" for a reason that is not the one.
fn is_tracer(path: &Path) -> bool {
    use object::{NameOrOrdinal, Object, ObjectKind};
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let cache = object::read::ReadCache::new(file);
    let Ok(elf) = object::File::parse(&cache) else {
        return false;
    };
    let Ok(mut exports) = elf.exports() else {
        return false;
    };
    elf.kind() == ObjectKind::Dynamic
        && exports.any(|e| {
            e.is_ok_and(|e| matches!(e.name(), NameOrOrdinal::Name(b"vramtrace_mark_step")))
        })
}

/// The library's real path, so LD_PRELOAD holds no `..` or relative part: the traced program
/// may change directory before it execs something.
fn canonical(path: &Path) -> Result<PathBuf> {
    std::fs::canonicalize(path).with_context(|| format!("resolving {}", path.display()))
}

/// An absolute form of `path`: the traced program may change directory before loading it.
fn absolute(path: &Path) -> Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("resolving {}", path.display()))
}

/// Where traces go: `-o`, else `VRAMTRACE_OUTPUT` from the environment, else the default.
/// `-o` wins, and says so when the environment named another place. Also returns where the
/// setting came from, for errors.
fn output_setting(flag: Option<&Path>) -> (PathBuf, &'static str) {
    let env = std::env::var_os("VRAMTRACE_OUTPUT").filter(|v| !v.is_empty());
    match (flag, env) {
        (Some(flag), Some(env)) => {
            if Path::new(&env) != flag {
                say!(
                    "vramtrace: -o {} is used, not VRAMTRACE_OUTPUT={} from the environment",
                    flag.display(),
                    Path::new(&env).display()
                );
            }
            (flag.to_path_buf(), "-o")
        }
        (Some(flag), None) => (flag.to_path_buf(), "-o"),
        (None, Some(env)) => (PathBuf::from(env), "VRAMTRACE_OUTPUT"),
        (None, None) => (PathBuf::from(DEFAULT), "-o"),
    }
}

/// The absolute output pattern. A directory (`DIR/`, or one that exists) gets one file per
/// process inside; a missing directory is created, mode 0755 like any output directory: the
/// traces in it are 0644, meant to be copied and reported elsewhere (the umask narrows both).
fn output_path(given: &Path, from: &str) -> Result<PathBuf> {
    if given.as_os_str().is_empty() {
        bail!("{from}: not a file path");
    }
    let path = absolute(given)?;
    // A typo in the file name caught before the program runs, not a file named after it (a
    // directory's name is taken as written: placeholders go in the file name).
    let names_a_file = !given.to_string_lossy().ends_with('/') && !path.is_dir();
    let name = given.file_name().filter(|_| names_a_file);
    if name.is_some_and(|n| unknown_placeholders(from, n.as_bytes()).is_some()) {
        let unknown = unknown_placeholders(from, given.as_os_str().as_bytes()).unwrap_or_default();
        bail!("{unknown}; write %% for a percent sign in a file name");
    }
    let path = if given.to_string_lossy().ends_with('/') || path.is_dir() {
        path.join(IN_DIRECTORY)
    } else if given.file_name().is_none() {
        bail!("{from} {}: not a file path", given.display());
    } else {
        path
    };
    let dir = path.parent().unwrap_or(Path::new("/"));
    if PLACEHOLDERS
        .iter()
        .any(|p| dir.to_string_lossy().contains(p))
    {
        bail!(
            "{from} {}: placeholders ({}) go in the file name, not in the directory",
            given.display(),
            PLACEHOLDERS.join(", ")
        );
    }
    // A file where a directory of the path should be: named, not "file exists".
    if let Some(file) = dir.ancestors().find(|a| a.is_file()) {
        bail!(
            "{from} {}: {} is a file, not a directory",
            given.display(),
            file.display()
        );
    }
    if !dir.is_dir() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(|e| {
                anyhow!(
                    "{from} {}: cannot create directory {}: {}",
                    given.display(),
                    dir.display(),
                    lower_first(e.to_string())
                )
            })?;
    }
    // A directory the traced processes cannot write in would run the whole job untraced.
    let c_dir = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| anyhow!("{from} {}: the path holds a NUL byte", given.display()))?;
    // SAFETY: access reads a NUL-terminated path we own; it has no other preconditions.
    let writable = unsafe { libc::access(c_dir.as_ptr(), libc::W_OK | libc::X_OK) } == 0;
    if !writable {
        let e = std::io::Error::last_os_error();
        bail!(
            "{from} {}: cannot write traces in {}: {}",
            given.display(),
            dir.display(),
            lower_first(e.to_string())
        );
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
    }
}
