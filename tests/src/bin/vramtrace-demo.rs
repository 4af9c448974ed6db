//! `vramtrace-demo`: the bundled example. Runs the CPU stand-in training loop (`wl_train`: an
//! NCCL process group, cuBLAS workspaces, temporaries, and a planted leak of 1 MiB per step) under
//! `vramtrace run`, then prints `vramtrace report` of the trace. No GPU needed.
//!
//! `vramtrace-demo --program` runs the training loop alone, untraced, so a user can trace it
//! with `vramtrace run` as they would their own program (the README's "Tracing a program").
//!
//! ```text
//! cargo build --release --workspace && target/release/vramtrace-demo
//! target/release/vramtrace run -o traces/job-%p.vtrace -- target/release/vramtrace-demo --program
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use vramtrace_tests::{standin_ld_library_path, workload};

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

/// The stand-in training loop, as the demo runs it.
fn training_loop() -> Command {
    let mut c = Command::new(workload("wl_train"));
    c.env("LD_LIBRARY_PATH", standin_ld_library_path())
        // A 512 MiB stand-in device: the planted 1 MiB per step is then 0.2% of it, above the
        // 0.1% at which steady growth alerts.
        .env("STANDIN_DEVICE_MEM", "512M")
        // The loop's 20 steps take about a millisecond, and the tracer judges growth at most
        // once a second by default: judged at every step mark, the leak raises its live alert
        // (at step 11, once it has grown for the 10 steps of confirmation).
        .env("VRAMTRACE_ALERT_INTERVAL_MS", "0");
    c
}

/// `--program`: the training loop alone, its exit code passed on.
fn program() -> Result<ExitCode, String> {
    let status = training_loop()
        .status()
        .map_err(|e| format!("cannot run {}: {e}", workload("wl_train").display()))?;
    Ok(ExitCode::from(status.code().unwrap_or(1) as u8))
}

fn run() -> Result<ExitCode, String> {
    let vramtrace = sibling("vramtrace")?;
    let lib = sibling("libvramtrace.so")?;
    let out_dir = PathBuf::from("vramtrace-demo");
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
    for e in std::fs::read_dir(&out_dir).into_iter().flatten().flatten() {
        if e.path().extension().is_some_and(|x| x == "vtrace") {
            let _ = std::fs::remove_file(e.path());
        }
    }
    let pattern = out_dir.join("train-%p.vtrace");
    println!(
        "== vramtrace run -- wl_train   (a training loop on the CPU stand-ins of CUDA and NCCL)"
    );
    let training = training_loop();
    let status = Command::new(&vramtrace)
        .arg("run")
        .arg("--lib")
        .arg(&lib)
        .arg("-o")
        .arg(&pattern)
        .arg("--")
        .arg(training.get_program())
        .envs(training.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .status()
        .map_err(|e| format!("cannot run {}: {e}", vramtrace.display()))?;
    if !status.success() {
        return Err(format!("the traced program failed: {status}"));
    }
    let trace = std::fs::read_dir(&out_dir)
        .map_err(|e| format!("cannot list {}: {e}", out_dir.display()))?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "vtrace"))
        .ok_or("the run wrote no trace")?;
    println!("\n== vramtrace report {}", trace.display());
    let status = Command::new(&vramtrace)
        .arg("report")
        .arg(&trace)
        .status()
        .map_err(|e| format!("cannot run {}: {e}", vramtrace.display()))?;
    println!(
        "\nThe trace stays in {}/ — try `{} report --json {}` or `{} replay {} --at step=10`.",
        out_dir.display(),
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

fn main() -> ExitCode {
    let result = match std::env::args().nth(1).as_deref() {
        None => run(),
        Some("--program") => program(),
        Some(other) => Err(format!(
            "unknown argument '{other}' (no argument: the demo; --program: the training loop alone)"
        )),
    };
    match result {
        Ok(c) => c,
        Err(e) => {
            eprintln!("vramtrace-demo: error: {e}");
            ExitCode::from(2)
        }
    }
}
