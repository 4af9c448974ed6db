//! `vramtrace-demo`: the bundled example. Runs the CPU stand-in training loop (`wl_train`: an
//! NCCL process group, cuBLAS workspaces, temporaries, and a planted leak of 1 MiB per step) under
//! `vramtrace run`, then prints `vramtrace report` of the trace. No GPU needed.
//!
//! `vramtrace-demo --regression` runs the loop again with a regression planted (a second list
//! that keeps 4 MiB a step, allocated at `fw_alloc` of the framework stand-in) and prints
//! `vramtrace diff` of the two runs; it exits as `diff` does: 1, a regression.
//!
//! `vramtrace-demo --program` runs the training loop alone, untraced, so a user can trace it
//! with `vramtrace run` as they would their own program (the README's "Tracing a program");
//! `--program --extra-leak` plants the same regression, `--program --fix-leak` fixes the leak,
//! `--program --checkpoint` runs as a long job does (150 ms a step) and saves a checkpoint when
//! the tracer's alert signal asks.
//!
//! ```text
//! cargo build --release --workspace && target/release/vramtrace-demo
//! target/release/vramtrace-demo --regression
//! target/release/vramtrace run -o traces/job-%p.vtrace -- target/release/vramtrace-demo --program
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use vramtrace_collector::format::TraceReader;
use vramtrace_tests::{standin_ld_library_path, workload};

/// Where the demo keeps its traces, in the current directory.
const OUT_DIR: &str = "vramtrace-demo";
/// The first run's trace names (`%p`: the pid).
const FIRST: &str = "train-";
/// The regressed run's.
const REGRESSED: &str = "regressed-";

const USAGE: &str =
    "usage: vramtrace-demo [--regression | --program [--extra-leak | --fix-leak] [--checkpoint] | --help]
  (nothing)        trace the training loop and report it
  --regression     trace it again with a regression planted, and diff the two runs (exit 1)
  --program        run the training loop alone, untraced (to trace with `vramtrace run`);
                   --extra-leak plants the regression, --fix-leak fixes the leak,
                   --checkpoint (alone, or with either) takes 150 ms a step and saves a
                   checkpoint on SIGUSR1 (try
                   VRAMTRACE_ALERT_SIGNAL=USR1 vramtrace run -- vramtrace-demo --program --checkpoint)";

fn sibling(name: &str) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let p = dir.join(name);
    if p.exists() {
        Ok(p)
    } else {
        Err(format!(
            "{} is missing; build everything first: cargo build --release --workspace",
            p.display()
        ))
    }
}

/// The stand-in training loop, as the demo runs it, with `variant` (`--extra-leak`, ...).
fn training_loop(variant: &[&str]) -> Command {
    let mut c = Command::new(workload("wl_train"));
    c.args(variant)
        .env("LD_LIBRARY_PATH", standin_ld_library_path())
        // A 512 MiB stand-in device: the planted 1 MiB per step is then 0.2% of it, above the
        // 0.1% at which steady growth alerts.
        .env("STANDIN_DEVICE_MEM", "512M")
        // The loop's 20 steps take about a millisecond, and the tracer judges growth at most
        // once a second by default: judged at every step mark, the leak raises its live alert
        // (at step 11, once it has grown for the 10 steps of confirmation).
        .env("VRAMTRACE_ALERT_INTERVAL_MS", "0");
    c
}

/// `--program [VARIANT]`: the training loop alone, in place of this process (exec): a signal
/// sent to the program a user started (`vramtrace run` passing on a CI job's SIGTERM) reaches
/// the loop, and its exit status is the program's.
fn program(variant: &[&str]) -> Result<ExitCode, String> {
    use std::os::unix::process::CommandExt;
    let error = training_loop(variant).exec();
    Err(format!(
        "cannot run {}: {error}",
        workload("wl_train").display()
    ))
}

/// The list of the traces the demo wrote, in its directory: one line each, `NAME DEVICE INODE
/// BYTES`, oldest first. Only a file listed here, still the same file (its device, inode and
/// size as written), is the demo's own to replace: a user's trace of `--program` under the
/// same kind of name, a copy, a text, are not, and are left alone.
const WRITTEN: &str = "vramtrace-demo/.written";

/// A file's identity: its device, inode and size.
fn identity(path: &Path) -> Option<(u64, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path).ok()?;
    m.is_file().then(|| (m.dev(), m.ino(), m.len()))
}

/// The lines of [`WRITTEN`], as written.
fn written() -> Vec<(String, (u64, u64, u64))> {
    let text = std::fs::read_to_string(WRITTEN).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let name = f.next()?.to_string();
            let mut n = || f.next()?.parse().ok();
            Some((name, (n()?, n()?, n()?)))
        })
        .collect()
}

fn write_written(list: &[(String, (u64, u64, u64))]) -> Result<(), String> {
    let text: String = list
        .iter()
        .map(|(name, (dev, ino, len))| format!("{name} {dev} {ino} {len}\n"))
        .collect();
    std::fs::write(WRITTEN, text).map_err(|e| format!("cannot write {WRITTEN}: {e}"))
}

/// Whether `name` is a trace name the demo gives under `prefix`: `prefix<pid>.vtrace`.
fn named_like(name: &str, prefix: &str) -> bool {
    let pid = name
        .strip_prefix(prefix)
        .and_then(|n| n.strip_suffix(".vtrace"));
    pid.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The demo's own traces named `prefix<pid>.vtrace`, oldest first: those it wrote and that
/// are still the files it wrote ([`WRITTEN`]).
fn traces(prefix: &str) -> Vec<PathBuf> {
    written()
        .into_iter()
        .filter(|(name, _)| named_like(name, prefix))
        .map(|(name, id)| (Path::new(OUT_DIR).join(name), id))
        .filter(|(path, id)| identity(path) == Some(*id))
        .map(|(path, _)| path)
        .collect()
}

/// Names in the demo's directory like `prefix<pid>.vtrace`.
fn names_like(prefix: &str) -> Vec<String> {
    std::fs::read_dir(OUT_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| named_like(n, prefix))
        .collect()
}

/// Whether the file at `path` is a trace of the demo's training loop (its header's command).
fn of_the_training_loop(path: &Path) -> bool {
    let Ok(reader) = TraceReader::open(path) else {
        return false;
    };
    let program = reader.header().command_line.first().map(Path::new);
    program.and_then(Path::file_name) == workload("wl_train").file_name()
}

/// Traces the loop (`variant`) under `vramtrace run` into `OUT_DIR/PREFIX%p.vtrace`, after
/// removing the demo's earlier traces of that name (its own files only); returns the trace.
fn traced_run(
    vramtrace: &Path,
    prefix: &str,
    variant: &[&str],
    summary: bool,
) -> Result<PathBuf, String> {
    // Found first: a build without the tracer leaves no empty directory behind.
    let lib = sibling("libvramtrace.so")?;
    std::fs::create_dir_all(OUT_DIR).map_err(|e| format!("cannot create {OUT_DIR}: {e}"))?;
    let mut list = written();
    for old in traces(prefix) {
        if std::fs::remove_file(&old).is_ok() {
            println!("(removed the demo's earlier trace {})", old.display());
        }
    }
    // What is listed and no longer there (removed now, or by the user) is forgotten.
    list.retain(|(name, id)| identity(&Path::new(OUT_DIR).join(name)) == Some(*id));
    let before = names_like(prefix);
    let training = training_loop(variant);
    let status = Command::new(vramtrace)
        .arg("run")
        .arg("--lib")
        .arg(&lib)
        .arg("-o")
        .arg(Path::new(OUT_DIR).join(format!("{prefix}%p.vtrace")))
        .args((!summary).then_some("--no-summary"))
        .arg("--")
        .arg(training.get_program())
        .args(training.get_args())
        .envs(training.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .status()
        .map_err(|e| format!("cannot run {}: {e}", vramtrace.display()))?;
    if !status.success() {
        return Err(format!("the traced program failed: {status}"));
    }
    // The trace this run wrote: a name that was not there before, of the training loop.
    let name = names_like(prefix)
        .into_iter()
        .filter(|n| !before.contains(n))
        .find(|n| of_the_training_loop(&Path::new(OUT_DIR).join(n)))
        .ok_or_else(|| "the run wrote no trace".to_string())?;
    let trace = Path::new(OUT_DIR).join(&name);
    if let Some(id) = identity(&trace) {
        list.push((name, id));
        write_written(&list)?;
    }
    Ok(trace)
}

fn run() -> Result<ExitCode, String> {
    let vramtrace = sibling("vramtrace")?;
    println!(
        "== vramtrace run -- wl_train   (a training loop on the CPU stand-ins of CUDA and NCCL)"
    );
    let trace = traced_run(&vramtrace, FIRST, &[], true)?;
    println!("\n== vramtrace report {}", trace.display());
    let status = Command::new(&vramtrace)
        .arg("report")
        .arg(&trace)
        .status()
        .map_err(|e| format!("cannot run {}: {e}", vramtrace.display()))?;
    println!(
        "\nThe trace stays in {OUT_DIR}/ — try `{} report --json {}` or `{} replay {} --at step=10`, \
         or `vramtrace-demo --regression` for a second run to compare with.",
        vramtrace.display(),
        trace.display(),
        vramtrace.display(),
        trace.display()
    );
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `--regression`: a second run with the regression planted, diffed against the first (made
/// now when there is none).
fn regression() -> Result<ExitCode, String> {
    let vramtrace = sibling("vramtrace")?;
    let first = match traces(FIRST).pop() {
        Some(t) => t,
        None => {
            println!("== vramtrace run -- wl_train   (the first run, to compare with)");
            traced_run(&vramtrace, FIRST, &[], false)?
        }
    };
    println!("== vramtrace run -- wl_train --extra-leak   (4 MiB more kept every step)");
    let second = traced_run(&vramtrace, REGRESSED, &["--extra-leak"], false)?;
    println!(
        "\n== vramtrace diff {} {}",
        first.display(),
        second.display()
    );
    let status = Command::new(&vramtrace)
        .arg("diff")
        .arg(&first)
        .arg(&second)
        .status()
        .map_err(|e| format!("cannot run {}: {e}", vramtrace.display()))?;
    Ok(ExitCode::from(status.code().unwrap_or(2) as u8))
}

/// `--extra-leak` or `--fix-leak`, with `--checkpoint` or not, or nothing: what `wl_train`
/// takes.
fn program_variant(args: &[&str]) -> bool {
    let (pace, rest): (Vec<&str>, Vec<&str>) = args.iter().partition(|a| **a == "--checkpoint");
    pace.len() <= 1 && matches!(rest[..], [] | ["--extra-leak" | "--fix-leak"])
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args[..] {
        [] => run(),
        ["-h" | "--help"] => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        ["--regression"] => regression(),
        ["--program", ref variant @ ..] if program_variant(variant) => program(variant),
        _ => Err(format!("unknown arguments '{}'\n{USAGE}", args.join(" "))),
    };
    match result {
        Ok(c) => c,
        Err(e) => {
            eprintln!("vramtrace-demo: error: {e}");
            ExitCode::from(2)
        }
    }
}
