//! Added cost per intercepted call: runs the `bench_calls` workload against the CPU stand-ins
//! plain and under `LD_PRELOAD=libvramtrace.so` (release build), with and without native stack
//! capture, and prints the median nanoseconds each hook adds.
//!
//! ```text
//! cargo build --release --workspace && cargo bench -p vramtrace-tests --bench capture_overhead
//! ```
//!
//! Two regimes are measured. "Hook cost": each round's events fit in the ring, so the number is
//! what the calling thread pays. "Sustained": a million back-to-back calls per round with the
//! default ring, so the collector thread's write rate bounds the calls (events per second).
//!
//! Then the cost of stacks with Python frames: `python_stacks.py` calls the stand-in runtime from
//! 30 nested Python frames through `ctypes.PyDLL` (the GIL held, so the tracer reads the frames),
//! with no stacks, 32 native frames, and 32 native + 32 Python frames. Skipped without `python3`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use vramtrace_tests::{standin_ld_library_path, workload};

/// One configuration of the tracer.
struct Setup {
    name: &'static str,
    traced: bool,
    env: &'static [(&'static str, &'static str)],
    iterations: u64,
}

const SETUPS: &[Setup] = &[
    Setup {
        name: "plain",
        traced: false,
        env: &[],
        iterations: 20_000,
    },
    Setup {
        name: "traced, no stacks",
        traced: true,
        env: &[
            ("VRAMTRACE_STACK_DEPTH", "0"),
            ("VRAMTRACE_BUFFER_EVENTS", "1048576"),
        ],
        iterations: 20_000,
    },
    Setup {
        name: "traced, 32 native frames",
        traced: true,
        env: &[
            ("VRAMTRACE_STACK_DEPTH", "32"),
            ("VRAMTRACE_BUFFER_EVENTS", "1048576"),
        ],
        iterations: 20_000,
    },
    Setup {
        name: "plain, sustained",
        traced: false,
        env: &[],
        iterations: 1_000_000,
    },
    Setup {
        name: "traced, no stacks, sustained",
        traced: true,
        env: &[("VRAMTRACE_STACK_DEPTH", "0")],
        iterations: 1_000_000,
    },
];

const RUNS: usize = 9;

/// The Python part: setups as (name, VRAMTRACE_STACK_DEPTH, VRAMTRACE_PYTHON_DEPTH), `None` for
/// the untraced run.
const PY_SETUPS: &[(&str, Option<(&str, &str)>)] = &[
    ("plain", None),
    ("traced, no stacks", Some(("0", "0"))),
    ("traced, 32 native frames", Some(("32", "0"))),
    ("traced, 32 native + 32 Python", Some(("32", "32"))),
];
/// Calls per round (two events per pair), rounds, nested Python frames.
const PY_ARGS: [&str; 3] = ["20000", "7", "30"];

fn library() -> PathBuf {
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
    lib
}

/// Runs bench_calls once; returns median ns per call for each measure.
fn run_once(setup: &Setup, lib: &PathBuf, out_dir: &std::path::Path) -> BTreeMap<String, f64> {
    let mut cmd = Command::new(workload("bench_calls"));
    cmd.args([setup.iterations.to_string(), "7".into()])
        .env("LD_LIBRARY_PATH", standin_ld_library_path());
    if setup.traced {
        cmd.env("LD_PRELOAD", lib)
            .env("VRAMTRACE_OUTPUT", out_dir.join("bench-%p.vtrace"));
        for (k, v) in setup.env {
            cmd.env(k, v);
        }
    }
    let out = cmd.output().expect("run bench_calls");
    assert!(
        out.status.success(),
        "bench_calls failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for e in std::fs::read_dir(out_dir).expect("temp dir").flatten() {
        let _ = std::fs::remove_file(e.path());
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let name = f.next()?.to_string();
            let median: f64 = f.next()?.parse().ok()?;
            Some((name, median))
        })
        .collect()
}

/// Runs python_stacks.py once; median ns per call, `None` when python3 is missing.
fn run_python(
    setup: Option<(&str, &str)>,
    lib: &PathBuf,
    out_dir: &std::path::Path,
) -> Option<f64> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/python_stacks.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script)
        .args(PY_ARGS)
        .env("LD_LIBRARY_PATH", standin_ld_library_path());
    if let Some((native, python)) = setup {
        cmd.env("LD_PRELOAD", lib)
            .env("VRAMTRACE_OUTPUT", out_dir.join("py-%p.vtrace"))
            .env("VRAMTRACE_BUFFER_EVENTS", "1048576")
            .env("VRAMTRACE_STACK_DEPTH", native)
            .env("VRAMTRACE_PYTHON_DEPTH", python);
    }
    let out = cmd.output().ok()?;
    assert!(
        out.status.success(),
        "python_stacks.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for e in std::fs::read_dir(out_dir).expect("temp dir").flatten() {
        let _ = std::fs::remove_file(e.path());
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("python_alloc_free ")?.trim().parse().ok())
}

/// The Python part of the bench.
fn python_part(lib: &PathBuf, dir: &std::path::Path) {
    let mut per: Vec<Vec<f64>> = vec![Vec::new(); PY_SETUPS.len()];
    for _ in 0..RUNS {
        for (i, (_, setup)) in PY_SETUPS.iter().enumerate() {
            match run_python(*setup, lib, dir) {
                Some(ns) => per[i].push(ns),
                None => {
                    println!("\npython3 not found: the Python stack part is skipped");
                    return;
                }
            }
        }
    }
    let med: Vec<f64> = per.into_iter().map(median).collect();
    println!(
        "\nmedian ns per call over {RUNS} runs × {} rounds (python_stacks.py, {} nested Python frames, cudaMalloc + cudaFree through ctypes.PyDLL)",
        PY_ARGS[1], PY_ARGS[2]
    );
    for ((name, _), m) in PY_SETUPS.iter().zip(&med) {
        println!("{name:<32} {m:>10.1}   added {:>8.1}", m - med[0]);
    }
    println!(
        "stacks per event: native {:.1} ns, native + Python {:.1} ns (Python alone {:.1} ns)",
        med[2] - med[1],
        med[3] - med[1],
        med[3] - med[2]
    );
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes --bench; nothing else is accepted.
    let lib = library();
    let dir = tempfile::tempdir().expect("temp dir");
    if std::env::var_os("VRAMTRACE_BENCH_PYTHON_ONLY").is_some() {
        python_part(&lib, dir.path());
        return;
    }
    // Runs interleave the setups, so a change in the machine's load hits all of them alike.
    let mut per: Vec<BTreeMap<String, Vec<f64>>> = vec![BTreeMap::new(); SETUPS.len()];
    for _ in 0..RUNS {
        for (i, setup) in SETUPS.iter().enumerate() {
            for (k, v) in run_once(setup, &lib, dir.path()) {
                per[i].entry(k).or_default().push(v);
            }
        }
    }
    let results: Vec<(&str, BTreeMap<String, f64>)> = SETUPS
        .iter()
        .zip(per)
        .map(|(setup, p)| {
            let med = p.into_iter().map(|(k, v)| (k, median(v))).collect();
            (setup.name, med)
        })
        .collect();
    println!("median ns per call over {RUNS} runs × 7 rounds (bench_calls)");
    println!(
        "{:<32} {:>20} {:>20} {:>22}",
        "setup", "runtime_async_pair", "driver_async_gpa", "baseline_ctx_device"
    );
    for (name, m) in &results {
        println!(
            "{:<32} {:>20.1} {:>20.1} {:>22.1}",
            name,
            m.get("runtime_async_pair").copied().unwrap_or(f64::NAN),
            m.get("driver_async_gpa").copied().unwrap_or(f64::NAN),
            m.get("baseline_ctx_device").copied().unwrap_or(f64::NAN),
        );
    }
    let base = &results[0].1;
    let sustained_base = &results[3].1;
    println!("\nadded ns per call (traced − plain)");
    for (i, (name, m)) in results.iter().enumerate().skip(1) {
        if i == 3 {
            continue;
        }
        let b = if i >= 3 { sustained_base } else { base };
        let add =
            |k: &str| m.get(k).copied().unwrap_or(f64::NAN) - b.get(k).copied().unwrap_or(f64::NAN);
        println!(
            "{:<32} runtime {:>8.1}   driver {:>8.1}",
            name,
            add("runtime_async_pair"),
            add("driver_async_gpa")
        );
    }
    if let Some((_, m)) = results.get(4) {
        let ns = m.get("driver_async_gpa").copied().unwrap_or(f64::NAN);
        println!(
            "\nsustained: about {:.1} million events per second through the collector",
            1e3 / ns
        );
    }
    python_part(&lib, dir.path());
}
