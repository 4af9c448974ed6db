//! Processes under stress: killed at random moments, fork storms (children ending with `exit`
//! and `_exit`), thread storms with and without room in the buffer, Python `multiprocessing`
//! workers, and the exit delay while threads still allocate.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use vramtrace_collector::event::Api;
use vramtrace_collector::format::TraceReader;
use vramtrace_collector::live::LiveState;
use vramtrace_tests::trace::Trace;
use vramtrace_tests::traced::{trace_files, traced_program, Workload};

use crate::{report, scratch, Rng, Row};

/// Kill trials.
const KILLS: u64 = 60;
/// Children per fork storm.
const FORKS: u64 = 400;
const UNDERSCORE_EXIT_FORKS: u64 = 200;
/// Runs of each thread storm.
const STORMS: u64 = 5;
/// Exit-delay runs per thread count.
const EXIT_RUNS: u64 = 5;
/// The exit delay the tracer promises with threads still allocating.
const EXIT_BOUND: Duration = Duration::from_millis(100);

fn kills() -> Row {
    let mut rng = Rng::new(0x5eed_0009);
    let (mut survived, mut left, mut empty, mut events) = (0, 0, 0, Vec::new());
    for _ in 0..KILLS {
        let dir = scratch("kill");
        let mut child = Workload::new("wl_threads")
            .arg("8")
            .arg("4000")
            .traced_command(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_micros(rng.below(150_000)));
        let _ = child.kill();
        let _ = child.wait();
        let mut ok = true;
        for path in trace_files(dir.path()) {
            left += 1;
            let len = std::fs::metadata(&path).unwrap().len();
            if len == 0 {
                empty += 1;
                ok = false;
                continue;
            }
            match TraceReader::open(&path) {
                Ok(mut reader) => {
                    let mut state = LiveState::new();
                    state.replay(&mut reader);
                    events.push(state.events());
                    ok &= report(&path).is_ok();
                }
                Err(_) => ok = false,
            }
        }
        survived += u64::from(ok);
    }
    events.sort_unstable();
    let median = events.get(events.len() / 2).copied().unwrap_or(0);
    Row {
        what: "SIGKILL at a random moment (0–150 ms) of 8 threads × 4000 allocate/free pairs"
            .into(),
        trials: KILLS,
        survived,
        detail: format!(
            "{left} traces left behind (a run killed before its first call leaves none), every \
             one readable and reported, {empty} empty; median {median} events recovered"
        ),
    }
}

/// `wl_fork N` or `wl_harm fork-_exit N`: every child's trace whole, with its three calls.
fn fork_storm(workload: &str, mode: Option<&str>, n: u64, ending: &str) -> Row {
    let dir = scratch("fork");
    let mut w = Workload::new(workload);
    if let Some(m) = mode {
        w = w.arg(m);
    }
    let run = w.arg(n.to_string()).run_both(dir.path());
    let mut survived = 0;
    for path in &run.traces {
        let t = Trace::load(path);
        if t.header.forked_from.is_none() {
            continue;
        }
        let whole = t.ending.is_complete()
            && t.end_reasons == [ending]
            && t.stats().dropped == 0
            && t.counts().get(&Api::CudaMalloc) == Some(&2)
            && t.counts().get(&Api::CudaFree) == Some(&1)
            && t.live().len() == 1;
        survived += u64::from(whole);
    }
    Row {
        what: format!(
            "fork storm: {n} children one after another, each ending with `{ending}`{}",
            if ending == "_exit" { "" } else { "()" }
        ),
        trials: n,
        survived,
        detail: format!(
            "{} traces: the parent's and one per child, each whole with the child's 3 calls and \
             its leak; the program's output unchanged",
            run.traces.len()
        ),
    }
}

fn thread_storms() -> Vec<Row> {
    let mut exact = 0;
    for _ in 0..STORMS {
        let dir = scratch("threads");
        let run = Workload::new("wl_threads")
            .arg("16")
            .arg("1000")
            .run_both(dir.path());
        let t = run.single_trace();
        let ok = t.ending.is_complete()
            && t.stats().dropped == 0
            && t.counts().get(&Api::CudaMalloc) == Some(&(8 * 1000 + 136))
            && t.state.summary().device_memory.count == 136
            && t.state.anomalies().total() == 0;
        exact += u64::from(ok);
    }
    let mut clean = 0;
    let (mut lost_min, mut lost_max) = (u64::MAX, 0);
    for _ in 0..STORMS {
        let dir = scratch("storm");
        let run = Workload::new("wl_harm")
            .arg("storm")
            .arg("16")
            .arg("2000")
            .env("VRAMTRACE_BUFFER_EVENTS", "1024")
            .env("VRAMTRACE_FULL_WAIT_MS", "0")
            .env("VRAMTRACE_MEMINFO_MS", "0")
            .run_both(dir.path());
        let t = run.single_trace();
        let json = report(&t.path).expect("the storm's trace reports");
        let a = &json["analysis"];
        let lost = a["anomalies"]["lost_events"].as_u64().unwrap_or(0);
        lost_min = lost_min.min(lost);
        lost_max = lost_max.max(lost);
        let ok = a["anomalies"]["total"] == 0
            && a["leaks"]["device"]["count"] == 1
            && a["leaks"]["device"]["bytes"] == 3 << 20
            && a["orphans"]["objects"]
                .as_array()
                .is_some_and(|o| o.is_empty());
        clean += u64::from(ok);
    }
    vec![
        Row {
            what: "thread storm: 16 threads × 1000 allocate/free pairs, default buffer".into(),
            trials: STORMS,
            survived: exact,
            detail: "every call in the trace once, in causal order; exactly the 136 planted \
                     leaks, no anomaly"
                .into(),
        },
        Row {
            what: "drop storm: 16 threads × 2000 pairs into a 1024-event buffer, no waiting, \
                   then one planted 3 MiB leak"
                .into(),
            trials: STORMS,
            survived: clean,
            detail: format!(
                "{lost_min}–{lost_max} of 64001 events lost; no anomaly, leak or orphan that the \
                 lost events could explain reported, the planted leak reported alone"
            ),
        },
    ]
}

const MULTIPROCESSING: &str = r#"import ctypes
import multiprocessing as mp
import sys


def work(i):
    rt = ctypes.CDLL("libcudart.so.13")
    rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    rt.cudaFree.argtypes = [ctypes.c_void_p]
    p = ctypes.c_void_p()
    for _ in range(200):
        assert rt.cudaMalloc(ctypes.byref(p), 4096) == 0
        assert rt.cudaFree(p) == 0


if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[1])
    workers = [ctx.Process(target=work, args=(i,)) for i in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert [w.exitcode for w in workers] == [0] * 4
"#;

fn multiprocessing() -> Row {
    let (mut trials, mut survived) = (0, 0);
    for method in ["fork", "spawn", "forkserver"] {
        for _ in 0..2 {
            let dir = scratch("mp");
            let script = dir.path().join("workers.py");
            std::fs::write(&script, MULTIPROCESSING).unwrap();
            let traces = dir.path().join("traces");
            std::fs::create_dir(&traces).unwrap();
            let out = traced_program("python3", &traces)
                .arg(&script)
                .arg(method)
                .output()
                .expect("python3");
            let files = trace_files(&traces);
            trials += 4;
            if !out.status.success() || files.len() != 4 {
                continue;
            }
            for f in files {
                let t = Trace::load(&f);
                let whole = t.ending.is_complete()
                    && t.counts().get(&Api::CudaMalloc) == Some(&200)
                    && t.counts().get(&Api::CudaFree) == Some(&200);
                survived += u64::from(whole);
            }
        }
    }
    Row {
        what: "Python multiprocessing workers (fork, spawn, forkserver; 4 workers × 200 pairs, \
               twice each)"
            .into(),
        trials,
        survived,
        detail: "one whole trace per worker with all 400 calls; no trace for the helper \
                 processes that made no GPU call"
            .into(),
    }
}

/// Runs `wl_harm exit-busy threads` (traced when `dir` is given) and returns how long its exit
/// took after it said so, and whether it exited 0.
fn exit_busy(threads: u32, traced: Option<&std::path::Path>) -> (Duration, bool) {
    let w = Workload::new("wl_harm")
        .arg("exit-busy")
        .arg(threads.to_string());
    let mut c = match traced {
        Some(dir) => w.traced_command(dir),
        None => w.command(),
    };
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let said = lines.next().and_then(Result::ok);
    let asked = Instant::now();
    let status = child.wait().unwrap();
    (
        asked.elapsed(),
        said.as_deref() == Some("exiting") && status.success(),
    )
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The exit delay with threads still allocating, traced and untraced runs interleaved (the
/// machine's load delays both alike): a run survives when its trace is whole and the tracer added
/// at most [`EXIT_BOUND`] to the untraced median at that thread count.
fn exit_delay() -> Row {
    let (mut trials, mut survived) = (0, 0);
    let (mut traced_all, mut plain_all, mut added_max) = (Vec::new(), Vec::new(), Duration::ZERO);
    for threads in [1, 2, 4, 8] {
        let mut runs = Vec::new();
        let mut plain = Vec::new();
        for _ in 0..EXIT_RUNS {
            let dir = scratch("exit");
            let (delay, ok) = exit_busy(threads, Some(dir.path()));
            let whole = trace_files(dir.path())
                .first()
                .map(|p| Trace::load(p))
                .is_some_and(|t| t.ending.is_complete() && t.end_reasons == ["exit"]);
            runs.push((delay, ok && whole));
            plain.push(exit_busy(threads, None).0);
        }
        plain.sort();
        let baseline = plain[plain.len() / 2];
        for (delay, ok) in runs {
            trials += 1;
            let added = delay.saturating_sub(baseline);
            added_max = added_max.max(added);
            survived += u64::from(ok && added <= EXIT_BOUND);
            traced_all.push(delay);
        }
        plain_all.extend(plain);
    }
    traced_all.sort();
    plain_all.sort();
    let median = |v: &[Duration]| ms(v[v.len() / 2]);
    let max = |v: &[Duration]| ms(v[v.len() - 1]);
    Row {
        what: "exit() while 1, 2, 4 or 8 threads still allocate and free".into(),
        trials,
        survived,
        detail: format!(
            "exit took {:.1} ms median, {:.1} ms at most (untraced, same runs: {:.1} ms median, \
             {:.1} ms at most); the tracer added {:.1} ms at most (bound: {} ms); every trace \
             whole, ended `exit`",
            median(&traced_all),
            max(&traced_all),
            median(&plain_all),
            max(&plain_all),
            ms(added_max),
            EXIT_BOUND.as_millis()
        ),
    }
}

pub fn trials() -> Vec<Row> {
    let mut rows = vec![kills()];
    rows.push(fork_storm("wl_fork", None, FORKS, "exit"));
    rows.push(fork_storm(
        "wl_harm",
        Some("fork-_exit"),
        UNDERSCORE_EXIT_FORKS,
        "_exit",
    ));
    rows.extend(thread_storms());
    rows.push(multiprocessing());
    rows.push(exit_delay());
    rows
}
