//! The tracer never harms the job or its files (issue 16): an existing file or a device node is
//! never replaced, a child never takes its parent's trace, a program that closes or reuses every
//! descriptor gets exactly its own output, children that end with `_exit` or `exec` and Python
//! `multiprocessing` workers trace themselves, lost events never become findings, and secrets
//! stay out of the trace. Each test reproduces one of the issue's defects on the stand-ins
//! (`wl_harm`, tests/standins/README.md).

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use vramtrace_collector::event::Api::*;
use vramtrace_tests::trace::{call, live, Call, Trace};
use vramtrace_tests::traced::{
    assert_same_behaviour, text, trace_files, traced_program, vramtrace_command, Workload,
};

use crate::MIB;

fn rt_alloc(ptr: u64, size: u64) -> Call {
    call(CudaMalloc, Some(CuMemAlloc), 0, ptr, size)
}

fn rt_free(ptr: u64) -> Call {
    call(CudaFree, Some(CuMemFree), 0, ptr, 0)
}

/// Every entry of `dir`, by name.
fn entries(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn warnings(out: &std::process::Output) -> Vec<String> {
    text(&out.stderr).lines().map(str::to_string).collect()
}

// Defect 1: VRAMTRACE_OUTPUT naming an existing file (a checkpoint) left the trace in its place.
// Now the file keeps its bytes, the trace goes beside it (NAME.PID.EXT, mode 0600) and stderr
// says so in one line.
captest!(an_existing_file_is_never_replaced, |dir| {
    let checkpoint = dir.join("model.pt");
    std::fs::write(&checkpoint, b"model weights").unwrap();
    let run = Workload::new("wl_runtime")
        .env("VRAMTRACE_OUTPUT", &checkpoint)
        .run_both(dir);
    assert_eq!(std::fs::read(&checkpoint).unwrap(), b"model weights");
    let names = entries(dir);
    assert_eq!(names.len(), 2, "{names:?}");
    let trace_name = names.iter().find(|n| *n != "model.pt").unwrap();
    let trace = Trace::load(&dir.join(trace_name));
    assert_eq!(trace_name, &format!("model.{}.pt", trace.header.pid));
    trace.assert_clean("exit");
    assert_eq!(trace.events.len(), 49);
    assert_eq!(mode(&trace.path), 0o600);
    let lines = warnings(&run.output);
    assert_eq!(
        lines,
        [format!(
            "vramtrace: warning: {} already exists and is left alone; this process writes its \
             trace to {}",
            checkpoint.display(),
            trace.path.display()
        )]
    );
});

// Defect 1, as root: /dev/null and /dev/full became regular files. A FIFO stands in for a
// device node: it stays a FIFO, nothing is created, the program neither blocks nor changes, and
// one warning says no trace is written. A symlink to a file is left alone too (the trace goes
// beside it).
captest!(a_device_node_and_a_symlink_are_left_alone, |dir| {
    let fifo = dir.join("null");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let run = Workload::new("wl_runtime")
        .env("VRAMTRACE_OUTPUT", &fifo)
        .run_both(dir);
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    assert_eq!(entries(dir), BTreeSet::from(["null".to_string()]));
    assert_eq!(
        warnings(&run.output),
        [format!(
            "vramtrace: warning: {} is not a regular file (a device, FIFO or socket); no trace is \
             written there; the program runs on without a trace",
            fifo.display()
        )]
    );

    let sub = dir.join("link");
    std::fs::create_dir(&sub).unwrap();
    let target = sub.join("target");
    std::fs::write(&target, b"keep").unwrap();
    let link = sub.join("run");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    Workload::new("wl_runtime")
        .env("VRAMTRACE_OUTPUT", &link)
        .env("VRAMTRACE_QUIET", "1")
        .run_both(&sub);
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    let names = entries(&sub);
    assert_eq!(names.len(), 3, "{names:?}");
    let trace_name = names.iter().find(|n| n.starts_with("run.")).unwrap();
    Trace::load(&sub.join(trace_name)).assert_clean("exit");
});

// Defect 2: with a fixed output name, a child that fork+execs a traced program deleted its
// parent's live trace, and the parent's calls and leak were gone. Now the parent's trace keeps
// the name and every call; the exec'd child writes beside it.
captest!(an_execd_child_never_takes_its_parents_trace, |dir| {
    let fixed = dir.join("run.vtrace");
    let run = Workload::new("wl_harm")
        .arg("fork-exec")
        .env("VRAMTRACE_OUTPUT", &fixed)
        .run_both(dir);
    let parent = Trace::load(&fixed);
    parent.assert_clean("exit");
    parent.assert_calls(&[
        rt_alloc(0x7000_0000_0000, MIB),
        rt_alloc(0x7000_0010_0000, 2 * MIB),
    ]);
    let o = "wl_harm";
    assert_eq!(
        parent.live(),
        [
            live("device", 0x7000_0000_0000, MIB, 0, o, &[]),
            live("device", 0x7000_0010_0000, 2 * MIB, 0, o, &[]),
        ]
    );
    let names = entries(dir);
    assert_eq!(names.len(), 2, "{names:?}");
    let child_name = names.iter().find(|n| *n != "run.vtrace").unwrap();
    let child = Trace::load(&dir.join(child_name));
    assert_eq!(child_name, &format!("run.{}.vtrace", child.header.pid));
    assert_eq!(
        (child.header.ppid, child.header.forked_from),
        (parent.header.pid, None)
    );
    child.assert_clean("exit");
    child.assert_calls(&[
        rt_alloc(0x7000_0000_0000, 2 * MIB),
        rt_free(0x7000_0000_0000),
        rt_alloc(0x7000_0000_0000, 4096),
    ]);
    // The exec'd child says once where its trace went.
    let lines = warnings(&run.output);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains(&child.path.display().to_string()));
});

// Defect 2, forked children: each writes NAME.PID.EXT beside the parent's, without a word.
captest!(forked_children_write_beside_a_fixed_name, |dir| {
    let fixed = dir.join("run.vtrace");
    let run = Workload::new("wl_fork")
        .arg("5")
        .env("VRAMTRACE_OUTPUT", &fixed)
        .run_both(dir);
    assert_eq!(run.stderr(), "");
    let parent = Trace::load(&fixed);
    parent.assert_clean("exit");
    assert!(parent.live().is_empty());
    let traces = trace_files(dir);
    assert_eq!(traces.len(), 6);
    for path in traces.iter().filter(|p| **p != fixed) {
        let child = Trace::load(path);
        assert_eq!(child.header.forked_from, Some(parent.header.pid));
        assert_eq!(
            path.file_name().unwrap().to_string_lossy(),
            format!("run.{}.vtrace", child.header.pid)
        );
        child.assert_clean("exit");
        assert_eq!(child.live().len(), 1);
    }
});

/// The bytes `wl_harm`'s data modes write: 100 of 'a', then 'b', ... 'k'.
fn expected_data() -> Vec<u8> {
    (0..11u8).flat_map(|i| [b'a' + i; 100]).collect()
}

/// Runs a data mode of `wl_harm` without and with the tracer (each writing its own DATA file):
/// the same stdout (descriptor numbers included), the same DATA bytes, and a whole trace of the
/// program's 24 calls.
fn data_mode_is_unharmed(dir: &Path, mode: &str) {
    let plain_data = dir.join("plain.data");
    let traced_data = dir.join("traced.data");
    let traces = dir.join("traces");
    std::fs::create_dir(&traces).unwrap();
    let plain = Workload::new("wl_harm")
        .arg(mode)
        .arg(&plain_data)
        .run_plain();
    let traced = Workload::new("wl_harm")
        .arg(mode)
        .arg(&traced_data)
        .run_traced(&traces);
    assert_same_behaviour(mode, &plain, &traced.output);
    assert_eq!(
        std::fs::read(&plain_data).unwrap(),
        expected_data(),
        "{mode}: plain"
    );
    assert_eq!(
        std::fs::read(&traced_data).unwrap(),
        expected_data(),
        "{mode}: traced"
    );
    assert_eq!(traced.stderr(), "", "{mode}");
    let trace = traced.single_trace();
    trace.assert_clean("exit");
    assert_eq!(
        trace.counts(),
        [(CudaMalloc, 12), (CudaFree, 12)].into_iter().collect(),
        "{mode}"
    );
    assert!(trace.live().is_empty(), "{mode}: {:?}", trace.live());
}

// Defect 3: a program that closed its descriptors and opened a file got the trace's old number,
// and trace chunks landed in its data file. Now the tracer's descriptor lives high and is checked
// before every write: the data file has exactly the program's 1100 bytes.
captest!(
    a_program_that_closes_every_descriptor_gets_its_own_bytes,
    |dir| {
        data_mode_is_unharmed(dir, "closefds");
    }
);

// Defect 3, the number reused for sure: the program spreads its file over every descriptor number
// up to 1023, the trace's included.
captest!(
    a_program_that_takes_every_descriptor_number_gets_its_own_bytes,
    |dir| {
        data_mode_is_unharmed(dir, "spreadfds");
    }
);

// Defect 7: with `ulimit -n 4` the tracer took the program's only free descriptor and the
// program could not open its file. Now the program gets descriptor 3 as without the tracer (the
// tracer opens its file only to write). The program holds that descriptor while the trace is
// created: the tracer waits for it, where it gave up the trace (a flaky failure in CI, when the
// program's own polling held it at that moment).
captest!(
    a_program_under_a_limit_of_4_descriptors_opens_its_files,
    |dir| {
        data_mode_is_unharmed(dir, "lowlimit");
    }
);

/// Checks the traces of `wl_harm fork-_exit|fork-_Exit N`: the parent's and one per child, each
/// whole, the child's ended by `_exit` with its three calls and its 8192-byte leak.
fn children_ending_with(dir: &Path, mode: &str, n: usize) {
    let run = Workload::new("wl_harm")
        .arg(mode)
        .arg(n.to_string())
        .run_both(dir);
    assert_eq!(run.traces.len(), n + 1, "{:?}", run.traces);
    let mut children = 0;
    for path in &run.traces {
        assert!(std::fs::metadata(path).unwrap().len() > 0, "{path:?}");
        let t = Trace::load(path);
        if t.header.forked_from.is_none() {
            t.assert_clean("exit");
            t.assert_calls(&[rt_alloc(0x7000_0000_0000, MIB), rt_free(0x7000_0000_0000)]);
            continue;
        }
        children += 1;
        t.assert_clean("_exit");
        t.assert_calls(&[
            rt_alloc(0x7000_0010_0000, 4096),
            rt_free(0x7000_0010_0000),
            rt_alloc(0x7000_0010_0000, 8192),
        ]);
        assert_eq!(
            t.live(),
            [live("device", 0x7000_0010_0000, 8192, 0, "wl_harm", &[])]
        );
    }
    assert_eq!(children, n);
}

// Defect 4: children that ended with `_exit` lost all their events (some left 0-byte files).
// Now each has its whole trace, ended by `_exit`.
captest!(
    forked_children_ending_with_underscore_exit_trace_themselves,
    |dir| {
        children_ending_with(dir, "fork-_exit", 20);
    }
);

captest!(
    forked_children_ending_with_underscore_capital_exit_trace_themselves,
    |dir| {
        children_ending_with(dir, "fork-_Exit", 3);
    }
);

// Defect 4, exec: the image that execs ends its trace ("exec", its live memory in it); the new
// image traces itself under a fresh name beside it (same pid). An exec that fails ends the trace
// the same way, and the process's next call starts a new one; the program sees the same errno.
captest!(
    exec_ends_the_trace_and_the_new_image_starts_its_own,
    |dir| {
        let run = Workload::new("wl_harm").arg("exec-self").run_both(dir);
        assert_eq!(run.traces.len(), 2, "{:?}", run.traces);
        // Sorted by name, `t-PID.1.vtrace` comes first.
        let after = Trace::load(&run.traces[0]);
        let before = Trace::load(&run.traces[1]);
        let pid = before.header.pid;
        assert_eq!(after.header.pid, pid);
        assert!(run.traces[1].ends_with(format!("t-{pid}.vtrace")));
        assert!(run.traces[0].ends_with(format!("t-{pid}.1.vtrace")));
        before.assert_clean("exec");
        before.assert_calls(&[rt_alloc(0x7000_0000_0000, MIB)]);
        assert_eq!(before.live().len(), 1);
        after.assert_clean("exit");
        after.assert_calls(&[
            rt_alloc(0x7000_0000_0000, 2 * MIB),
            rt_free(0x7000_0000_0000),
            rt_alloc(0x7000_0000_0000, 4096),
        ]);

        let sub = dir.join("fail");
        std::fs::create_dir(&sub).unwrap();
        let run = Workload::new("wl_harm").arg("exec-fail").run_both(&sub);
        assert!(run.stdout().contains("errno=No such file or directory"));
        assert_eq!(run.traces.len(), 2, "{:?}", run.traces);
        let first = Trace::load(&run.traces[1]);
        first.assert_clean("exec");
        first.assert_calls(&[rt_alloc(0x7000_0000_0000, MIB)]);
        let second = Trace::load(&run.traces[0]);
        second.assert_clean("exit");
        second.assert_calls(&[rt_alloc(0x7000_0010_0000, 2 * MIB)]);
    }
);

// A vfork child shares the parent's memory, session included: its `_exit` and its exec must not
// end the parent's trace.
captest!(a_vfork_child_leaves_the_parents_trace_alone, |dir| {
    let run = Workload::new("wl_harm").arg("vfork").run_both(dir);
    let trace = run.single_trace();
    trace.assert_clean("exit");
    trace.assert_calls(&[
        rt_alloc(0x7000_0000_0000, MIB),
        rt_alloc(0x7000_0010_0000, 2 * MIB),
        rt_free(0x7000_0000_0000),
        rt_free(0x7000_0010_0000),
    ]);
});

/// A parent that allocates, starts four `multiprocessing` workers with the start method in
/// argv[1], and frees; each worker makes 100 allocate/free pairs and leaks 8192 bytes.
const MULTIPROCESSING: &str = r#"import ctypes
import multiprocessing as mp
import sys


def runtime():
    rt = ctypes.CDLL("libcudart.so.13")
    rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    rt.cudaFree.argtypes = [ctypes.c_void_p]
    return rt


def work(i):
    rt = runtime()
    p = ctypes.c_void_p()
    for _ in range(100):
        assert rt.cudaMalloc(ctypes.byref(p), 4096 * (i + 1)) == 0
        assert rt.cudaFree(p) == 0
    assert rt.cudaMalloc(ctypes.byref(p), 8192) == 0  # the worker's leak


if __name__ == "__main__":
    rt = runtime()
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), 1 << 20) == 0
    ctx = mp.get_context(sys.argv[1])
    workers = [ctx.Process(target=work, args=(i,)) for i in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert [w.exitcode for w in workers] == [0] * 4, [w.exitcode for w in workers]
    assert rt.cudaFree(p) == 0
    print("workers done")
"#;

/// Runs [`MULTIPROCESSING`] with `method`: one trace for the parent, one whole trace per worker
/// (ended as `ending`), and none for the helper processes that made no GPU call.
fn multiprocessing_workers(dir: &Path, method: &str, ending: &str) {
    let script = dir.join("workers.py");
    std::fs::write(&script, MULTIPROCESSING).unwrap();
    let traces = dir.join("traces");
    std::fs::create_dir(&traces).unwrap();
    let out = traced_program("python3", &traces)
        .arg(&script)
        .arg(method)
        .output()
        .expect("running python3 (required by this test)");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "workers done\n");
    let files = trace_files(&traces);
    assert_eq!(files.len(), 5, "{files:?}\n{}", text(&out.stderr));
    let mut sizes = BTreeSet::new();
    for path in &files {
        let t = Trace::load(path);
        let counts = t.counts();
        if counts.get(&CudaMalloc) == Some(&1) {
            t.assert_clean("exit");
            assert_eq!(counts.get(&CudaFree), Some(&1));
            assert!(t.live().is_empty());
            continue;
        }
        t.assert_clean(ending);
        assert_eq!(counts.get(&CudaMalloc), Some(&101), "{path:?}");
        assert_eq!(counts.get(&CudaFree), Some(&100), "{path:?}");
        let live = t.live();
        assert_eq!(live.len(), 1, "{path:?}: {live:?}");
        assert_eq!(live[0].bytes, 8192);
        let size = t.of(CudaMalloc)[0].op.clone();
        sizes.insert(format!("{size:?}"));
    }
    assert_eq!(sizes.len(), 4, "one trace per worker: {sizes:?}");
}

// Defect 4: Python multiprocessing workers with the fork start method end with os._exit, and
// none of their calls were recorded. Now each worker's trace is whole.
captest!(multiprocessing_fork_workers_trace_themselves, |dir| {
    multiprocessing_workers(dir, "fork", "_exit");
});

captest!(multiprocessing_spawn_workers_trace_themselves, |dir| {
    multiprocessing_workers(dir, "spawn", "exit");
});

// The forkserver start method: its server process makes no GPU call (no trace) and restores the
// signal handlers it found; its workers end with os._exit.
captest!(multiprocessing_forkserver_workers_trace_themselves, |dir| {
    multiprocessing_workers(dir, "forkserver", "_exit");
});

/// A Python program that reads its signal handlers before and after its first GPU call, is
/// interrupted by SIGINT, and saves and restores handlers (of signals the tracer takes only at
/// their default action too).
const SIGNALS: &str = r#"import ctypes
import os
import signal
import time

rt = ctypes.CDLL("libcudart.so.13")
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaFree.argtypes = [ctypes.c_void_p]
print(signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
p = ctypes.c_void_p()
assert rt.cudaMalloc(ctypes.byref(p), 4096) == 0
print(signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
    print("not interrupted")
except KeyboardInterrupt:
    print("KeyboardInterrupt")
old = signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGTERM, old)
for sig in (signal.SIGHUP, signal.SIGUSR1, signal.SIGALRM):
    old = signal.signal(sig, lambda *_: None)
    signal.signal(sig, old)
print(signal.getsignal(signal.SIGHUP), signal.getsignal(signal.SIGUSR1))
assert rt.cudaFree(p) == 0
print("done")
"#;

// The tracer's handlers were installed when the library loaded, before Python's: Python then
// saw SIGINT's handler as None, installed no KeyboardInterrupt handler (Ctrl-C killed the
// program), and code that saves and restores a handler failed (multiprocessing's forkserver).
// Now the handlers are installed at the first GPU call and chain to the program's: Python sees
// its own handlers, SIGINT raises KeyboardInterrupt, and the trace goes on.
captest!(a_python_program_keeps_its_signal_handlers, |dir| {
    use std::os::unix::process::CommandExt;
    // A test run started in the background of a non-interactive shell ignores SIGINT, and its
    // children inherit that (Python then installs no KeyboardInterrupt handler): both programs
    // start with SIGINT's default action, as from a terminal.
    fn default_sigint(cmd: &mut std::process::Command) -> &mut std::process::Command {
        // SAFETY: signal() is async-signal-safe, as pre_exec requires.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                Ok(())
            })
        }
    }
    let script = dir.join("signals.py");
    std::fs::write(&script, SIGNALS).unwrap();
    let plain = default_sigint(&mut std::process::Command::new("python3"))
        .arg(&script)
        .env(
            "LD_LIBRARY_PATH",
            vramtrace_tests::standin_ld_library_path(),
        )
        .env_remove("LD_PRELOAD")
        .output()
        .expect("running python3 (required by this test)");
    let traces = dir.join("traces");
    std::fs::create_dir(&traces).unwrap();
    let traced = default_sigint(&mut traced_program("python3", &traces))
        .arg(&script)
        .output()
        .unwrap();
    assert_same_behaviour("signals.py", &plain, &traced);
    assert_eq!(
        text(&traced.stdout),
        "<built-in function default_int_handler> 0\n\
         <built-in function default_int_handler> 0\nKeyboardInterrupt\n\
         0 0\ndone\n"
    );
    let files = trace_files(&traces);
    assert_eq!(files.len(), 1, "{files:?}");
    let trace = Trace::load(&files[0]);
    trace.assert_clean("exit");
    assert_eq!(
        trace.counts(),
        [(CudaMalloc, 1), (CudaFree, 1)].into_iter().collect()
    );
});

// Defect 6: 16 threads storming a 1024-event buffer with no waiting lose most events, and the
// lost ones became anomalies and leaks that do not exist. Now the report counts them apart; the
// one leak no lost event could explain (3 MiB made after the storm) is still reported, alone.
captest!(
    a_drop_storm_reports_only_what_no_lost_event_explains,
    |dir| {
        let run = Workload::new("wl_harm")
            .arg("storm")
            .arg("16")
            .arg("2000")
            .env("VRAMTRACE_BUFFER_EVENTS", "1024")
            .env("VRAMTRACE_FULL_WAIT_MS", "0")
            .env("VRAMTRACE_MEMINFO_MS", "0")
            .run_both(dir);
        let trace = run.single_trace();
        let s = trace.stats();
        assert!(s.dropped > 0, "the storm must overflow the buffer: {s:?}");
        let json = crate::vramtrace_json([
            OsString::from("report"),
            "--json".into(),
            trace.path.clone().into(),
        ]);
        let a = &json["analysis"];
        assert_eq!(a["anomalies"]["total"], 0, "{}", a["anomalies"]);
        assert!(a["anomalies"]["lost_events"].as_u64().unwrap() >= s.dropped);
        assert_eq!(a["leaks"]["device"]["count"], 1, "{}", a["leaks"]);
        assert_eq!(a["leaks"]["device"]["bytes"], 3 * MIB);
        let sites = a["leaks"]["sites"].as_array().unwrap();
        assert_eq!(sites.len(), 1);
        assert_eq!(
            (&sites[0]["bytes"], &sites[0]["count"]),
            (&(3 * MIB).into(), &1.into())
        );
        assert_eq!(a["orphans"]["objects"].as_array().unwrap().len(), 0);
        assert_eq!(json["anomalies"]["total"], 0);
        let text_report = vramtrace_command()
            .arg("report")
            .arg(&trace.path)
            .output()
            .unwrap();
        let out = text(&text_report.stdout);
        assert!(
            out.contains(&format!(
                "lost events    {} events lost; left out above because they could explain them",
                a["anomalies"]["lost_events"]
            )),
            "{out}"
        );
        assert!(
            out.contains("live           at the end: 3.0 MiB device in 1 object,"),
            "{out}"
        );
    }
);

// Defect 7: the command line was stored whole, tokens included. Now secret values are
// redacted in both option forms and in NAME=value pairs, and VRAMTRACE_STORE_CMDLINE=0 stores
// none of it.
captest!(secrets_on_the_command_line_never_reach_the_trace, |dir| {
    let trace = Workload::new("wl_runtime")
        .arg("--hf-token=hf_secret1")
        .arg("--wandb-api-key")
        .arg("secret2")
        .arg("HF_TOKEN=secret3")
        .arg("--epochs")
        .arg("3")
        .run_both(dir)
        .single_trace();
    assert_eq!(
        trace.header.command_line[1..],
        [
            "--hf-token=<redacted>",
            "--wandb-api-key",
            "<redacted>",
            "HF_TOKEN=<redacted>",
            "--epochs",
            "3"
        ]
    );
    std::fs::remove_file(&trace.path).unwrap();
    let trace = Workload::new("wl_runtime")
        .arg("--hf-token=hf_secret1")
        .env("VRAMTRACE_STORE_CMDLINE", "0")
        .run_both(dir)
        .single_trace();
    assert!(trace.header.command_line.is_empty());
    let bytes = std::fs::read(&trace.path).unwrap();
    assert!(!bytes.windows(10).any(|w| w == b"hf_secret1"));
});

// Defect 7: a VRAMTRACE_OUTPUT that is not UTF-8 fell back to the default name without a word.
// Now it is used as it is.
captest!(an_output_path_that_is_not_utf8_is_used_as_given, |dir| {
    let mut pattern = dir.as_os_str().to_os_string().into_vec();
    pattern.extend_from_slice(b"/\xffrun-%p.vtrace");
    let run = Workload::new("wl_runtime")
        .env("VRAMTRACE_OUTPUT", OsString::from_vec(pattern))
        .run_both(dir);
    assert_eq!(run.stderr(), "");
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let trace = Trace::load(&files[0]);
    let mut want = b"\xffrun-".to_vec();
    want.extend_from_slice(format!("{}.vtrace", trace.header.pid).as_bytes());
    use std::os::unix::ffi::OsStrExt;
    assert_eq!(files[0].file_name().unwrap().as_bytes(), want);
    trace.assert_clean("exit");
});

// Defect 7: the program's exit waited 0.1-4.3 s while its threads still allocated. Now the end
// takes what was numbered when it was asked for. The bound checked here is the hang guard
// (lifecycle's END_WAIT, 2 s); the delay itself is measured by validation/reliability.sh.
captest!(exit_with_threads_still_allocating_is_bounded, |dir| {
    let mut child = Workload::new("wl_harm")
        .arg("exit-busy")
        .arg("4")
        .traced_command(dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "exiting");
    let asked = Instant::now();
    let status = child.wait().unwrap();
    let delay = asked.elapsed();
    eprintln!("exit with 4 threads allocating: {delay:.1?} (debug build)");
    assert!(status.success());
    assert!(delay < Duration::from_secs(2), "{delay:?}");
    let trace = Trace::load(&trace_files(dir)[0]);
    assert!(trace.ending.is_complete(), "{}", trace.ending.describe());
    assert_eq!(trace.end_reasons, ["exit"]);
    assert!(trace.events.len() > 100, "{}", trace.events.len());
});
