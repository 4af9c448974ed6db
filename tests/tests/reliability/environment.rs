//! The world around the program: a disk that fills up, a read-only directory, descriptor limits,
//! bad settings, and files already where the trace would go. In each the program must behave
//! exactly as without the tracer (same output, same exit), with at most one warning, and every
//! trace left behind must be readable.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::{Command, Output};

use vramtrace_tests::trace::Trace;
use vramtrace_tests::traced::{trace_files, Workload};

use crate::{report, scratch, Row};

/// The program's own behaviour, compared with and without the tracer.
fn same(plain: &Output, traced: &Output) -> bool {
    plain.stdout == traced.stdout && plain.status.code() == traced.status.code()
}

fn warning_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Mounts a tmpfs of `size` at `dir` with `options`; `false` when this machine does not let us
/// (not root, no mount namespace).
fn mount_tmpfs(dir: &Path, options: &str) -> bool {
    Command::new("mount")
        .args(["-t", "tmpfs", "-o", options, "tmpfs"])
        .arg(dir)
        .output()
        .is_ok_and(|o| o.status.success())
}

fn unmount(dir: &Path) {
    let _ = Command::new("umount").arg(dir).output();
}

fn disk_full() -> Row {
    let dir = scratch("full");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    const RUNS: u64 = 5;
    if !mount_tmpfs(&mnt, "size=32k") {
        return Row {
            what: "disk full (a 32 KiB tmpfs)".into(),
            trials: 0,
            survived: 0,
            detail: "skipped: mounting a tmpfs needs root".into(),
        };
    }
    let mut survived = 0;
    for _ in 0..RUNS {
        let w = Workload::new("wl_threads").arg("16").arg("1000");
        let plain = w.run_plain();
        let run = w.run_traced(&mnt);
        let lines = warning_lines(&run.output);
        let readable = run
            .traces
            .iter()
            .all(|p| report(p).is_ok() && std::fs::metadata(p).unwrap().len() > 0);
        let ok = same(&plain, &run.output)
            && lines.len() == 1
            && lines[0].contains("No space left on device")
            && readable;
        survived += u64::from(ok);
        for p in trace_files(&mnt) {
            std::fs::remove_file(p).unwrap();
        }
    }
    unmount(&mnt);
    Row {
        what: "disk full: a 32 KiB tmpfs for a trace of 32,000 events".into(),
        trials: RUNS,
        survived,
        detail: "the program's output and exit unchanged; one warning (\"No space left on \
                 device\"), tracing stops; what was written reads as a cut trace"
            .into(),
    }
}

fn read_only() -> Row {
    let dir = scratch("ro");
    let mnt = dir.path().join("ro");
    std::fs::create_dir(&mnt).unwrap();
    let mut places = vec![
        (
            "a missing directory",
            dir.path().join("missing/t-%p.vtrace"),
        ),
        ("a path through a file", dir.path().join("file/t-%p.vtrace")),
    ];
    std::fs::write(dir.path().join("file"), b"x").unwrap();
    let mounted = mount_tmpfs(&mnt, "ro,size=64k");
    if mounted {
        places.push(("a read-only file system", mnt.join("t-%p.vtrace")));
    }
    let mut survived = 0;
    let trials = places.len() as u64 * 2;
    for (_, pattern) in &places {
        for w in ["wl_runtime", "wl_driver"] {
            let w = Workload::new(w).env("VRAMTRACE_OUTPUT", pattern);
            let plain = w.run_plain();
            let run = w.run_traced(dir.path());
            let lines = warning_lines(&run.output);
            let ok = same(&plain, &run.output)
                && lines.len() == 1
                && lines[0].starts_with("vramtrace: warning: ")
                && trace_files(dir.path()).is_empty();
            survived += u64::from(ok);
        }
    }
    if mounted {
        unmount(&mnt);
    }
    let kinds: Vec<&str> = places.iter().map(|(k, _)| *k).collect();
    Row {
        what: format!("no place to write: {}", kinds.join(", ")),
        trials,
        survived,
        detail: "the program's output and exit unchanged, one warning, nothing created".into(),
    }
}

/// `command` run under `ulimit -n limit`.
fn under_limit(command: Command, limit: u32) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!("ulimit -n {limit} && exec \"$0\" \"$@\""))
        .arg(command.get_program())
        .args(command.get_args());
    for (k, v) in command.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c
}

fn descriptor_limits() -> Row {
    let limits = [5, 8, 16, 64, 256, 1024];
    let mut survived = 0;
    let expected: Vec<u8> = (0..11u8).flat_map(|i| [b'a' + i; 100]).collect();
    for limit in limits {
        let dir = scratch("fd");
        let traces = dir.path().join("traces");
        std::fs::create_dir(&traces).unwrap();
        let (plain_data, traced_data) = (dir.path().join("plain"), dir.path().join("traced"));
        let plain = under_limit(
            Workload::new("wl_harm")
                .arg("closefds")
                .arg(&plain_data)
                .command(),
            limit,
        )
        .output()
        .unwrap();
        let traced = under_limit(
            Workload::new("wl_harm")
                .arg("closefds")
                .arg(&traced_data)
                .traced_command(&traces),
            limit,
        )
        .output()
        .unwrap();
        let files = trace_files(&traces);
        let ok = same(&plain, &traced)
            && plain.status.success()
            && std::fs::read(&traced_data).is_ok_and(|d| d == expected)
            && traced.stderr.is_empty()
            && files.len() == 1
            && Trace::load(&files[0]).ending.is_complete();
        survived += u64::from(ok);
    }
    // And the program that lowers its own limit to 4 before its first call.
    let dir = scratch("fd4");
    let run = Workload::new("wl_harm")
        .arg("lowlimit")
        .arg(dir.path().join("data"))
        .run_both(dir.path());
    let four = run.output.status.success()
        && std::fs::read(dir.path().join("data")).is_ok_and(|d| d == expected)
        && run.single_trace().ending.is_complete();
    survived += u64::from(four);
    Row {
        what: format!(
            "descriptor limits {} and 4: a program that closes every descriptor, then writes its \
             file between traced calls",
            limits.map(|l| l.to_string()).join(", ")
        ),
        trials: limits.len() as u64 + 1,
        survived,
        detail: "the program gets the same descriptor numbers and writes exactly its 1100 bytes; \
                 the trace whole"
            .into(),
    }
}

fn bad_settings() -> Row {
    let cases: &[(&str, &str)] = &[
        ("VRAMTRACE_STACK_DEPTH", "-1"),
        ("VRAMTRACE_STACK_DEPTH", "lots"),
        ("VRAMTRACE_STACK_DEPTH", "99999999999999999999999"),
        ("VRAMTRACE_STACK_DEPTH", ""),
        ("VRAMTRACE_PYTHON_DEPTH", "257"),
        ("VRAMTRACE_BUFFER_EVENTS", "0"),
        ("VRAMTRACE_BUFFER_EVENTS", "1e6"),
        ("VRAMTRACE_BUFFER_EVENTS", "99999999999"),
        ("VRAMTRACE_FULL_WAIT_MS", "-1"),
        ("VRAMTRACE_FULL_WAIT_MS", "forever"),
        ("VRAMTRACE_FLUSH_MS", "0"),
        ("VRAMTRACE_REORDER_WAIT_MS", "-3"),
        ("VRAMTRACE_MEMINFO_MS", "soon"),
        ("VRAMTRACE_CAPTURE", "gpu"),
        ("VRAMTRACE_CAPTURE", ","),
        ("VRAMTRACE_CAPTURE", "host"),
        ("VRAMTRACE_DISABLE", "maybe"),
        ("VRAMTRACE_QUIET", "2"),
        ("VRAMTRACE_STORE_CMDLINE", "perhaps"),
        ("VRAMTRACE_STEP_RANGE", ""),
        ("VRAMTRACE_OUTPUT", ""),
        ("VRAMTRACE_STACK_DEPTH", "３２"),
    ];
    let mut survived = 0;
    for (name, value) in cases {
        let dir = scratch("setting");
        let w = Workload::new("wl_runtime")
            .env(name, value)
            .current_dir(dir.path());
        let plain = w.run_plain();
        let run = w.run_traced(dir.path());
        let lines = warning_lines(&run.output);
        let files = trace_files(dir.path());
        let ok = same(&plain, &run.output)
            && lines.len() == 1
            && lines[0].starts_with("vramtrace: warning: ")
            && lines[0].contains(name)
            && files.len() == 1
            && Trace::load(&files[0]).ending.is_complete();
        survived += u64::from(ok);
    }
    Row {
        what: format!(
            "bad settings: {} values (negative, huge, not numbers, empty, unknown layers, \
             full-width digits) across 13 variables",
            cases.len()
        ),
        trials: cases.len() as u64,
        survived,
        detail: "the program's output and exit unchanged; exactly one warning naming the \
                 variable; a whole trace taken with the default"
            .into(),
    }
}

fn existing_files() -> Row {
    let mut trials = 0;
    let mut survived = 0;
    for _ in 0..2 {
        let dir = scratch("existing");
        let d = dir.path();
        std::fs::write(d.join("checkpoint.pt"), b"weights").unwrap();
        std::fs::write(d.join("target"), b"keep").unwrap();
        std::os::unix::fs::symlink(d.join("target"), d.join("link")).unwrap();
        std::os::unix::fs::symlink(d.join("nowhere"), d.join("dangling")).unwrap();
        let made = Command::new("mkfifo").arg(d.join("fifo")).status().unwrap();
        assert!(made.success());
        std::fs::create_dir(d.join("dir")).unwrap();
        for name in ["checkpoint.pt", "link", "dangling", "fifo", "dir"] {
            trials += 1;
            let path = d.join(name);
            let w = Workload::new("wl_runtime").env("VRAMTRACE_OUTPUT", &path);
            let plain = w.run_plain();
            let traced = w.traced_command(d).output().unwrap();
            let untouched = std::fs::read(d.join("checkpoint.pt")).unwrap() == b"weights"
                && std::fs::read(d.join("target")).unwrap() == b"keep"
                && std::fs::symlink_metadata(d.join("link"))
                    .unwrap()
                    .file_type()
                    .is_symlink()
                && std::fs::symlink_metadata(d.join("dangling"))
                    .unwrap()
                    .file_type()
                    .is_symlink()
                && !d.join("nowhere").exists()
                && std::fs::symlink_metadata(d.join("fifo"))
                    .unwrap()
                    .file_type()
                    .is_fifo();
            survived += u64::from(same(&plain, &traced) && untouched);
        }
    }
    Row {
        what: "files in the way: a checkpoint, a symlink to a file, a dangling symlink, a FIFO \
               (a device node's stand-in), a directory"
            .into(),
        trials,
        survived,
        detail: "none removed, truncated, written or followed; the program unchanged (the trace \
                 goes beside the name, or inside the directory; none for the FIFO)"
            .into(),
    }
}

pub fn trials() -> Vec<Row> {
    vec![
        existing_files(),
        disk_full(),
        read_only(),
        descriptor_limits(),
        bad_settings(),
    ]
}
