//! The reliability trials behind `docs/reliability.md`: damaged traces (cut at every byte,
//! randomly mutated), processes killed at random moments, fork and thread storms, a full disk,
//! read-only directories, descriptor limits, bad settings, existing files in the trace's way,
//! and the exit delay with threads still allocating. Each trial counts how many attempts
//! survived — no panic, no hang, the program's output and exit unchanged, every trace left behind
//! readable — and the run ends with the table the document holds.
//!
//! Ignored by a plain `cargo test` (it takes a couple of minutes); `validation/reliability.sh`
//! runs it on a release build:
//! `cargo test --release -p vramtrace-tests --test reliability -- --ignored --nocapture`.
//! Random choices come from a fixed seed, so a rerun makes the same attempts.

mod damage;
mod environment;
mod processes;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// One row of the table.
pub struct Row {
    pub what: String,
    pub trials: u64,
    pub survived: u64,
    pub detail: String,
}

/// A small fast generator (xorshift64*), seeded per trial: the same attempts on every run.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// A finished command, or `None` when it ran past `limit` (then killed): a hang.
pub fn run_with_limit(mut c: Command, limit: Duration) -> Option<Output> {
    use std::process::Stdio;
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting a trial's command");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("waiting").is_some() {
            return Some(child.wait_with_output().expect("collecting output"));
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// `vramtrace report --json PATH` with a time limit: `Ok(json)` on success, `Err(stderr)` for an
/// error of vramtrace's own (exit 2 with one `error:` line); panics on anything else (a crash,
/// a hang, a multi-line error), which no damaged trace may cause.
pub fn report(path: &Path) -> Result<serde_json::Value, String> {
    let mut c = vramtrace_tests::traced::vramtrace_command();
    c.args(["report", "--json"]).arg(path);
    let out = run_with_limit(c, Duration::from_secs(30))
        .unwrap_or_else(|| panic!("vramtrace report hung on {}", path.display()));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    match out.status.code() {
        Some(0) => Ok(serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{}: report printed no JSON: {e}", path.display()))),
        Some(2) => {
            assert!(
                stderr.starts_with("error: ") && stderr.lines().count() == 1,
                "{}: not one error line: {stderr}",
                path.display()
            );
            Err(stderr)
        }
        other => panic!("{}: report exited {other:?}: {stderr}", path.display()),
    }
}

/// A temporary directory for one trial.
pub fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("vramtrace-reliability-{name}-"))
        .tempdir()
        .expect("a temporary directory")
}

fn print_table(rows: &[Row]) {
    println!("\n| what was tried | trials | survived | what held |");
    println!("| --- | ---: | ---: | --- |");
    for r in rows {
        println!(
            "| {} | {} | {} | {} |",
            r.what, r.trials, r.survived, r.detail
        );
    }
    println!();
}

#[test]
#[ignore = "the reliability trials take minutes: validation/reliability.sh runs them"]
fn reliability_trials() {
    let start = Instant::now();
    let mut rows = Vec::new();
    type Trial = fn() -> Vec<Row>;
    let trials: [(&str, Trial); 3] = [
        ("damaged traces", damage::trials),
        ("processes", processes::trials),
        ("environment", environment::trials),
    ];
    for (name, trial) in trials {
        let t = Instant::now();
        let got = trial();
        eprintln!("{name}: {:.1?}", t.elapsed());
        for r in &got {
            eprintln!(
                "  {}: {}/{} survived; {}",
                r.what, r.survived, r.trials, r.detail
            );
        }
        rows.extend(got);
    }
    print_table(&rows);
    eprintln!("all trials: {:.1?}", start.elapsed());
    let failed: Vec<&Row> = rows.iter().filter(|r| r.survived != r.trials).collect();
    assert!(
        failed.is_empty(),
        "trials that did not all survive: {:?}",
        failed.iter().map(|r| &r.what).collect::<Vec<_>>()
    );
}
