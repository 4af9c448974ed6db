//! A trace kept within a disk budget (`VRAMTRACE_SEGMENT_BYTES`, `VRAMTRACE_MAX_BYTES`): while a
//! flood of calls runs, the trace's files never pass the budget; the oldest segments go, the
//! others are whole traces of their own (mode 0600), and the trace's name still reads as the
//! whole trace, with the live set the program left and what rotation removed. A name that is
//! taken is never touched.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use vramtrace_tests::traced::{trace_files, Workload};

use crate::vramtrace_json;

const SEGMENT: u64 = 1 << 20;
const BUDGET: u64 = 3 << 20;

/// Two threads of `pairs` pairs each, in segments of 1 MiB (about 800,000 events each) within
/// a budget of 3 MiB.
fn flood(pairs: u64) -> Workload {
    Workload::new("wl_threads")
        .arg("2")
        .arg(pairs.to_string())
        .env("VRAMTRACE_SEGMENT_BYTES", SEGMENT.to_string())
        .env("VRAMTRACE_MAX_BYTES", BUDGET.to_string())
}

fn dir_bytes(dir: &Path) -> u64 {
    (std::fs::read_dir(dir).into_iter().flatten())
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum()
}

captest!(
    a_bounded_trace_stays_within_its_budget_and_reads_whole,
    |dir| {
        // About 4 million events: 5 segments, the oldest deleted.
        let w = flood(1_000_000);
        let plain = w.run_plain();
        let mut child = w
            .traced_command(dir)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut most = 0;
        while child.try_wait().unwrap().is_none() {
            most = most.max(dir_bytes(dir));
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let traced = child.wait_with_output().unwrap();
        vramtrace_tests::traced::assert_same_behaviour(&w.to_string(), &plain, &traced);
        assert!(most <= BUDGET, "the trace's files reached {most} bytes");
        let files = trace_files(dir);
        assert!(files.len() >= 2, "{files:?}");
        for f in &files {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                name.contains(".seg"),
                "the first segment was deleted: {name}"
            );
            let mode = std::fs::metadata(f).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{name}");
        }
        let whole = vramtrace_json(["report".as_ref(), "--json".as_ref(), dir.as_os_str()]);
        let last = vramtrace_json([
            "report".as_ref(),
            "--json".as_ref(),
            "--last".as_ref(),
            "0".as_ref(),
            files[0].as_os_str(),
        ]);
        // What wl_threads 2 leaves: 1 + 2 buffers of 4096 bytes, nothing lost.
        assert_eq!(
            whole["live"]["device_memory"]["bytes"],
            3 * 4096,
            "{}",
            whole["live"]
        );
        assert_eq!(whole["tracer"]["dropped"], 0);
        for key in ["live", "call_sites", "groups", "orphans", "communicators"] {
            assert_eq!(whole[key], last[key], "{key}");
        }
        let segments = &whole["reading"]["segments"];
        let removed = &segments["removed"];
        assert!(removed["segments"].as_u64() >= Some(1), "{segments}");
        assert_eq!(
            removed["segments"].as_u64().unwrap() + 1,
            segments["first_there"].as_u64().unwrap()
        );
        // Every event is in a segment there or counted as removed.
        let applied = whole["events"]["applied"].as_u64().unwrap();
        assert_eq!(Some(applied), whole["tracer"]["events_written"].as_u64());
        assert!(removed["events"].as_u64().unwrap() < applied);
        assert_eq!(whole["reading"]["unread"]["bytes"], 0);
        // Its peak is the highest point on disk, and says so: a higher one may have been in
        // what rotation deleted.
        assert_eq!(whole["analysis"]["peaks"]["from_event"], removed["events"]);
        let peak = vramtrace_json([
            "replay".as_ref(),
            "--json".as_ref(),
            "--at".as_ref(),
            "peak".as_ref(),
            files[0].as_os_str(),
        ]);
        let said = peak["at"]["point"].as_str().unwrap();
        assert!(
            said.starts_with("peak (the highest on disk: rotation deleted the first "),
            "{said}"
        );

        // Compared with another run of it, rotated as well, the traces' peak and failed calls
        // are no check: the part rotation deleted may hold either (a peak there would be a
        // "regression" of a run kept whole). What is live and how it grows are compared.
        let other = tempfile::tempdir().unwrap();
        let again = w.traced_command(other.path()).output().unwrap();
        assert_eq!(again.status.code(), Some(0));
        let b = trace_files(other.path());
        let d = vramtrace_json([
            "diff".as_ref(),
            "--json".as_ref(),
            files[0].as_os_str(),
            b[0].as_os_str(),
        ]);
        let checks: Vec<&str> = (d["verdict"]["checks"].as_array().unwrap().iter())
            .map(|c| c["metric"].as_str().unwrap())
            .collect();
        assert!(checks.contains(&"live_bytes"), "{checks:?}");
        assert!(!checks.contains(&"peak_bytes"), "{checks:?}");
        assert!(!checks.contains(&"failures"), "{checks:?}");
        let notes = d["verdict"]["notes"].to_string();
        for run in ["A", "B"] {
            assert!(
                notes.contains(&format!(
                    "peak and failed calls not compared: rotation (VRAMTRACE_MAX_BYTES) deleted \
                     run {run}'s first "
                )),
                "{notes}"
            );
        }
        assert!(
            notes.contains(&format!("run A's first {} segment", removed["segments"])),
            "{notes}"
        );
        assert_eq!(d["verdict"]["regression"], false);
        // The text's totals give each run's numbers as on disk, their change not compared.
        let out = vramtrace_tests::traced::vramtrace_command()
            .arg("diff")
            .args([&files[0], &b[0]])
            .output()
            .unwrap();
        let out = vramtrace_tests::traced::text(&out.stdout);
        for name in [
            "peak",
            "allocations",
            "allocated",
            "failed calls",
            "out of memory",
        ] {
            let row = (out.lines())
                .find(|l| l.starts_with(&format!(" {name} ")))
                .unwrap_or_else(|| panic!("{out}"));
            assert!(
                row.matches(" on disk").count() == 2 && row.trim_end().ends_with("not compared"),
                "{row}"
            );
        }
    }
);

captest!(a_taken_segment_name_is_left_alone, |dir| {
    let taken = dir.join("t.seg2.vtrace");
    std::fs::write(&taken, b"a checkpoint").unwrap();
    // A budget that deletes nothing: every segment stays to be looked at.
    let run = flood(300_000)
        .env("VRAMTRACE_OUTPUT", dir.join("t.vtrace"))
        .env("VRAMTRACE_MAX_BYTES", "64MiB")
        .run_both(dir);
    assert!(run.output.status.success());
    assert_eq!(std::fs::read(&taken).unwrap(), b"a checkpoint");
    let fresh: Vec<String> = (trace_files(dir).iter())
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("t.seg2."))
        .collect();
    assert_eq!(fresh.len(), 2, "{fresh:?}");
    let json = vramtrace_json([
        "report".as_ref(),
        "--json".as_ref(),
        dir.join("t.vtrace").as_os_str(),
    ]);
    assert_eq!(json["live"]["device_memory"]["bytes"], 3 * 4096);
    assert!(json["reading"]["segments"]["last_there"].as_u64() >= Some(2));
    assert_eq!(
        json["reading"]["segments"]["removed"],
        serde_json::Value::Null
    );
});

// A second run under the same name once rotation deleted the first's first file: the name is
// free, so the second run takes it, and its segments sit beside the first run's. The name reads
// as the newest trace, and every reading of it says which other trace it stands for and how to
// read that one.
captest!(a_name_two_runs_share_says_which_it_read, |dir| {
    let name = dir.join("t.vtrace");
    for _ in 0..2 {
        let run = flood(600_000)
            .env("VRAMTRACE_OUTPUT", &name)
            .run_traced(dir);
        assert!(run.output.status.success(), "{}", run.stderr());
    }
    assert!(
        !name.exists(),
        "rotation deleted the second run's first file too"
    );
    let report = vramtrace_json(["report".as_ref(), "--json".as_ref(), name.as_os_str()]);
    let segments = &report["reading"]["segments"];
    let others = segments["others"].as_array().unwrap();
    assert_eq!(others.len(), 1, "{segments}");
    let other = others[0]["pid"].as_u64().unwrap();
    assert_ne!(Some(other), report["trace"]["pid"].as_u64());
    let said = format!(
        "; NOT READ: the name also stands for the segments of pid {other} (segments {}-{}) \
         (another run under the same name): name one of its segments to read it",
        others[0]["first_segment"], others[0]["last_segment"]
    );
    let replay = vramtrace_json([
        "replay".as_ref(),
        "--json".as_ref(),
        "--at".as_ref(),
        "end".as_ref(),
        name.as_os_str(),
    ]);
    assert!(
        replay["segments"].as_str().unwrap().ends_with(&said),
        "{}",
        replay["segments"]
    );
    assert_eq!(replay["pid"], report["trace"]["pid"]);
    // A gate's log (stderr) says it too, once.
    let out = vramtrace_tests::traced::vramtrace_command()
        .args(["report", "--fail-on", "growth"])
        .arg(&name)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let warning = format!(
        "warning: {}: the name also stands for the segments of another run (pid {other}), not \
         read: the newest (pid {}) is\n",
        name.display(),
        report["trace"]["pid"]
    );
    assert_eq!(err.matches(&warning).count(), 1, "{err}");
    // A segment of the other run, named: that run is read, and said to be the one read.
    let segment = dir.join(format!("t.seg{}.vtrace", others[0]["first_segment"]));
    let out = vramtrace_tests::traced::vramtrace_command()
        .args(["report", "--fail-on", "growth"])
        .arg(&segment)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let warning = format!(
        "warning: {}: the name also stands for the segments of another run (pid {}), not \
         read: the one this file is a segment of (pid {other}) is\n",
        segment.display(),
        report["trace"]["pid"]
    );
    assert_eq!(err.matches(&warning).count(), 1, "{err}");
});
