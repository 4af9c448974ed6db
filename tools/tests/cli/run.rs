//! `vramtrace run`: the environment the program gets, exit codes, signals, and the summary of the
//! traces it wrote. The program here is a shell script that plays the tracer's part by copying a
//! known trace to the output path, so no GPU and no tracer library are needed.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::*;

struct Setup {
    dir: tempfile::TempDir,
    lib: PathBuf,
    sample: PathBuf,
    out: PathBuf,
}

/// A stand-in tracer library (the loader ignores it), a known trace, and an output directory.
fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libvramtrace.so");
    std::fs::write(&lib, b"").unwrap();
    std::fs::create_dir(dir.path().join("in")).unwrap();
    let (sample, _) = write_workload(&dir.path().join("in"), "sample.vtrace");
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let lib = std::fs::canonicalize(lib).unwrap();
    Setup {
        dir,
        lib,
        sample,
        out,
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_program_gets_the_tracer_and_its_settings() {
    let s = setup();
    // A trace from an earlier run is not this run's.
    std::fs::copy(&s.sample, s.out.join("t-1.vtrace")).unwrap();
    let pattern = s.out.join("t-%p.vtrace");
    let script = r#"echo "$LD_PRELOAD"; echo "$VRAMTRACE_OUTPUT"; echo "$VRAMTRACE_STACK_DEPTH"
echo "$VRAMTRACE_LIB"; cp "$1" "${VRAMTRACE_OUTPUT%/*}/t-$$.vtrace"; exit 3"#;
    let assert = vramtrace()
        .env_remove("LD_PRELOAD")
        .arg("run")
        .arg("--lib")
        .arg(&s.lib)
        .arg("-o")
        .arg(&pattern)
        .args(["--stack-depth", "24", "--", "sh", "-c", script, "sh"])
        .arg(&s.sample)
        .assert()
        .code(3);
    let out = assert.get_output();
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            s.lib.display().to_string(),
            pattern.display().to_string(),
            "24".to_string(),
            // The library, for the program to find (the Python module's library_path()).
            s.lib.display().to_string(),
        ]
    );
    let stderr = text(&out.stderr);
    let head = stderr
        .lines()
        .find(|l| l.starts_with("vramtrace: "))
        .unwrap_or_else(|| panic!("no summary in: {stderr}"));
    let prefix = format!("vramtrace: {}/t-", s.out.display());
    assert!(head.starts_with(&prefix), "{head}");
    assert!(
        head.ends_with(".vtrace: pid 4242, 12 events, complete (the process ended: exit)"),
        "{head}"
    );
    // The report's verdict, then what is live, then the command that says more.
    let verdict = stderr.lines().find(|l| l.starts_with("  verdict  "));
    assert!(verdict.is_some(), "{stderr}");
    let name = &head["vramtrace: ".len()..head.find(": pid").unwrap()];
    assert!(
        stderr.contains(&format!("\n  next     vramtrace report {name}\n")),
        "{stderr}"
    );
    assert!(!stderr.contains("t-1.vtrace"), "{stderr}");
    assert!(
        stderr.contains("  live device memory at the end: 4.5 MiB in 4 objects"),
        "{stderr}"
    );
    let sites: Vec<&str> = stderr.lines().filter(|l| l.starts_with("    ")).collect();
    assert_eq!(sites.len(), 3, "{stderr}");
    assert!(sites[0].contains("2.0 MiB") && sites[0].contains("libtorch_cuda.so+0x1234"));
    assert!(
        stderr.contains("  1 orphaned object: see `vramtrace report`"),
        "{stderr}"
    );
    // Its out-of-memory failure (8 GiB asked with 2.5 MiB live) is said in the summary.
    assert!(
        stderr.contains(
            "  out of memory: 1 failure, the first asking 8.0 GiB on device 0 with 2.5 MiB live: \
             see `vramtrace report` (or `vramtrace replay TRACE --at oom`)\n"
        ),
        "{stderr}"
    );
}

#[test]
fn an_existing_preload_is_kept_after_the_tracer() {
    let s = setup();
    vramtrace()
        .env("VRAMTRACE_LIB", &s.lib)
        .env("LD_PRELOAD", "/nonexistent/other.so")
        .current_dir(&s.out)
        .args(["run", "--no-summary", "--", "sh", "-c"])
        .arg(r#"echo "$LD_PRELOAD"; echo "$VRAMTRACE_OUTPUT"; echo "${VRAMTRACE_STACK_DEPTH-unset}""#)
        .assert()
        .success()
        .stdout(format!(
            "{}:/nonexistent/other.so\n{}/vramtrace-%p.vtrace\nunset\n",
            s.lib.display(),
            std::fs::canonicalize(&s.out).unwrap().display()
        ));
}

/// `vramtrace run --lib <lib> -o <out>/x-%p.vtrace -- sh -c SCRIPT`: its stdout and the
/// summary lines it printed on stderr.
fn run_script(s: &Setup, script: &str) -> (String, Vec<String>) {
    let assert = vramtrace()
        .env_remove("LD_PRELOAD")
        .env_remove("VRAMTRACE_DISABLE")
        .arg("run")
        .arg("--lib")
        .arg(&s.lib)
        .arg("-o")
        .arg(s.out.join("x-%p.vtrace"))
        .args(["--", "sh", "-c", script])
        .assert()
        .success();
    let out = assert.get_output();
    let summary = text(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("vramtrace: "))
        .map(str::to_string)
        .collect();
    (text(&out.stdout), summary)
}

#[test]
fn a_run_without_traces_says_whether_the_tracer_was_loaded() {
    let s = setup();
    // The stand-in library is an empty file: the loader refuses it, so no process reports in,
    // and the summary names the file as the reason.
    let (status_dir, summary) = run_script(&s, r#"echo "$VRAMTRACE_RUN_STATUS""#);
    assert_eq!(
        summary,
        [format!(
            "vramtrace: the tracer library was not loaded (no trace written): {} is not the \
             tracer (no shared object exporting vramtrace_mark_step): give libvramtrace.so to \
             --lib",
            s.lib.display()
        )]
    );
    // The status directory was the run's own: private while it ran, gone after.
    let status_dir = status_dir.trim_end();
    assert!(status_dir.contains("vramtrace-run-"), "{status_dir}");
    assert!(
        !Path::new(status_dir).exists(),
        "{status_dir} is left behind"
    );

    // A process that reports in as the library does, and writes no trace: no GPU memory call.
    let (_, summary) = run_script(&s, r#"echo tracing > "$VRAMTRACE_RUN_STATUS/$$""#);
    assert_eq!(
        summary,
        ["vramtrace: the program made no GPU memory call (no trace written)"]
    );
    let (_, summary) = run_script(&s, r#"echo disabled > "$VRAMTRACE_RUN_STATUS/$$""#);
    assert_eq!(
        summary,
        ["vramtrace: tracing was off: VRAMTRACE_DISABLE is set (no trace written)"]
    );
}

/// `vramtrace run -o OUTPUT -- sh -c <copy the sample trace to the path the tracer would>`.
fn run_copying(s: &Setup, output: &Path, copy_to: &str) -> assert_cmd::assert::Assert {
    vramtrace()
        .env_remove("LD_PRELOAD")
        .arg("run")
        .arg("--lib")
        .arg(&s.lib)
        .arg("-o")
        .arg(output)
        .args(["--", "sh", "-c"])
        .arg(format!(r#"cp "$1" "{copy_to}""#))
        .arg("sh")
        .arg(&s.sample)
        .assert()
}

#[test]
fn a_missing_output_directory_is_created() {
    let s = setup();
    let dir = s.dir.path().join("new/traces");
    let assert = run_copying(
        &s,
        &dir.join("job-%p.vtrace"),
        &format!("{}/job-$$.vtrace", dir.display()),
    )
    .success();
    let meta = std::fs::metadata(&dir).expect("the output directory was created");
    let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777;
    // 0755 as the umask leaves it: never wider.
    assert_eq!(mode & !0o755, 0, "mode {mode:o}");
    assert_eq!(mode & 0o700, 0o700, "mode {mode:o}");
    let stderr = text(&assert.get_output().stderr);
    assert!(
        stderr.contains(&format!("vramtrace: {}/job-", dir.display())),
        "{stderr}"
    );
}

#[test]
fn a_directory_gets_one_trace_per_process_inside() {
    let s = setup();
    let dir = s.dir.path().join("by-dir");
    let given = format!("{}/", dir.display());
    let assert = run_copying(
        &s,
        Path::new(&given),
        &format!("{}/vramtrace-$$.vtrace", dir.display()),
    )
    .success();
    let stderr = text(&assert.get_output().stderr);
    assert!(
        stderr.contains(&format!("vramtrace: {}/vramtrace-", dir.display())),
        "{stderr}"
    );
    assert!(stderr.contains(": pid 4242, 12 events"), "{stderr}");
}

#[test]
fn the_summary_finds_traces_named_by_every_placeholder() {
    let s = setup();
    let pattern = s.out.join("%h-rank%r-%p-%t.vtrace");
    let assert = run_copying(
        &s,
        &pattern,
        &format!("{}/node7-rankx-$$-1700000000.vtrace", s.out.display()),
    )
    .success();
    let stderr = text(&assert.get_output().stderr);
    assert!(
        stderr.contains(&format!("vramtrace: {}/node7-rankx-", s.out.display())),
        "{stderr}"
    );
}

#[test]
fn run_help_names_every_placeholder() {
    let out = vramtrace().args(["run", "--help"]).assert().success();
    let help = text(&out.get_output().stdout);
    for placeholder in ["%p", "%r", "%h", "%t", "%%"] {
        assert!(help.contains(placeholder), "{placeholder}: {help}");
    }
}

#[test]
fn a_program_killed_by_a_signal_exits_128_plus_it() {
    let s = setup();
    vramtrace()
        .env_remove("LD_PRELOAD")
        .arg("run")
        .arg("--lib")
        .arg(&s.lib)
        .args(["--no-summary", "--", "sh", "-c", "kill -TERM $$"])
        .assert()
        .code(143);
}

// SIGTERM and SIGHUP sent to vramtrace alone (a scheduler, a closed session) reach the program,
// whose own handler decides; vramtrace waits for it and exits with its code.
#[test]
fn sigterm_and_sighup_are_forwarded_to_the_program() {
    let s = setup();
    for (sig, name) in [(libc::SIGTERM, "TERM"), (libc::SIGHUP, "HUP")] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_vramtrace"))
            .env_remove("LD_PRELOAD")
            .arg("run")
            .arg("--lib")
            .arg(&s.lib)
            .args(["--no-summary", "--", "sh", "-c"])
            .arg(format!("trap 'exit 42' {name}; echo ready; sleep 5 & wait"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "ready\n");
        // SAFETY: signalling the vramtrace process this test started.
        unsafe { libc::kill(child.id() as i32, sig) };
        let start = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(
                start.elapsed() < Duration::from_secs(4),
                "vramtrace did not forward SIG{name}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(
            status.code(),
            Some(42),
            "SIG{name}: the program's own exit code, after its trap ran"
        );
    }
}

/// A copy of the binary in `root/bin`, where no tracer library sits beside it.
fn installed_copy(root: &Path) -> PathBuf {
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let exe = bin.join("vramtrace");
    std::fs::copy(env!("CARGO_BIN_EXE_vramtrace"), &exe).unwrap();
    exe
}

#[test]
fn the_library_is_found_in_lib_beside_bin() {
    let s = setup();
    let root = s.dir.path().join("prefix");
    let exe = installed_copy(&root);
    let run = |exe: &Path| {
        let mut c = assert_cmd::Command::new(exe);
        c.env_remove("VRAMTRACE_LIB")
            .env_remove("LD_PRELOAD")
            .args([
                "run",
                "--no-summary",
                "--",
                "sh",
                "-c",
                "echo \"$LD_PRELOAD\"",
            ]);
        c
    };
    let bin = root.join("bin");
    run(&exe).assert().code(2).stderr(format!(
        "error: cannot find libvramtrace.so (looked in {} and {}/../lib); pass --lib PATH or set VRAMTRACE_LIB\n",
        bin.display(),
        bin.display()
    ));
    std::fs::create_dir(root.join("lib")).unwrap();
    std::fs::write(root.join("lib/libvramtrace.so"), b"").unwrap();
    let want = std::fs::canonicalize(root.join("lib/libvramtrace.so")).unwrap();
    run(&exe)
        .assert()
        .success()
        .stdout(format!("{}\n", want.display()));
}

#[test]
fn bad_run_requests_are_one_line_errors() {
    let s = setup();
    vramtrace()
        .arg("run")
        .arg("--lib")
        .arg(&s.lib)
        .args(["--", "no-such-program-xyz"])
        .assert()
        .code(127)
        .stderr("error: cannot run no-such-program-xyz: no such file or directory (os error 2)\n");
    // A file that is no program: 126, as a shell says it.
    let notes = s.dir.path().join("notes.txt");
    std::fs::write(&notes, "not a program\n").unwrap();
    vramtrace()
        .arg("run")
        .arg("--lib")
        .arg(&s.lib)
        .arg("--")
        .arg(&notes)
        .assert()
        .code(126);
    // A trace where the program goes: the command that reads traces is named.
    let trace = s.dir.path().join("t.vtrace");
    std::fs::write(&trace, "").unwrap();
    vramtrace()
        .arg("run")
        .arg("--lib")
        .arg(&s.lib)
        .arg("--")
        .arg(&trace)
        .assert()
        .code(126)
        .stderr(format!(
            "error: cannot run {0}: permission denied (os error 13) (run and check run a \
             program; for traces already taken: vramtrace report --fail-on growth,orphans {0})\n",
            trace.display()
        ));
    vramtrace()
        .args(["run", "--lib", "/nonexistent/libvramtrace.so", "--", "true"])
        .assert()
        .code(2)
        .stderr("error: --lib /nonexistent/libvramtrace.so: no such file\n");
    let in_dir = s.dir.path().join("run-%h/t-%p.vtrace");
    vramtrace()
        .arg("run")
        .arg("--lib")
        .arg(&s.lib)
        .arg("-o")
        .arg(&in_dir)
        .args(["--", "true"])
        .assert()
        .code(2)
        .stderr(format!(
            "error: -o {}: placeholders (%p, %r, %h, %t) go in the file name, not in the directory\n",
            in_dir.display(),
        ));
    let blocked = s.sample.join("t-%p.vtrace");
    vramtrace()
        .arg("run")
        .arg("--lib")
        .arg(&s.lib)
        .arg("-o")
        .arg(&blocked)
        .args(["--", "true"])
        .assert()
        .code(2)
        .stderr(format!(
            "error: -o {}: {} is a file, not a directory\n",
            blocked.display(),
            s.sample.display()
        ));
}

// `vramtrace run` ignored VRAMTRACE_OUTPUT from the environment. Now it is used when -o is not
// given, and -o wins over it with one line saying so.
#[test]
fn the_environments_output_is_used_unless_o_is_given() {
    let s = setup();
    let pattern = s.out.join("env-%p.vtrace");
    let script = r#"echo "$VRAMTRACE_OUTPUT"; cp "$1" "${VRAMTRACE_OUTPUT%/*}/env-$$.vtrace""#;
    let assert = vramtrace()
        .env_remove("LD_PRELOAD")
        .env("VRAMTRACE_OUTPUT", &pattern)
        .arg("run")
        .arg("--lib")
        .arg(&s.lib)
        .args(["--", "sh", "-c", script, "sh"])
        .arg(&s.sample)
        .assert()
        .success();
    let out = assert.get_output();
    assert_eq!(text(&out.stdout), format!("{}\n", pattern.display()));
    let stderr = text(&out.stderr);
    let written: Vec<_> = std::fs::read_dir(&s.out).unwrap().collect();
    assert_eq!(written.len(), 1);
    let path = written[0].as_ref().unwrap().path();
    assert!(
        stderr.contains(&format!("vramtrace: {}: pid 4242", path.display())),
        "{stderr}"
    );

    let other = s.out.join("o-%p.vtrace");
    let assert = vramtrace()
        .env_remove("LD_PRELOAD")
        .env("VRAMTRACE_OUTPUT", &pattern)
        .arg("run")
        .arg("--lib")
        .arg(&s.lib)
        .arg("-o")
        .arg(&other)
        .args([
            "--no-summary",
            "--",
            "sh",
            "-c",
            r#"echo "$VRAMTRACE_OUTPUT""#,
        ])
        .assert()
        .success()
        .stdout(format!("{}\n", other.display()));
    let stderr = text(&assert.get_output().stderr);
    let note = format!(
        "vramtrace: -o {} is used, not VRAMTRACE_OUTPUT={} from the environment\n",
        other.display(),
        pattern.display()
    );
    assert!(stderr.starts_with(&note), "{stderr}");
}

// A process whose name was taken writes beside it (NAME.PID.EXT): the summary lists those too.
#[test]
fn the_summary_lists_traces_written_beside_a_taken_name() {
    let s = setup();
    let fixed = s.out.join("run.vtrace");
    let script = r#"cp "$1" "$VRAMTRACE_OUTPUT"; cp "$1" "${VRAMTRACE_OUTPUT%.vtrace}.$$.vtrace""#;
    let assert = vramtrace()
        .env_remove("LD_PRELOAD")
        .arg("run")
        .arg("--lib")
        .arg(&s.lib)
        .arg("-o")
        .arg(&fixed)
        .args(["--", "sh", "-c", script, "sh"])
        .arg(&s.sample)
        .assert()
        .success();
    let stderr = text(&assert.get_output().stderr);
    let listed = stderr
        .lines()
        .filter(|l| l.starts_with("vramtrace: ") && l.contains(": pid 4242"))
        .count();
    assert_eq!(listed, 2, "{stderr}");
}

// Twelve processes write a trace each: the first eight are summarized, the rest counted, with
// where to look at all of them.
#[test]
fn a_run_of_many_processes_summarizes_the_first_and_counts_the_rest() {
    let s = setup();
    let script = format!(
        r#"for i in 1 2 3 4 5 6 7 8 9 10 11 12; do cp "{}" "{}/x-$i.vtrace"; done"#,
        s.sample.display(),
        s.out.display()
    );
    let (_, summary) = run_script(&s, &script);
    let per_trace = summary
        .iter()
        .filter(|l| l.contains(": pid 4242, "))
        .count();
    assert_eq!(per_trace, 8, "{summary:?}");
    assert_eq!(
        summary.last().unwrap(),
        &format!(
            "vramtrace: and 4 more traces (vramtrace report {} ranks every trace)",
            s.out.display()
        ),
        "{summary:?}"
    );
}

// `--segment-seconds` reaches the tracer as the duration given: whole seconds made `500ms` 0,
// which the tracer reads as never.
#[test]
fn segment_seconds_keep_their_fraction() {
    let s = setup();
    for (given, env) in [("500ms", "500ms"), ("1.5s", "1500ms"), ("30m", "1800000ms")] {
        let out = vramtrace()
            .env_remove("LD_PRELOAD")
            .arg("run")
            .arg("--lib")
            .arg(&s.lib)
            .arg("-o")
            .arg(s.out.join("seg-%p.vtrace"))
            .args(["--segment-seconds", given, "--", "sh", "-c"])
            .arg(r#"echo "$VRAMTRACE_SEGMENT_SECONDS""#)
            .output()
            .unwrap();
        assert_eq!(text(&out.stdout).trim(), env, "{given}");
    }
}
