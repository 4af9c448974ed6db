//! Bad input gives one clear error line and exit code 2, never a panic.

use crate::support::*;

/// What an empty trace file is said to be.
const EMPTY: &str = "the trace is empty (0 bytes): the tracer wrote nothing to it (it had not \
                     begun, or the process was killed first)";

/// Runs `vramtrace report PATH` and returns its stderr, checking it failed with exit code 2 and
/// printed nothing on stdout.
fn report_error(path: &std::path::Path) -> String {
    let out = vramtrace()
        .arg("report")
        .arg(path)
        .assert()
        .code(2)
        .stdout("")
        .get_output()
        .stderr
        .clone();
    String::from_utf8(out).unwrap()
}

#[test]
fn a_random_file_is_not_a_trace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.vtrace");
    let noise: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(&path, noise).unwrap();
    assert_eq!(
        report_error(&path),
        format!(
            "error: {}: not a vramtrace trace (it does not start with the trace signature)\n",
            path.display()
        )
    );
}

/// A header block of a newer format (its checksum holds: not damage), as a newer tracer writes
/// it: twice.
#[test]
fn a_wrong_version_names_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_workload(dir.path(), "new.vtrace");
    let mut bytes = std::fs::read(&path).unwrap();
    let n = 20 + u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    for block in [0, n] {
        bytes[block + 8..block + 12].copy_from_slice(&99u32.to_le_bytes());
        let crc = crc32fast::hash(&bytes[block + 8..block + n - 4]);
        bytes[block + n - 4..block + n].copy_from_slice(&crc.to_le_bytes());
    }
    std::fs::write(&path, bytes).unwrap();
    assert_eq!(
        report_error(&path),
        format!(
            "error: {}: trace format version 99 is not supported (this vramtrace reads versions 4 to 6)\n",
            path.display()
        )
    );
}

#[test]
fn missing_empty_and_directory_paths() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.vtrace");
    assert_eq!(
        report_error(&missing),
        format!(
            "error: {}: no such file or directory (os error 2)\n",
            missing.display()
        )
    );
    let empty = dir.path().join("empty.vtrace");
    std::fs::write(&empty, b"").unwrap();
    assert_eq!(
        report_error(&empty),
        format!("error: {}: {EMPTY}\n", empty.display())
    );
    // A directory is read as the traces in it (one per rank or process).
    let nothing = dir.path().join("nothing");
    std::fs::create_dir(&nothing).unwrap();
    assert_eq!(
        report_error(&nothing),
        format!(
            "error: {}: no trace files (*.vtrace) in this directory\n",
            nothing.display()
        )
    );
}

/// A directory is read one level deep: traces below it are named, in the error when it holds
/// none of its own and in a warning beside the report when it does.
#[test]
fn traces_in_subdirectories_are_named_not_skipped_unsaid() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job");
    for rank in ["rank0", "rank1"] {
        std::fs::create_dir_all(job.join(rank)).unwrap();
        write_workload(&job.join(rank), "t.vtrace");
    }
    assert_eq!(
        report_error(&job),
        format!(
            "error: {}: no trace files (*.vtrace) in this directory; 2 traces in its \
             subdirectories rank0/, rank1/ (a directory is read one level deep: give a \
             subdirectory)\n",
            job.display()
        )
    );
    write_workload(&job, "top.vtrace");
    let out = vramtrace().arg("report").arg(&job).output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "warning: {}: 2 traces in its subdirectories rank0/, rank1/ are not read (a \
             directory is read one level deep)\n",
            job.display()
        )
    );
}

/// Of a directory's traces, every one that cannot be opened is named (a job where ranks crashed
/// may leave several), not just the first: `report` reports the others beneath that line, and
/// its `--fail-on` cannot pass; a command that needs every trace (the Parquet export) refuses
/// in one line; none readable is one error.
#[test]
fn every_unreadable_trace_of_a_directory_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job");
    std::fs::create_dir(&job).unwrap();
    let (good, _) = write_workload(&job, "rank0.vtrace");
    let empty = job.join("rank1.vtrace");
    std::fs::write(&empty, b"").unwrap();
    let junk = job.join("rank2.vtrace");
    std::fs::write(&junk, b"not a trace at all, not even close").unwrap();
    let empty_says = format!("{}: {EMPTY}", empty.display());
    let out = vramtrace().arg("report").arg(&job).assert().code(0);
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("vramtrace report: 1 of 3 traces"));
    let incomplete = lines.next().unwrap();
    assert!(
        incomplete.starts_with(&format!(
            "INCOMPLETE: 2 cannot be read and are not in this page: {empty_says}; {}: ",
            junk.display()
        )),
        "{incomplete}"
    );
    // The one trace left is reported in full, with no table of one.
    assert!(
        text.contains(&format!("vramtrace report: {}\n", good.display())),
        "{text}"
    );
    assert!(!text.contains("Ranks ("), "{text}");
    let json = vramtrace()
        .args(["report", "--json"])
        .arg(&job)
        .assert()
        .code(0);
    let doc: serde_json::Value = serde_json::from_slice(&json.get_output().stdout).unwrap();
    assert_eq!(doc["reports"].as_array().unwrap().len(), 1);
    assert_eq!(doc["unreadable"][0]["path"], empty.display().to_string());
    assert_eq!(doc["unreadable"][0]["error"], empty_says);
    let gate = vramtrace()
        .args(["report", "--fail-on", "leak=1GiB"])
        .arg(&job)
        .assert()
        .code(2);
    assert!(
        String::from_utf8_lossy(&gate.get_output().stderr).ends_with(&format!(
            "error: could not check: {} cannot be read; and 1 more (named above)\n",
            empty.display()
        ))
    );

    let parquet = vramtrace()
        .args(["export", "--format", "parquet", "-o"])
        .arg(dir.path().join("out"))
        .arg(&job)
        .assert()
        .code(2)
        .get_output()
        .stderr
        .clone();
    let err = String::from_utf8(parquet).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!(
            "error: 2 of 3 traces cannot be read (move them aside to read the others): \
             {empty_says}; {}: ",
            junk.display()
        )),
        "{err}"
    );

    // A link that leads nowhere and a directory named as a trace are named too, not skipped;
    // with no trace left to read, the one error says so.
    std::fs::remove_file(&good).unwrap();
    std::fs::remove_file(&empty).unwrap();
    std::fs::remove_file(&junk).unwrap();
    let link = job.join("rank3.vtrace");
    std::os::unix::fs::symlink(dir.path().join("gone.vtrace"), &link).unwrap();
    let nested = job.join("rank4.vtrace");
    std::fs::create_dir(&nested).unwrap();
    let err = report_error(&job);
    assert!(
        err.starts_with(&format!(
            "error: none of the 2 traces can be read: {}: ",
            link.display()
        )) && err.contains(&format!("; {}: is a directory", nested.display())),
        "{err}"
    );
    // One alone is its own error.
    std::fs::remove_file(&link).unwrap();
    std::fs::remove_dir(&nested).unwrap();
    std::fs::write(&empty, b"").unwrap();
    assert_eq!(report_error(&job), format!("error: {empty_says}\n"));
}

#[test]
fn a_header_cut_short_or_damaged_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_workload(dir.path(), "t.vtrace");
    let bytes = std::fs::read(&path).unwrap();
    for cut in [3usize, 12, 20, 40] {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let err = report_error(&path);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with(&format!("error: {}: ", path.display())),
            "{err}"
        );
    }
    // One damaged header block is read from its copy; both damaged, the trace cannot be read.
    let n = 20 + u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let mut damaged = bytes.clone();
    damaged[20] ^= 0xff;
    std::fs::write(&path, &damaged).unwrap();
    vramtrace().arg("report").arg(&path).assert().success();
    damaged[n + 20] ^= 0xff;
    std::fs::write(&path, &damaged).unwrap();
    assert_eq!(
        report_error(&path),
        format!(
            "error: {}: the trace header is damaged: checksum mismatch\n",
            path.display()
        )
    );
}

#[test]
fn bad_flags_exit_2() {
    vramtrace()
        .args(["report", "--by", "colour", "x"])
        .assert()
        .code(2);
    vramtrace().args(["report"]).assert().code(2);
    vramtrace().args(["run"]).assert().code(2);
    vramtrace().args(["frobnicate"]).assert().code(2);
    // A negative value is the value's error, not "unexpected argument '-5'".
    let out = vramtrace()
        .args(["report", "--alert-percent", "-5", "x.vtrace"])
        .assert()
        .code(2);
    assert_eq!(
        String::from_utf8_lossy(&out.get_output().stderr),
        "error: invalid value '-5' for '--alert-percent <PERCENT>': not a percentage: 0, or \
         0.0001 to 100 (see --help)\n"
    );
    for command in ["report", "diff"] {
        let out = vramtrace()
            .args([command, "--top", "-1", "a.vtrace", "b.vtrace"])
            .assert()
            .code(2);
        assert_eq!(
            String::from_utf8_lossy(&out.get_output().stderr),
            "error: invalid value '-1' for '--top <N>': not a whole number (see --help)\n",
            "{command}"
        );
    }
    // An option of another format is refused, not ignored unsaid.
    let out = vramtrace()
        .args([
            "export", "-f", "csv-live", "--at", "peak", "-o", "-", "x.vtrace",
        ])
        .assert()
        .code(2);
    assert_eq!(
        String::from_utf8_lossy(&out.get_output().stderr),
        "error: --at is an option of --format flamegraph only (see --help)\n"
    );
    let out = vramtrace()
        .args([
            "export",
            "-f",
            "parquet",
            "--samples",
            "5",
            "-o",
            "out",
            "x.vtrace",
        ])
        .assert()
        .code(2);
    assert_eq!(
        String::from_utf8_lossy(&out.get_output().stderr),
        "error: --samples is an option of --format perfetto only (see --help)\n"
    );
    // A mistyped option before the program is an option's error, not a program to run.
    for command in ["check", "run"] {
        let out = vramtrace()
            .args([command, "--jsn", "--", "true"])
            .assert()
            .code(2);
        assert_eq!(
            String::from_utf8_lossy(&out.get_output().stderr),
            "error: unexpected argument '--jsn' found (see --help)\n",
            "{command}"
        );
    }
}

/// The subcommands `vramtrace --help` lists (its own `help` aside).
fn subcommands() -> Vec<String> {
    let out = vramtrace().arg("--help").assert().success();
    let help = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    help.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        // A subcommand's line is indented by two; its wrapped description by more.
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn every_subcommand_has_examples_in_its_help() {
    let subs = subcommands();
    for known in ["report", "replay", "run"] {
        assert!(subs.iter().any(|s| s == known), "{known} not in {subs:?}");
    }
    for sub in &subs {
        let out = vramtrace()
            .args([sub.as_str(), "--help"])
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        let help = String::from_utf8(out).unwrap();
        assert!(help.contains("EXAMPLES:"), "{sub}: {help}");
        assert!(help.contains(&format!("vramtrace {sub} ")), "{sub}: {help}");
    }
}

// `report`, `replay` and `export` on a FIFO blocked, waiting for a writer. A FIFO (or a device)
// is refused from its metadata before it is opened: exit 2 at once, one line.
#[test]
fn a_fifo_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("run.vtrace");
    mkfifo(&fifo);
    let line = format!(
        "error: {}: not a regular file (a FIFO, device or socket); a trace is a file\n",
        fifo.display()
    );
    let out = dir.path().join("out").display().to_string();
    for args in [
        &["report"][..],
        &["replay", "--at", "peak"],
        &["export", "-f", "csv-live", "-o", &out],
        &["export", "-f", "perfetto", "-o", &out],
        &["export", "-f", "parquet", "-o", &out],
    ] {
        vramtrace()
            .args(args)
            .arg(&fifo)
            .timeout(std::time::Duration::from_secs(20))
            .assert()
            .code(2)
            .stdout("")
            .stderr(line.clone());
    }
}

/// `diff X X`, or X against the directory holding it: nothing can differ, so it is not "no
/// regression" (exit 0) but a run that compared nothing (exit 2).
#[test]
fn a_trace_against_itself_is_not_compared() {
    let dir = tempfile::tempdir().unwrap();
    let (trace, _) = write_workload(dir.path(), "run.vtrace");
    for other in [trace.clone(), dir.path().to_path_buf()] {
        let out = vramtrace()
            .arg("diff")
            .arg(&trace)
            .arg(&other)
            .assert()
            .code(2);
        let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
        assert_eq!(
            err,
            format!(
                "error: A and B are the same trace file ({}): nothing can differ; give two runs\n",
                trace.display()
            )
        );
    }
}

/// `export --format html` points at the command that makes the page.
#[test]
fn an_html_export_is_pointed_at_the_report() {
    vramtrace()
        .args(["export", "--format", "html", "t.vtrace"])
        .assert()
        .code(2)
        .stdout("")
        .stderr(
            "error: invalid value 'html' for '--format \
             <perfetto|flamegraph|pytorch|csv-live|csv-events|parquet>'; the HTML page is \
             `vramtrace report --html PAGE TRACE` (see --help)\n",
        );
}

// A negative size or duration is a value that is wrong, not a flag that is unknown.
#[test]
fn a_negative_value_is_said_to_be_one() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_training(dir.path(), "run.vtrace");
    for (flag, value, said) in [
        (
            "--device-memory",
            "-1",
            "not a size: sizes are never negative",
        ),
        (
            "--horizon",
            "-5s",
            "not a duration: durations are never negative",
        ),
        (
            "--last",
            "-1h",
            "not a duration: durations are never negative",
        ),
    ] {
        let out = vramtrace()
            .args(["report", flag, value])
            .arg(&trace)
            .assert()
            .code(2);
        let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
        assert!(
            err.starts_with(&format!("error: invalid value '{value}' for '{flag} "))
                && err.contains(said)
                && err.lines().count() == 1,
            "{err}"
        );
    }
}

// Sizes the tracer could not keep are refused before the program starts, not raised by the
// tracer with a warning in the program's own stderr.
#[test]
fn segment_and_trace_sizes_too_small_are_refused_before_the_program_runs() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    for (command, flag, value, said) in [
        (
            "run",
            "--segment-bytes",
            "64KiB",
            "error: --segment-bytes 64.0 KiB is below the smallest segment, 1.0 MiB\n",
        ),
        (
            "check",
            "--max-bytes",
            "256KiB",
            "error: --max-bytes 256.0 KiB cannot hold two segments of the smallest size (1.0 MiB \
             each): give at least 2.0 MiB\n",
        ),
    ] {
        let out = vramtrace()
            .args([command, flag, value, "--", "touch"])
            .arg(&ran)
            .assert()
            .code(2);
        assert_eq!(String::from_utf8_lossy(&out.get_output().stderr), said);
        assert!(!ran.exists(), "the program did not run");
    }
}
