//! Every file a command writes keeps the tracer's promise: a name that exists is never
//! replaced unless asked (`--force`), the trace being read never (not even then, whatever name
//! leads to it), and a refusal is exit 2 with one line, the existing file unchanged byte for
//! byte.

use std::path::{Path, PathBuf};

use crate::support::*;

/// Each command that writes a file, as `vramtrace ARGS… OUTPUT TRACE` would run it: the args
/// up to the output's flag.
const WRITERS: &[&[&str]] = &[
    &["export", "--format", "perfetto", "-o"],
    &["export", "--format", "flamegraph", "-o"],
    &["export", "--format", "pytorch", "-o"],
    &["export", "--format", "csv-live", "-o"],
    &["export", "--format", "csv-events", "-o"],
    &["report", "--html"],
];

fn write(args: &[&str], force: bool, output: &Path, trace: &Path) -> assert_cmd::assert::Assert {
    let mut c = vramtrace();
    c.args(args).arg(output);
    if force {
        c.arg("--force");
    }
    c.arg(trace).assert()
}

fn stderr(a: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&a.get_output().stderr).into_owned()
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut names: Vec<PathBuf> = (std::fs::read_dir(dir).unwrap())
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    names
}

#[test]
fn an_existing_output_is_replaced_only_with_force() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_training(dir.path(), "run.vtrace");
    let output = dir.path().join("existing.out");
    for args in WRITERS {
        std::fs::write(&output, b"a user's file\n").unwrap();
        let refused = write(args, false, &output, &trace).code(2);
        assert_eq!(
            stderr(&refused),
            format!(
                "error: {} already exists and is left alone; --force replaces it\n",
                output.display()
            ),
            "{args:?}"
        );
        assert_eq!(
            std::fs::read(&output).unwrap(),
            b"a user's file\n",
            "{args:?}"
        );
        let replaced = write(args, true, &output, &trace).success();
        assert!(
            stderr(&replaced).starts_with(&format!("wrote {} (", output.display())),
            "{args:?}: {}",
            stderr(&replaced)
        );
        assert_ne!(
            std::fs::read(&output).unwrap(),
            b"a user's file\n",
            "{args:?}"
        );
        assert_eq!(
            files_in(dir.path()),
            [output.clone(), trace.clone()],
            "{args:?}"
        );
    }
}

#[test]
fn the_trace_read_is_never_an_output() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_training(dir.path(), "run.vtrace");
    let before = std::fs::read(&trace).unwrap();
    let link = dir.path().join("link.vtrace");
    std::os::unix::fs::symlink(&trace, &link).unwrap();
    let hard = dir.path().join("hard.vtrace");
    std::fs::hard_link(&trace, &hard).unwrap();
    let relative = PathBuf::from(".").join(trace.strip_prefix("/").unwrap());
    for args in WRITERS {
        for (output, force) in [
            (&trace, false),
            (&trace, true),
            (&link, true),
            (&hard, true),
        ] {
            let refused = write(args, force, output, &trace).code(2);
            assert_eq!(
                stderr(&refused),
                format!(
                    "error: {} is the trace being read ({}); it is never replaced, not even with \
                     --force\n",
                    output.display(),
                    trace.display()
                ),
                "{args:?} {output:?}"
            );
        }
        // The same file named from another directory.
        let refused = vramtrace()
            .current_dir("/")
            .args(*args)
            .arg(&relative)
            .arg("--force")
            .arg(&trace)
            .assert()
            .code(2);
        assert!(
            stderr(&refused).contains("is the trace being read"),
            "{args:?}"
        );
    }
    assert_eq!(std::fs::read(&trace).unwrap(), before, "byte for byte");
    assert_eq!(files_in(dir.path()), [hard, link, trace]);
}

#[test]
fn outputs_appear_whole_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_training(dir.path(), "run.vtrace");
    // A growth flame graph of a trace where nothing grows fails after reading: nothing is left.
    let (healthy, _) = write_workload(dir.path(), "healthy.vtrace");
    let output = dir.path().join("g.svg");
    vramtrace()
        .args(["export", "-f", "flamegraph", "--at", "growth", "-o"])
        .arg(&output)
        .arg(&healthy)
        .assert()
        .code(2);
    assert_eq!(files_in(dir.path()), [healthy, trace.clone()]);
    // A missing directory is refused before any work.
    let nowhere = dir.path().join("missing/page.html");
    let refused = vramtrace()
        .args(["report", "--html"])
        .arg(&nowhere)
        .arg(&trace)
        .assert()
        .code(2);
    assert_eq!(
        stderr(&refused),
        format!(
            "error: creating {}: no directory {1} (a mistyped path is not made into a new \
             tree: create it first, mkdir -p {1})\n",
            nowhere.display(),
            dir.path().join("missing").display()
        )
    );
    // So is a name of a directory that is not there (it was found only on writing, after a
    // check's whole program had run).
    let slash = format!("{}/", dir.path().join("out").display());
    let refused = vramtrace()
        .args(["report", "--html", &slash])
        .arg(&trace)
        .assert()
        .code(2);
    assert_eq!(
        stderr(&refused),
        format!("error: {slash} names a directory, and no directory is there; name a file\n")
    );
}

/// An export stopped by SIGINT, SIGTERM or SIGHUP (Ctrl-C, a scheduler, a closed terminal)
/// leaves nothing beside its output's name, neither a file's temporary nor the Parquet
/// dataset's staging directory, and ends by that signal.
#[test]
fn an_interrupted_export_leaves_nothing_behind() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    // Long enough to be caught while it writes: two million events.
    let trace = write_pairs(dir.path(), "long.vtrace", 1_000_000);
    for (format, sig) in [
        ("csv-events", libc::SIGINT),
        ("parquet", libc::SIGTERM),
        ("csv-live", libc::SIGHUP),
    ] {
        let out = dir.path().join("out");
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("vramtrace"))
            .args(["export", "--format", format, "-o"])
            .arg(&out)
            .arg(&trace)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let temporary = || {
            (std::fs::read_dir(dir.path()).unwrap()).any(|e| {
                e.unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with(".vramtrace-")
            })
        };
        let started = std::time::Instant::now();
        while !temporary() {
            assert!(
                started.elapsed().as_secs() < 60 && child.try_wait().unwrap().is_none(),
                "{format}: no temporary output appeared"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // SAFETY: a plain kill of the child this test started.
        unsafe { libc::kill(child.id() as i32, sig) };
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(sig), "{format}");
        let left: Vec<String> = (std::fs::read_dir(dir.path()).unwrap())
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, ["long.vtrace"], "{format}");
    }
}

/// A FIFO is never replaced by a Parquet dataset, not even with `--force`: it is not a file any
/// command wrote.
#[test]
fn a_fifo_is_never_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_training(dir.path(), "run.vtrace");
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    let refused = vramtrace()
        .args(["export", "--format", "parquet", "--force", "-o"])
        .arg(&fifo)
        .arg(&trace)
        .timeout(std::time::Duration::from_secs(20))
        .assert()
        .code(2);
    assert_eq!(
        stderr(&refused),
        format!(
            "error: {}: exists and is not a file or directory (a device, FIFO or socket); it is \
             never replaced, not even with --force: give a new name\n",
            fifo.display()
        )
    );
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
}
