//! What tracing costs the traced program on the CPU stand-ins, and whether it loses anything:
//!
//! ```text
//! cargo build --release --workspace && cargo bench -p vramtrace-tests --bench capture_overhead
//! ```
//!
//! Parts (`VRAMTRACE_BENCH_PARTS`, comma-separated; default `calls,flood,python`):
//!
//! - `calls`: the `bench_calls` workload (a `cudaMallocAsync` + `cudaFreeAsync` pair through the
//!   runtime, and the same through driver pointers from `cuGetProcAddress`), plain, traced with
//!   stacks off and traced with the default settings, in interleaved runs (each run one of each,
//!   so a change in the machine's load hits all alike). Per call: wall time, and the calling
//!   thread's own CPU time (time spent preempted or asleep is not counted: on a busy machine this
//!   is the stable one). Each figure is the median over runs of each run's median round. A round
//!   (20,000 pairs, 40,000 events: fewer than the default ring holds) starts after a pause of
//!   `PAUSE_MS`, so the writer has emptied the ring: it measures what a call pays while the writer
//!   keeps up. Back to back, a thread making nothing but calls outruns the writer and waits for
//!   it (spinning first, which counts as CPU): that limit is the `flood` part's.
//! - `flood`: the full-scale loss check with the default settings: 10 M pairs back to back on
//!   one thread, and 8 threads × 1 M pairs (`wl_threads`); prints the time taken, events per
//!   second, and what `vramtrace report --json` says was dropped or late. Then the writer's own
//!   capacity, from the self-profile (`VRAMTRACE_SELF_PROFILE=1`) of a 2 M-pair run: events per
//!   second of its busy time.
//! - `python`: `python_stacks.py` calls the stand-in runtime from 30 nested Python frames through
//!   `ctypes.PyDLL` (the GIL held, so the tracer reads the frames), with no stacks, 32 native
//!   frames, and the default (32 native + 32 Python frames). Skipped without `python3`.
//! - `callgrind`: instructions per call instead of time (exact, whatever the load), with
//!   `valgrind --tool=callgrind`: the instructions of `bench_calls 20000 1` inside its loop
//!   (the calls and their hooks), traced less plain, per pair.
//!
//! With `VRAMTRACE_BENCH_BASE=<an older libvramtrace.so>`, every part also runs that library in
//! the same interleaved rounds, so before and after are measured side by side.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use vramtrace_tests::{standin_ld_library_path, workload};

/// A configuration of the tracer: the environment it runs with (`None`: untraced).
struct Setup {
    name: &'static str,
    env: Option<&'static [(&'static str, &'static str)]>,
}

const SETUPS: &[Setup] = &[
    Setup {
        name: "plain",
        env: None,
    },
    Setup {
        name: "traced, no stacks",
        // The default ring, as users get it: a larger one costs the hook more (its slots stream
        // through the caches instead of staying in them).
        env: Some(&[("VRAMTRACE_STACK_DEPTH", "0")]),
    },
    Setup {
        name: "traced, default settings",
        env: Some(&[]),
    },
];

/// Runs of each setup (each a `bench_calls` process of 7 rounds).
const RUNS: usize = 9;
/// Pairs per round.
const PAIRS: &str = "20000";
/// Milliseconds before each round: the writer empties the ring meanwhile.
const PAUSE_MS: &str = "20";

/// The libraries compared: this build's, and an older one if asked.
struct Library {
    label: &'static str,
    path: PathBuf,
}

fn libraries() -> Vec<Library> {
    let exe = std::env::current_exe().expect("bench executable path");
    // target/release/deps/capture_overhead-… → target/release/libvramtrace.so
    let lib = exe
        .parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("libvramtrace.so"))
        .expect("target directory");
    if !lib.exists() {
        eprintln!(
            "error: {} is missing; run `cargo build --release --workspace` first",
            lib.display()
        );
        std::process::exit(2);
    }
    let mut libs = vec![Library {
        label: "this build",
        path: lib,
    }];
    if let Some(base) = std::env::var_os("VRAMTRACE_BENCH_BASE") {
        let path = PathBuf::from(base);
        if !path.exists() {
            eprintln!("error: VRAMTRACE_BENCH_BASE={} is missing", path.display());
            std::process::exit(2);
        }
        libs.push(Library {
            label: "base",
            path,
        });
    }
    libs
}

/// The `vramtrace` command of this build.
fn vramtrace(lib: &Path) -> PathBuf {
    let own = lib.with_file_name("vramtrace");
    if own.exists() {
        return own;
    }
    // A base library kept elsewhere: this build's command reads its traces.
    let exe = std::env::current_exe().expect("bench executable path");
    exe.parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("vramtrace"))
        .expect("target directory")
}

fn clear(dir: &Path) {
    for e in std::fs::read_dir(dir).expect("temp dir").flatten() {
        let _ = std::fs::remove_file(e.path());
    }
}

/// A command for `program`, traced by `lib` with `env` (untraced when `env` is `None`).
fn command(
    program: impl AsRef<std::ffi::OsStr>,
    lib: &Path,
    env: Option<&[(&str, &str)]>,
    dir: &Path,
) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("LD_LIBRARY_PATH", standin_ld_library_path());
    if let Some(env) = env {
        cmd.env("LD_PRELOAD", lib)
            .env("VRAMTRACE_OUTPUT", dir.join("bench-%p.vtrace"));
        for (k, v) in env {
            cmd.env(k, v);
        }
    }
    cmd
}

/// Wall and CPU ns per call of each measure of one `bench_calls` run.
fn run_calls(env: Option<&[(&str, &str)]>, lib: &Path, dir: &Path) -> BTreeMap<String, (f64, f64)> {
    let out = command(workload("bench_calls"), lib, env, dir)
        .args([PAIRS, "7", "all", PAUSE_MS])
        .output()
        .expect("run bench_calls");
    assert!(
        out.status.success(),
        "bench_calls failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    clear(dir);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let wall: f64 = f.get(1)?.parse().ok()?;
            let cpu: f64 = f.get(3)?.parse().ok()?;
            Some((f[0].to_string(), (wall, cpu)))
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

const MEASURES: [&str; 2] = ["runtime_async_pair", "driver_async_gpa"];

fn calls_part(libs: &[Library], dir: &Path) {
    // (library, setup, measure) → per-run (wall, cpu)
    let mut per: BTreeMap<(usize, usize, String), Vec<(f64, f64)>> = BTreeMap::new();
    for _ in 0..RUNS {
        for (l, lib) in libs.iter().enumerate() {
            for (s, setup) in SETUPS.iter().enumerate() {
                // The plain runs do not depend on the library: once per round.
                if setup.env.is_none() && l > 0 {
                    continue;
                }
                for (k, v) in run_calls(setup.env, &lib.path, dir) {
                    per.entry((l, s, k)).or_default().push(v);
                }
            }
        }
    }
    let med = |l: usize, s: usize, m: &str| -> (f64, f64) {
        let l = if SETUPS[s].env.is_none() { 0 } else { l };
        let v = per.get(&(l, s, m.to_string())).cloned().unwrap_or_default();
        if v.is_empty() {
            return (f64::NAN, f64::NAN);
        }
        (
            median(v.iter().map(|x| x.0).collect()),
            median(v.iter().map(|x| x.1).collect()),
        )
    };
    println!(
        "bench_calls: median over {RUNS} interleaved runs of each run's median of 7 rounds × {PAIRS} pairs, {PAUSE_MS} ms apart; ns per call"
    );
    println!(
        "{:<12} {:<26} {:>14} {:>14} {:>14} {:>14}",
        "library", "setup", "runtime wall", "runtime CPU", "driver wall", "driver CPU"
    );
    for (l, lib) in libs.iter().enumerate() {
        for (s, setup) in SETUPS.iter().enumerate() {
            if setup.env.is_none() && l > 0 {
                continue;
            }
            let (rw, rc) = med(l, s, MEASURES[0]);
            let (dw, dc) = med(l, s, MEASURES[1]);
            println!(
                "{:<12} {:<26} {rw:>14.1} {rc:>14.1} {dw:>14.1} {dc:>14.1}",
                if setup.env.is_none() { "-" } else { lib.label },
                setup.name
            );
        }
    }
    println!("\nadded by the tracer (traced − plain)");
    for (l, lib) in libs.iter().enumerate() {
        let add = |s: usize, m: &str| {
            let (w, c) = med(l, s, m);
            let (pw, pc) = med(0, 0, m);
            (w - pw, c - pc)
        };
        let (rw, rc) = add(1, MEASURES[0]);
        let (dw, dc) = add(1, MEASURES[1]);
        println!(
            "{:<12} stacks off, per call:              runtime {rw:>7.1} ns wall {rc:>7.1} ns CPU   driver {dw:>7.1} ns wall {dc:>7.1} ns CPU   (target: 50)",
            lib.label
        );
        let (rw, rc) = add(2, MEASURES[0]);
        let (dw, dc) = add(2, MEASURES[1]);
        println!(
            "{:<12} default settings, per pair:        runtime {:>7.1} ns wall {:>7.1} ns CPU   driver {:>7.1} ns wall {:>7.1} ns CPU   (target: 300 CPU)",
            lib.label,
            2.0 * rw,
            2.0 * rc,
            2.0 * dw,
            2.0 * dc
        );
    }
}

/// What a flood run found.
struct Flood {
    seconds: f64,
    events: u64,
    dropped: u64,
    late: u64,
}

/// Runs `wl_threads threads pairs` traced with the default settings and reads the trace's
/// counters back.
fn flood(lib: &Path, threads: u32, pairs: u64, dir: &Path) -> Flood {
    let start = Instant::now();
    let out = command(workload("wl_threads"), lib, Some(&[]), dir)
        .args([threads.to_string(), pairs.to_string()])
        .output()
        .expect("run wl_threads");
    let seconds = start.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "wl_threads failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trace = std::fs::read_dir(dir)
        .expect("temp dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "vtrace"))
        .expect("a trace");
    let report = Command::new(vramtrace(lib))
        .args(["report", "--json"])
        .arg(&trace)
        .output()
        .expect("vramtrace report");
    assert!(
        report.status.success(),
        "vramtrace report failed: {}",
        String::from_utf8_lossy(&report.stderr)
    );
    clear(dir);
    let text = String::from_utf8_lossy(&report.stdout);
    // The counters of `tracer` (docs/report-json.md): numbers after their keys.
    let counter = |key: &str| -> u64 {
        let tracer = &text[text.find("\"tracer\"").expect("a tracer section")..];
        let at = tracer.find(&format!("\"{key}\"")).expect(key) + key.len() + 2;
        tracer[at..]
            .trim_start_matches([':', ' '])
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse().ok())
            .expect(key)
    };
    Flood {
        seconds,
        events: counter("events_written"),
        dropped: counter("dropped"),
        late: counter("late"),
    }
}

/// The writer's capacity in events per second of its busy time, from the self-profile of a
/// 2 M-pair run (`None` for a library without the self-profile).
fn writer_capacity(lib: &Path, dir: &Path) -> Option<f64> {
    let out = command(
        workload("wl_threads"),
        lib,
        Some(&[("VRAMTRACE_SELF_PROFILE", "1")]),
        dir,
    )
    .args(["1", "2000000"])
    .output()
    .expect("run wl_threads");
    clear(dir);
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().find(|l| l.contains("it could take"))?;
    line.split("it could take ")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn flood_part(libs: &[Library], dir: &Path) {
    println!(
        "\nflood with the default settings (wl_threads), counted by `vramtrace report --json`"
    );
    println!(
        "{:<12} {:<22} {:>9} {:>12} {:>14} {:>9} {:>6}",
        "library", "run", "seconds", "events", "events/s", "dropped", "late"
    );
    for (threads, pairs) in [(1u32, 10_000_000u64), (8, 1_000_000)] {
        for lib in libs {
            let f = flood(&lib.path, threads, pairs, dir);
            println!(
                "{:<12} {:<22} {:>9.2} {:>12} {:>14.0} {:>9} {:>6}",
                lib.label,
                format!("{threads} × {pairs} pairs"),
                f.seconds,
                f.events,
                f.events as f64 / f.seconds,
                f.dropped,
                f.late
            );
        }
    }
    for lib in libs {
        match writer_capacity(&lib.path, dir) {
            Some(m) => println!(
                "{:<12} writer capacity (self-profile, 1 × 2 M pairs): {m:.1} M events per second of its busy time",
                lib.label
            ),
            None => println!("{:<12} writer capacity: no self-profile in this library", lib.label),
        }
    }
}

/// The Python part: setups as (name, VRAMTRACE_STACK_DEPTH, VRAMTRACE_PYTHON_DEPTH), `None`
/// for the untraced run.
const PY_SETUPS: &[(&str, Option<(&str, &str)>)] = &[
    ("plain", None),
    ("traced, no stacks", Some(("0", "0"))),
    ("traced, 32 native frames", Some(("32", "0"))),
    ("traced, default (32 + 32 Python)", Some(("32", "32"))),
];
/// Calls per round (two events per pair), rounds, nested Python frames.
const PY_ARGS: [&str; 3] = ["20000", "7", "30"];

/// Runs python_stacks.py once; median ns per call, `None` when python3 is missing.
fn run_python(setup: Option<(&str, &str)>, lib: &Path, dir: &Path) -> Option<f64> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/python_stacks.py");
    let env = setup.map(|(native, python)| {
        [
            ("VRAMTRACE_STACK_DEPTH", native),
            ("VRAMTRACE_PYTHON_DEPTH", python),
        ]
    });
    let out = command("python3", lib, env.as_ref().map(|e| &e[..]), dir)
        .arg(script)
        .args(PY_ARGS)
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "python_stacks.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    clear(dir);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("python_alloc_free ")?.trim().parse().ok())
}

fn python_part(libs: &[Library], dir: &Path) {
    let mut per: BTreeMap<(usize, usize), Vec<f64>> = BTreeMap::new();
    for _ in 0..RUNS {
        for (l, lib) in libs.iter().enumerate() {
            for (s, (_, setup)) in PY_SETUPS.iter().enumerate() {
                if setup.is_none() && l > 0 {
                    continue;
                }
                match run_python(*setup, &lib.path, dir) {
                    Some(ns) => per.entry((l, s)).or_default().push(ns),
                    None => {
                        println!("\npython3 not found: the Python stack part is skipped");
                        return;
                    }
                }
            }
        }
    }
    let med = |l: usize, s: usize| {
        let l = if PY_SETUPS[s].1.is_none() { 0 } else { l };
        per.get(&(l, s)).cloned().map_or(f64::NAN, median)
    };
    println!(
        "\npython_stacks.py ({} nested Python frames, cudaMalloc + cudaFree through ctypes.PyDLL): median ns per call over {RUNS} runs × {} rounds",
        PY_ARGS[2], PY_ARGS[1]
    );
    for (l, lib) in libs.iter().enumerate() {
        for (s, (name, setup)) in PY_SETUPS.iter().enumerate() {
            if setup.is_none() && l > 0 {
                continue;
            }
            let label = if setup.is_none() { "-" } else { lib.label };
            println!(
                "{label:<12} {name:<34} {:>10.1}   added {:>8.1}",
                med(l, s),
                med(l, s) - med(0, 0)
            );
        }
    }
}

/// Instructions of the calling thread of one callgrind run of `bench_calls 20000 1 <measure>`.
fn callgrind_instructions(
    env: Option<&[(&str, &str)]>,
    lib: &Path,
    measure: &str,
    dir: &Path,
) -> Option<u64> {
    let out_file = dir.join("cg.out");
    let mut cmd = command("valgrind", lib, env, dir);
    // Only what runs inside bench_calls' `run` (the calls and their hooks) is counted: not the
    // start, and not the wait at exit for the writer to finish.
    cmd.args([
        "--tool=callgrind",
        "--separate-threads=yes",
        "--toggle-collect=run",
    ])
    .arg(format!("--callgrind-out-file={}", out_file.display()))
    .arg(workload("bench_calls"))
    .args(["20000", "1", measure]);
    let out = cmd.output().ok()?;
    if !out.status.success() {
        return None;
    }
    // Thread 1 (the calling thread) is written to `<file>-01`; its summary line holds the count.
    let text = std::fs::read_to_string(dir.join("cg.out-01")).ok()?;
    clear(dir);
    text.lines()
        .find_map(|l| l.strip_prefix("summary: ")?.trim().parse().ok())
}

fn callgrind_part(libs: &[Library], dir: &Path) {
    println!("\ninstructions added per pair on the calling thread (callgrind, bench_calls 20000 pairs + 2001 warm-up)");
    let pairs = 22_001f64;
    for measure in ["runtime", "driver"] {
        let Some(plain) = callgrind_instructions(None, &libs[0].path, measure, dir) else {
            println!("valgrind not usable: the callgrind part is skipped");
            return;
        };
        for lib in libs {
            for setup in &SETUPS[1..] {
                let traced = callgrind_instructions(setup.env, &lib.path, measure, dir);
                match traced {
                    Some(t) => println!(
                        "{:<12} {measure:<8} {:<26} {:>8.0}",
                        lib.label,
                        setup.name,
                        (t as f64 - plain as f64) / pairs
                    ),
                    None => println!("{:<12} {measure:<8} {:<26} failed", lib.label, setup.name),
                }
            }
        }
    }
}

fn main() {
    // `cargo bench` passes --bench; nothing else is accepted.
    let libs = libraries();
    let dir = tempfile::tempdir().expect("temp dir");
    let parts =
        std::env::var("VRAMTRACE_BENCH_PARTS").unwrap_or_else(|_| "calls,flood,python".into());
    for part in parts.split(',').map(str::trim) {
        match part {
            "calls" => calls_part(&libs, dir.path()),
            "flood" => flood_part(&libs, dir.path()),
            "python" => python_part(&libs, dir.path()),
            "callgrind" => callgrind_part(&libs, dir.path()),
            "" => {}
            other => {
                eprintln!(
                    "error: VRAMTRACE_BENCH_PARTS has an unknown part '{other}' (known: calls, flood, python, callgrind)"
                );
                std::process::exit(2);
            }
        }
    }
}
