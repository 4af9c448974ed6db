//! Long runs on the CPU stand-ins: a training loop flat out for minutes under a disk budget,
//! and a flood of calls with the live analysis on and off.
//!
//! ```text
//! cargo build --release --workspace && cargo bench -p vramtrace-tests --bench soak
//! ```
//!
//! Parts (`VRAMTRACE_BENCH_PARTS`, comma-separated; default `soak,flood`):
//!
//! - `soak`: `wl_soak` for `VRAMTRACE_BENCH_SOAK_SECONDS` (600) flat out — 1,000 temporaries a
//!   step, a 64 KiB buffer kept every 100 steps at `keep_history` — traced with
//!   `VRAMTRACE_MAX_BYTES` = `VRAMTRACE_BENCH_SOAK_BUDGET` (1GiB) and the default segments.
//!   Every 100 ms it measures the trace directory and the traced process's resident memory.
//!   Then `vramtrace report --json` of the directory (every segment there) and of its last
//!   segment (`--last 0`), each timed and with its peak memory (`/usr/bin/time -v`): the planted
//!   leak as the report finds it, what rotation removed, and whether the two reports' live sets
//!   agree field by field. `VRAMTRACE_BENCH_KEEP=1` leaves the trace behind.
//! - `flood`: `wl_soak` `VRAMTRACE_BENCH_FLOOD_STEPS` (3,000) steps of 500 temporaries back to
//!   back, three more threads making temporaries meanwhile, with a 64 KiB leak every step
//!   (alerts above 32 KiB a step, confirmed over 600 steps), with the live analysis off
//!   (`VRAMTRACE_ALERT=0`) and on, in interleaved rounds: wall time and the process's CPU time, the alerts raised and the
//!   analysis's notes (lowered resolution, or switched off). The library is this build's, or
//!   `VRAMTRACE_BENCH_FLOOD_LIB` (a debug build's writer falls behind where a release build's
//!   keeps up); `VRAMTRACE_BENCH_BASE` runs an older library in the same rounds.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use vramtrace_tests::{standin_ld_library_path, workload};

/// This build's `target/release` directory.
fn release_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("bench executable path");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target directory");
    if !dir.join("libvramtrace.so").exists() || !dir.join("vramtrace").exists() {
        eprintln!("error: run `cargo build --release --workspace` first");
        std::process::exit(2);
    }
    dir.to_path_buf()
}

/// `wl_soak ARGS`, traced into `dir` with `env`.
fn soak(dir: &Path, args: &[&str], env: &[(&str, String)]) -> Command {
    let mut c = Command::new(workload("wl_soak"));
    c.args(args)
        .env("LD_LIBRARY_PATH", standin_ld_library_path())
        .env("LD_PRELOAD", release_dir().join("libvramtrace.so"))
        .env("VRAMTRACE_OUTPUT", dir.join("soak.vtrace"))
        .env("STANDIN_DEVICE_MEM", "512G")
        .stdout(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn dir_bytes(dir: &Path) -> u64 {
    (std::fs::read_dir(dir).into_iter().flatten())
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// Resident memory of process `pid`, bytes.
fn rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// CPU seconds (user + system) of the process `pid` so far.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks / hz)
}

/// `vramtrace ARGS`, timed, with its peak memory; its stdout.
fn vramtrace_timed(args: &[&str]) -> (Value, f64, u64) {
    let out = Command::new("/usr/bin/time")
        .arg("-v")
        .arg(release_dir().join("vramtrace"))
        .args(args)
        .output()
        .expect("running vramtrace under /usr/bin/time");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "vramtrace {args:?}: {err}");
    let field = |name: &str| {
        err.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    let rss_kb: u64 = field("Maximum resident set size (kbytes):")
        .parse()
        .unwrap_or(0);
    let wall = field("Elapsed (wall clock) time (h:mm:ss or m:ss):");
    let seconds = wall
        .split(':')
        .fold(0.0, |acc, p| acc * 60.0 + p.parse::<f64>().unwrap_or(0.0));
    let json = serde_json::from_slice(&out.stdout).expect("a JSON document");
    (json, seconds, rss_kb * 1024)
}

fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

fn soak_part() {
    let seconds: u64 = std::env::var("VRAMTRACE_BENCH_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let budget = std::env::var("VRAMTRACE_BENCH_SOAK_BUDGET").unwrap_or_else(|_| "1GiB".into());
    let budget_bytes = vramtrace_collector::units::parse_size(&budget).expect("a size");
    let tmp = tempfile::Builder::new()
        .prefix("vramtrace-soak-")
        .tempdir()
        .unwrap();
    let dir = tmp.path();
    // VRAMTRACE_BENCH_KEEP=1 leaves the trace behind, to look at.
    let keep = std::env::var_os("VRAMTRACE_BENCH_KEEP").is_some_and(|v| v == "1");
    println!("soak: wl_soak {seconds}s flat out, 1000 temporaries a step, 64 KiB kept every 100 steps, VRAMTRACE_MAX_BYTES={budget}");
    let env = [("VRAMTRACE_MAX_BYTES", budget.clone())];
    let run = format!("{seconds}s");
    let mut child = soak(dir, &[&run, "1000", "100", "65536"], &env)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (start, mut most, mut rss_by_minute) = (Instant::now(), 0u64, Vec::<u64>::new());
    while child.try_wait().unwrap().is_none() {
        most = most.max(dir_bytes(dir));
        let minute = (start.elapsed().as_secs() / 60) as usize;
        if let Some(r) = rss(child.id()) {
            if rss_by_minute.len() <= minute {
                rss_by_minute.resize(minute + 1, 0);
            }
            rss_by_minute[minute] = rss_by_minute[minute].max(r);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let steps = String::from_utf8_lossy(&out.stderr).trim().to_string();
    println!("  ran {:.0} s: {steps}", start.elapsed().as_secs_f64());
    println!(
        "  trace directory: at most {:.1} MiB of {:.1} MiB ({}), {} files at the end, {:.1} MiB",
        mib(most),
        mib(budget_bytes),
        if most <= budget_bytes {
            "within"
        } else {
            "OVER"
        },
        std::fs::read_dir(dir).unwrap().count(),
        mib(dir_bytes(dir))
    );
    let by_minute: Vec<String> = rss_by_minute
        .iter()
        .map(|r| format!("{:.0}", mib(*r)))
        .collect();
    println!(
        "  traced process's resident memory, MiB, highest each minute: {}",
        by_minute.join(" ")
    );
    let d = dir.to_str().unwrap();
    let (whole, whole_s, whole_rss) = vramtrace_timed(&["report", "--json", d]);
    let (last, last_s, last_rss) = vramtrace_timed(&["report", "--json", "--last", "0", d]);
    let events = &whole["tracer"]["events_written"];
    let segments = &whole["reading"]["segments"];
    println!(
        "  events written: {events}; segments {}-{} there",
        segments["first_there"], segments["last_there"]
    );
    println!("  removed by rotation: {}", segments["removed"]);
    println!("  dropped: {}", whole["tracer"]["dropped"]);
    println!(
        "  report of the segments there: {whole_s:.2} s, {:.0} MiB peak, {} records",
        mib(whole_rss),
        whole["reading"]["records"]
    );
    println!(
        "  report of the last segment (--last 0): {last_s:.2} s, {:.0} MiB peak, {} records",
        mib(last_rss),
        last["reading"]["records"]
    );
    let same: Vec<&str> = ["live", "call_sites", "groups", "orphans", "communicators"]
        .into_iter()
        .filter(|k| whole[*k] == last[*k])
        .collect();
    println!("  the same in both: {same:?}");
    for (label, report) in [("segments there", &whole), ("last segment", &last)] {
        let leak = (report["analysis"]["diagnosis"]
            .as_array()
            .into_iter()
            .flatten())
        .find(|f| {
            f["site"]["label"]
                .as_str()
                .is_some_and(|l| l.starts_with("keep_history"))
        });
        match leak {
            Some(f) => println!(
                "  {label}: {} {} at {} ({}): {} B per step, R² {}",
                f["severity"],
                f["class"],
                f["site"]["label"],
                f["site"]["site"],
                f["evidence"]["rate"],
                f["evidence"]["r2"]
            ),
            None => println!("  {label}: the leak at keep_history is NOT found"),
        }
    }
    let line = (whole["call_sites"].as_array().into_iter().flatten())
        .flat_map(|s| s["frames"].as_array().into_iter().flatten())
        .find(|f| f["function"] == "keep_history");
    if let Some(f) = line {
        println!("  its line: {}:{}", f["file"], f["line"]);
    }
    if keep {
        println!("  kept: {}", tmp.keep().display());
    }
}

fn flood_part() {
    // The flood of the test `a_flood_lowers_the_resolution_and_the_leak_still_alerts`: 500
    // temporaries a step back to back and three threads making more, 64 KiB kept every step,
    // alerts above 32 KiB a step once the growth has lasted 600 steps.
    let steps = std::env::var("VRAMTRACE_BENCH_FLOOD_STEPS").unwrap_or_else(|_| "3000".into());
    let lib = std::env::var_os("VRAMTRACE_BENCH_FLOOD_LIB")
        .map(PathBuf::from)
        .unwrap_or_else(|| release_dir().join("libvramtrace.so"));
    let mut libs = vec![("this build", lib)];
    if let Some(base) = std::env::var_os("VRAMTRACE_BENCH_BASE") {
        libs.push(("base", PathBuf::from(base)));
    }
    println!("flood: wl_soak {steps} steps of 500 temporaries and 3 more threads, 64 KiB kept every step; 3 rounds");
    let tmp = tempfile::Builder::new()
        .prefix("vramtrace-flood-")
        .tempdir()
        .unwrap();
    struct Row {
        label: String,
        lib: PathBuf,
        alert: &'static str,
        runs: Vec<(f64, f64)>,
    }
    let mut rows: Vec<Row> = (libs.iter())
        .flat_map(|(name, lib)| {
            [("0", "VRAMTRACE_ALERT=0"), ("1", "alerts on")].map(|(alert, what)| Row {
                label: format!("{name}, {what}"),
                lib: lib.clone(),
                alert,
                runs: Vec::new(),
            })
        })
        .collect();
    for round in 0..3 {
        for (i, row) in rows.iter_mut().enumerate() {
            let dir = tmp.path().join(format!("{round}-{i}"));
            std::fs::create_dir(&dir).unwrap();
            let env = [
                ("VRAMTRACE_ALERT", row.alert.to_string()),
                ("VRAMTRACE_ALERT_THRESHOLD", "32KiB".to_string()),
                ("VRAMTRACE_ALERT_CONFIRM", "600".to_string()),
                ("VRAMTRACE_QUIET", "1".to_string()),
                ("STANDIN_DEVICE_MEM", "64G".to_string()),
            ];
            let start = Instant::now();
            let mut child = soak(&dir, &[&steps, "500", "1", "65536", "4"], &env)
                .env("LD_PRELOAD", &row.lib)
                .spawn()
                .unwrap();
            let mut cpu = 0.0;
            while child.try_wait().unwrap().is_none() {
                cpu = cpu_seconds(child.id()).unwrap_or(cpu);
                std::thread::sleep(Duration::from_millis(5));
            }
            row.runs.push((start.elapsed().as_secs_f64(), cpu));
            if row.alert == "1" && round == 0 {
                let (r, _, _) = vramtrace_timed(&["report", "--json", dir.to_str().unwrap()]);
                let alerts: Vec<String> =
                    (r["analysis"]["alerts"].as_array().into_iter().flatten())
                        .map(|a| format!("step {} ({} B per {})", a["step"], a["rate"], a["unit"]))
                        .collect();
                println!("  {}: alerts {alerts:?}", row.label);
                let notes = (r["warnings"]["list"].as_array().into_iter().flatten())
                    .filter_map(Value::as_str)
                    .filter(|w| w.contains("live analysis"));
                for n in notes {
                    println!("    {n}");
                }
            }
        }
    }
    println!("  {:<32} {:>8} {:>8}", "run", "wall s", "CPU s");
    for row in &rows {
        let median = |f: fn(&(f64, f64)) -> f64| {
            let mut v: Vec<f64> = row.runs.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let walls: Vec<String> = row.runs.iter().map(|r| format!("{:.2}", r.0)).collect();
        println!(
            "  {:<32} {:>8.2} {:>8.2}   (medians; walls {})",
            row.label,
            median(|r| r.0),
            median(|r| r.1),
            walls.join(", ")
        );
    }
}

fn main() {
    let parts = std::env::var("VRAMTRACE_BENCH_PARTS").unwrap_or_else(|_| "soak,flood".into());
    for part in parts.split(',').map(str::trim) {
        match part {
            "soak" => soak_part(),
            "flood" => flood_part(),
            "" => {}
            other => {
                eprintln!("error: unknown part '{other}' (soak, flood)");
                std::process::exit(2);
            }
        }
    }
}
