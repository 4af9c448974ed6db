//! The Parquet export against the CSV of every event, on one large trace: `cargo bench -p
//! vramtrace-tools --bench export`. Runs the built `vramtrace` (this profile's) on the trace,
//! pinned to one CPU, in interleaved rounds: `export --format parquet` into a new directory and
//! `export --format csv-events -o -` into a pipe this bench counts; per run the wall time and the
//! CPU time of the process (every thread: the one-core figure), and the sizes.
//!
//! The trace: `VRAMTRACE_BENCH_TRACE`, else the replay bench's plain mix of
//! `VRAMTRACE_BENCH_EVENTS` events (default 50 million) in the temporary directory, made by
//!
//! ```text
//! VRAMTRACE_BENCH_EVENTS=50000000 VRAMTRACE_BENCH_PHASES=none \
//!     cargo bench -p vramtrace-collector --bench replay
//! ```
//!
//! `VRAMTRACE_BENCH_ROUNDS` (default 3) sets the rounds; `VRAMTRACE_BENCH_CSV=0` skips the CSV.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// CPU seconds (user + system) of the finished children of this process so far.
fn children_cpu() -> f64 {
    // SAFETY: getrusage fills the struct it is given; a zeroed rusage is a valid value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_CHILDREN with a valid pointer to an rusage.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(u.ru_utime) + s(u.ru_stime)
}

/// `vramtrace ARGS` pinned to CPU 0: every thread of it shares one core.
fn pinned(args: &[&std::ffi::OsStr]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vramtrace"));
    c.args(args);
    // SAFETY: only sched_setaffinity, which is async-signal-safe, runs between fork and exec.
    unsafe {
        c.pre_exec(|| {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    c
}

/// Bytes of every file under `path`.
fn size(path: &Path) -> u64 {
    if path.is_dir() {
        std::fs::read_dir(path)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| size(&e.path()))
            .sum()
    } else {
        std::fs::metadata(path).map_or(0, |m| m.len())
    }
}

struct Run {
    wall: f64,
    cpu: f64,
    bytes: u64,
}

fn parquet(trace: &Path, out: &Path) -> (Run, u64) {
    let _ = std::fs::remove_dir_all(out);
    let (t, cpu) = (Instant::now(), children_cpu());
    let done = pinned(&[
        "export".as_ref(),
        "--format".as_ref(),
        "parquet".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
        trace.as_os_str(),
    ])
    .output()
    .expect("run vramtrace");
    let run = Run {
        wall: t.elapsed().as_secs_f64(),
        cpu: children_cpu() - cpu,
        bytes: size(out),
    };
    let said = String::from_utf8_lossy(&done.stderr);
    assert!(done.status.success(), "export --format parquet: {said}");
    // "wrote DIR (run R, 1 trace: N events as …"
    let events = said
        .split(" events as ")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no event count in: {said}"));
    let _ = std::fs::remove_dir_all(out);
    (run, events)
}

fn csv(trace: &Path) -> Run {
    let (t, cpu) = (Instant::now(), children_cpu());
    let mut child = pinned(&[
        "export".as_ref(),
        "--format".as_ref(),
        "csv-events".as_ref(),
        "-o".as_ref(),
        "-".as_ref(),
        trace.as_os_str(),
    ])
    .stdout(Stdio::piped())
    .spawn()
    .expect("run vramtrace");
    let mut out = child.stdout.take().expect("piped");
    let mut buf = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes += n as u64,
            Err(e) => panic!("reading the CSV: {e}"),
        }
    }
    assert!(
        child.wait().expect("wait").success(),
        "export --format csv-events"
    );
    Run {
        wall: t.elapsed().as_secs_f64(),
        cpu: children_cpu() - cpu,
        bytes,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let testing = !std::env::args().any(|a| a == "--bench");
    let events: u64 = std::env::var("VRAMTRACE_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000_000);
    let trace = std::env::var_os("VRAMTRACE_BENCH_TRACE")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join(format!("vramtrace-bench-{events}.vtrace")));
    if !trace.is_file() {
        eprintln!(
            "export bench: {} is missing; make it with VRAMTRACE_BENCH_EVENTS={events} \
             VRAMTRACE_BENCH_PHASES=none cargo bench -p vramtrace-collector --bench replay",
            trace.display()
        );
        std::process::exit(if testing { 0 } else { 2 });
    }
    if testing {
        return;
    }
    let rounds: usize = std::env::var("VRAMTRACE_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let with_csv = std::env::var("VRAMTRACE_BENCH_CSV").map_or(true, |v| v != "0");
    let out = std::env::temp_dir().join("vramtrace-bench-export.parquet");
    let trace_bytes = size(&trace);
    println!("trace: {} ({trace_bytes} bytes)", trace.display());
    let (mut pq, mut text) = (Vec::new(), Vec::new());
    let mut n = 0;
    for round in 0..rounds {
        let (run, events) = parquet(&trace, &out);
        n = events;
        println!(
            "round {round}: parquet {:.2} s wall, {:.2} s CPU, {} bytes",
            run.wall, run.cpu, run.bytes
        );
        pq.push(run);
        if with_csv && round == 0 {
            let run = csv(&trace);
            println!(
                "round {round}: csv-events {:.2} s wall, {:.2} s CPU, {} bytes",
                run.wall, run.cpu, run.bytes
            );
            text.push(run);
        }
    }
    let cpu = median(pq.iter().map(|r| r.cpu).collect());
    let wall = median(pq.iter().map(|r| r.wall).collect());
    let bytes = pq[0].bytes;
    println!(
        "parquet: {n} events; median {cpu:.2} s CPU ({:.2} M events per CPU second), {wall:.2} s \
         wall on one core ({:.2} M events/s); {bytes} bytes ({:.2} bytes/event)",
        n as f64 / cpu / 1e6,
        n as f64 / wall / 1e6,
        bytes as f64 / n as f64
    );
    if let Some(c) = text.first() {
        println!(
            "csv-events: {:.2} s CPU ({:.2} M events per CPU second); {} bytes; parquet is {:.1}x \
             smaller",
            c.cpu,
            n as f64 / c.cpu / 1e6,
            c.bytes,
            c.bytes as f64 / bytes as f64
        );
    }
}
