//! A trace cut into segments, as the tracer writes one under a disk budget: read from any
//! segment, it gives the live set the whole trace gives at the end, field by field; what
//! rotation removed is said apart from lost events; a replay starts at the snapshot nearest its
//! point and finds the peak in the index at the end, reading once.

use serde_json::Value;

use crate::support::*;

/// The parts of a report about the live set at the end.
const LIVE_SET: [&str; 10] = [
    "live",
    "call_sites",
    "call_sites_total",
    "groups",
    "orphans",
    "orphans_total",
    "communicators",
    "modules",
    "device_accounting",
    "tracer",
];

/// What `vramtrace ARGS` prints on standard output.
fn said(args: &[&str]) -> String {
    let out = vramtrace().args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The first line of `text` that starts with `head`.
fn line<'a>(text: &'a str, head: &str) -> &'a str {
    (text.lines())
        .find(|l| l.starts_with(head))
        .unwrap_or_else(|| panic!("no {head:?} in:\n{text}"))
}

fn json(args: &[&str]) -> Value {
    let out = vramtrace().args(args).assert().success();
    serde_json::from_slice(&out.get_output().stdout).unwrap()
}

/// The training trace, cut every 13 events: 6 segments.
fn segmented(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let files = write_segments(dir, "t.vtrace", &training(), 13);
    assert_eq!(files.len(), 6);
    files
}

#[test]
fn any_segment_read_alone_ends_with_the_whole_traces_live_set() {
    let dir = tempfile::tempdir().unwrap();
    let whole = write_training(dir.path(), "one.vtrace");
    let files = segmented(dir.path());
    let one = json(&["report", "--json", whole.to_str().unwrap()]);
    let t = files[0].to_str().unwrap();
    let all = json(&["report", "--json", t]);
    let last = json(&["report", "--json", "--last", "0", t]);
    for key in LIVE_SET {
        assert_eq!(one[key], all[key], "{key}: one file against every segment");
        assert_eq!(
            one[key], last[key],
            "{key}: one file against the last segment"
        );
    }
    assert_eq!(one["events"]["last_seq"], last["events"]["last_seq"]);
    assert_eq!(one["events"]["steps"], last["events"]["steps"]);
    assert_eq!(one["reading"]["segments"], Value::Null);
    let seg = &last["reading"]["segments"];
    assert_eq!(
        (seg["first_there"].as_u64(), seg["last_there"].as_u64()),
        (Some(1), Some(6))
    );
    assert_eq!(
        (seg["first_read"].as_u64(), seg["last_read"].as_u64()),
        (Some(6), Some(6))
    );
    assert_eq!(seg["snapshot_events"], 65);
    assert_eq!(seg["from"], "its last segment");
    assert_eq!(seg["removed"], Value::Null);
    // Where the segment read begins, said beside the window asked for: in the step the last
    // segment's snapshot was taken, before its end.
    let step = seg["read_from_step"].as_u64().unwrap();
    assert!(step < one["events"]["steps"].as_u64().unwrap(), "{seg}");
    let text = said(&["report", "--last", "0", t]);
    assert!(
        text.contains(&format!(
            "  segments  1-6 on disk; read from segment 6 (its last segment: read from the start \
             of the segment it lies in, in step {step} at "
        )),
        "{text}"
    );
    assert_eq!(all["reading"]["segments"]["snapshot_events"], Value::Null);
    // Only what the last segment holds was read.
    assert!(last["reading"]["records"].as_u64() < all["reading"]["records"].as_u64());
}

#[test]
fn what_rotation_removed_is_said_and_is_not_lost_events() {
    let dir = tempfile::tempdir().unwrap();
    let whole = write_training(dir.path(), "one.vtrace");
    let files = segmented(dir.path());
    // The tracer deleted the oldest two to keep its budget: the trace's name still finds the
    // rest.
    std::fs::remove_file(&files[0]).unwrap();
    std::fs::remove_file(&files[1]).unwrap();
    let one = json(&["report", "--json", whole.to_str().unwrap()]);
    let rest = json(&["report", "--json", files[0].to_str().unwrap()]);
    for key in LIVE_SET {
        assert_eq!(one[key], rest[key], "{key}");
    }
    let removed = &rest["reading"]["segments"]["removed"];
    assert_eq!(removed["segments"], 2);
    assert_eq!(removed["events"], 26);
    assert_eq!(removed["steps"], 5);
    assert_eq!(rest["tracer"]["dropped"], 0);
    assert_eq!(rest["reading"]["unread"]["bytes"], 0);
    let text = said(&["report", files[0].to_str().unwrap()]);
    let segments = line(&text, "  segments");
    assert!(
        segments.starts_with(
            "  segments  3-6 on disk, from its snapshot after event 26; removed by \
             rotation (VRAMTRACE_MAX_BYTES), not lost: segments 1-2, 26 events, 5 steps,"
        ),
        "{segments}"
    );
    // The last hour of a trace of milliseconds reaches into what rotation removed: said.
    let text = said(&["report", "--last", "1h", files[0].to_str().unwrap()]);
    let segments = line(&text, "  segments");
    assert!(
        segments.starts_with(
            "  segments  3-6 on disk (the last 60 min, reaching into what rotation removed: read \
             from the oldest segment on disk, in step 5 at "
        ),
        "{segments}"
    );
    // A directory of them is one trace.
    let ranks = json(&["report", "--json", dir.path().to_str().unwrap()]);
    assert_eq!(ranks["ranks"].as_array().map(Vec::len), Some(2), "{ranks}");
}

#[test]
fn a_replay_starts_at_the_nearest_snapshot_and_finds_the_peak_in_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let whole = write_training(dir.path(), "one.vtrace");
    let files = segmented(dir.path());
    let t = files[0].to_str().unwrap();
    for at in ["step 9", "event 50", "peak", "40ms"] {
        let one = json(&["replay", "--json", "--at", at, whole.to_str().unwrap()]);
        let seg = json(&["replay", "--json", "--at", at, t]);
        assert_eq!(one["at"], seg["at"], "{at}");
        assert_eq!(one["live"], seg["live"], "{at}");
        assert_eq!(seg["passes"], 1, "{at}: the index says where");
    }
    // Without the index (a trace of one file written before it), the peak takes two passes.
    let one = json(&["replay", "--json", "--at", "peak", whole.to_str().unwrap()]);
    assert_eq!(one["passes"], 2);
    // The last step's leak, allocated while its temporary is live.
    assert_eq!(one["at"]["event"], 72);
}

/// Bytes of the segments of the PyTorch snapshot at `path`, as Python's pickle reads it.
fn pickle_segment_bytes(path: &std::path::Path) -> u64 {
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import pickle, sys\ns = pickle.load(open(sys.argv[1], 'rb'))\n\
             print(sum(x['total_size'] for x in s['segments']))",
        )
        .arg(path)
        .output()
        .expect("python3 (required by the tests)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// The PyTorch snapshot of a trace read from a segment's snapshot (its first segments removed,
/// or `--last 0`) holds what is live at the end, those allocated before the snapshot too.
#[test]
fn the_pytorch_snapshot_of_a_segment_holds_the_whole_live_set() {
    let dir = tempfile::tempdir().unwrap();
    let files = segmented(dir.path());
    let t = files[0].to_str().unwrap();
    let whole = json(&["report", "--json", t]);
    let bytes = whole["live"]["device_memory"]["bytes"].as_u64().unwrap();
    assert!(bytes > 0);
    let last = dir.path().join("last.pickle");
    vramtrace()
        .args(["export", "--format", "pytorch", "--last", "0", "-o"])
        .arg(&last)
        .arg(t)
        .assert()
        .success();
    assert_eq!(pickle_segment_bytes(&last), bytes);
    std::fs::remove_file(&files[0]).unwrap();
    std::fs::remove_file(&files[1]).unwrap();
    let rotated = dir.path().join("rotated.pickle");
    vramtrace()
        .args(["export", "--format", "pytorch", "-o"])
        .arg(&rotated)
        .arg(t)
        .assert()
        .success();
    assert_eq!(pickle_segment_bytes(&rotated), bytes);
}

/// What rotation removed cannot be answered from what is left, and is never written over: a
/// replay of a removed step or event is an error naming the oldest segment on disk; `--since` a
/// removed step says it read from there; an export refuses the trace's first name (its file
/// removed) and a dataset directory that holds the trace.
#[test]
fn a_removed_point_is_an_error_and_the_traces_names_are_never_written() {
    let dir = tempfile::tempdir().unwrap();
    let files = segmented(dir.path());
    std::fs::remove_file(&files[0]).unwrap();
    std::fs::remove_file(&files[1]).unwrap();
    let first = files[0].to_str().unwrap();
    for at in ["step 2", "event 20"] {
        let out = vramtrace()
            .args(["replay", "--at", at, first])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{at}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!(
                "{at} was removed by rotation (VRAMTRACE_MAX_BYTES)"
            )) && err.contains("begins with segment 3, after step 5 and 26 events"),
            "{err}"
        );
    }
    // A removed segment's name reads as the trace; a number it never reached is no trace.
    let removed = dir.path().join("t.seg2.vtrace");
    assert!(!removed.exists());
    json(&["report", "--json", removed.to_str().unwrap()]);
    let never = dir.path().join("t.seg9.vtrace");
    let out = vramtrace().arg("report").arg(&never).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("t.seg9.vtrace"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kept = json(&["replay", "--json", "--at", "step 9", first]);
    assert_eq!(kept["at"]["step"], 9);
    // The replay says where it read from and what rotation removed, as the report does, and
    // which process the trace is of.
    let segments = kept["segments"].as_str().unwrap_or_default();
    assert!(
        segments.starts_with("3-") && segments.contains("removed by rotation (VRAMTRACE_MAX_BYTES), not lost: segments 1-2, 26 events, 5 steps"),
        "{segments}"
    );
    assert!(
        kept["pid"].as_u64().is_some_and(|p| p > 0),
        "{}",
        kept["pid"]
    );
    let text = said(&["replay", "--at", "step 9", first]);
    assert!(
        text.contains(&format!("\n  segments  {segments}\n")),
        "{text}"
    );
    // A time counts from the first event (1 ms), as the replay counts it; segment 3 begins at
    // its last removed event's, event 26 at 26 ms: 25 ms after the first is on disk, a moment
    // before it is removed, and the error names the first time there is.
    let out = vramtrace()
        .args(["replay", "--at", "24.5ms", first])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "24.5 ms after the first event was removed by rotation (VRAMTRACE_MAX_BYTES): the \
             trace there begins with segment 3, after step 5 and 26 events (25 ms after the \
             first event)"
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let at = json(&["replay", "--json", "--at", "25ms", first]);
    assert_eq!(
        (&at["at"]["event"], &at["at"]["since_first_ns"]),
        (&26.into(), &25_000_000.into())
    );
    let since = json(&["report", "--json", "--since", "25ms", first]);
    assert_eq!(
        since["reading"]["segments"]["removed"]["span_ns"],
        25_000_000
    );
    assert_eq!(
        since["reading"]["segments"]["from"],
        "since 25 ms after the first event"
    );
    let since = json(&["report", "--json", "--since", "step 2", first]);
    assert_eq!(
        since["reading"]["segments"]["from"],
        "since step 2, which rotation removed: read from the oldest segment on disk"
    );
    let out = vramtrace()
        .args([
            "export", "--format", "csv-live", "--force", "-o", first, first,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("names the trace being read"));
    assert!(!files[0].exists());
    let out = vramtrace()
        .args(["export", "--format", "parquet", "--force", "-o"])
        .arg(dir.path())
        .arg(first)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("a trace being read"));
    assert!(files[2..].iter().all(|f| f.exists()));
    // Exported from a later segment, the trace is named by its first segment's name, in the
    // summary as in `traces.trace`, and so is its run.
    let data = dir.path().join("data");
    let out = vramtrace()
        .args(["export", "--format", "parquet", "--json", "-o"])
        .arg(&data)
        .arg(&files[3])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(written["run"], "t");
    assert_eq!(written["traces"][0]["trace"], first);
    // diff and the HTML page say that the totals cover the segments on disk (against another
    // process's run: diff refuses two traces of one).
    let whole = dir.path().join("one.vtrace");
    let other = vramtrace_collector::format::Header {
        pid: 4243,
        ..header()
    };
    let mut w = vramtrace_collector::format::TraceWriter::new(
        std::fs::File::create(&whole).unwrap(),
        &other,
    )
    .unwrap();
    for record in &training() {
        w.write(record).unwrap();
    }
    w.finish().unwrap();
    let diff = vramtrace()
        .args(["diff", "--json", whole.to_str().unwrap(), first])
        .output()
        .unwrap();
    let diff: Value = serde_json::from_slice(&diff.stdout).unwrap();
    assert_eq!(diff["a"].get("segments"), None);
    let said = diff["b"]["segments"].as_str().unwrap();
    assert!(
        said.starts_with("3-6 on disk") && said.contains("segments 1-2, 26 events"),
        "{said}"
    );
    let page = dir.path().join("page.html");
    vramtrace()
        .args(["report", "--html"])
        .arg(&page)
        .arg(first)
        .assert()
        .success();
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("Segments: 3-6 on disk"),
        "no segments line in the page"
    );
    // A trace that fits in its first segment has nothing to say about segments.
    let small = tempfile::tempdir().unwrap();
    let one = write_segments(small.path(), "s.vtrace", &training(), 1 << 20);
    assert_eq!(one.len(), 1);
    let text = vramtrace().arg("report").arg(&one[0]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("  records "), "{text}");
    assert!(!text.contains("  segments "), "{text}");
    let facts = json(&["report", "--json", one[0].to_str().unwrap()]);
    assert_eq!(
        facts["reading"]["segments"]["last_there"], 1,
        "a segment header is read"
    );
}

// A copy of a trace's file beside it is a trace of its own, not a segment of the same one: the
// report of the directory reads both, the six segments as one trace and the copy (of its first
// segment) as another. Before, the copy's twin was left out without a word. Both are as far from
// their median; the whole trace, with its growth the copy lacks, comes first.
#[test]
fn a_copy_of_a_segment_is_a_trace_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let files = segmented(dir.path());
    let copy = dir.path().join("copy.vtrace");
    std::fs::copy(&files[0], &copy).unwrap();
    let d = json(&["report", "--json", dir.path().to_str().unwrap()]);
    let paths: Vec<&str> = d["reports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["trace"]["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [files[0].to_str().unwrap(), copy.to_str().unwrap()],
        "{d}"
    );
}

// --since and --last choose where to start among a trace's segments: on a trace of one file
// the whole of it is read, and the report says so rather than ignoring the flag unsaid.
#[test]
fn a_window_on_a_trace_of_one_file_is_said_to_read_it_whole() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_segments(dir.path(), "one.vtrace", &training(), 1_000_000);
    assert_eq!(files.len(), 1);
    let t = files[0].to_str().unwrap();
    let out = vramtrace()
        .args(["report", "--since", "step 3", t])
        .assert()
        .success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(
        text.contains(
            "\n  segments  one, read whole: since step 3 chooses where to start among a trace's \
             segments, and this trace is one file\n"
        ),
        "{text}"
    );
    let plain = vramtrace().args(["report", t]).assert().success();
    let plain = String::from_utf8_lossy(&plain.get_output().stdout).into_owned();
    assert!(!plain.contains("  segments  "), "{plain}"); // An export too: its CSV starts at the first event, and stderr says why (it said nothing).
    let out = vramtrace()
        .args([
            "export",
            "--format",
            "csv-events",
            "--last",
            "1ms",
            "-o",
            "-",
            t,
        ])
        .assert()
        .success();
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert_eq!(
        err.lines().next(),
        Some(
            format!(
                "note: {t}: segments one, read whole: the last 1 ms chooses where to start among a \
                 trace's segments, and this trace is one file; the export holds what is on disk"
            )
            .as_str()
        ),
        "{err}"
    );
}

// A moment past the end of the trace is an error, as in replay: the report would otherwise
// answer about the last segment under a heading that says another moment.
#[test]
fn a_since_past_the_end_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let files = segmented(dir.path());
    let t = files[0].to_str().unwrap();
    let steps = json(&["report", "--json", t])["events"]["steps"]
        .as_u64()
        .unwrap();
    for (since, want) in [
        (
            format!("step {}", steps + 1),
            format!(
                "the trace ends before step {} (it has {steps} steps)",
                steps + 1
            ),
        ),
        (
            "1h".to_string(),
            "the trace ends before 60 min after its first event (it lasts ".to_string(),
        ),
    ] {
        let out = vramtrace()
            .args(["report", "--since", &since, t])
            .assert()
            .code(2);
        let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
        assert!(err.starts_with(&format!("error: {t}: {want}")), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    // The last step is there.
    vramtrace()
        .args(["report", "--since", &format!("step {steps}"), t])
        .assert()
        .success();
}

// A trace cut into segments whose last file is cut inside a chunk (the process killed while it
// wrote) is cut short, and that chunk is the cut, not damage, as for a trace of one file.
#[test]
fn the_chunk_a_segmented_trace_is_cut_inside_is_the_cut_not_damage() {
    let dir = tempfile::tempdir().unwrap();
    let files = segmented(dir.path());
    let last = files.last().unwrap();
    let len = std::fs::metadata(last).unwrap().len();
    let file = std::fs::OpenOptions::new().write(true).open(last).unwrap();
    file.set_len(len * 3 / 4).unwrap();
    drop(file);
    let out = vramtrace()
        .args(["report", files[0].to_str().unwrap()])
        .assert()
        .success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    let incomplete = text
        .lines()
        .find(|l| l.starts_with("  trace          INCOMPLETE"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        incomplete.contains("is cut short (truncated: cut off inside the chunk at byte"),
        "{incomplete}"
    );
    assert!(!incomplete.contains("damaged"), "{incomplete}");
}

/// A segment missing from the middle of a trace (deleted by hand, or never copied) is a gap:
/// said in the head of the report, listed in the JSON, and no limit passes it.
#[test]
fn a_missing_segment_is_said_and_never_passes() {
    let dir = tempfile::tempdir().unwrap();
    let files = segmented(dir.path());
    std::fs::remove_file(&files[2]).unwrap();
    let t = files[0].to_str().unwrap();
    let all = json(&["report", "--json", t]);
    assert_eq!(
        all["reading"]["segments"]["missing"],
        serde_json::json!([3])
    );
    let out = vramtrace()
        .args(["report", "--fail-on", "leak=1GiB", t])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let limits = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{text}");
    let segments = line(&text, "  segments");
    assert!(
        segments.starts_with(
            "  segments  1, 2, 4, 5, 6 on disk; MISSING: 3 (their events are not read); the \
             answers start after what is missing, at segment 4's snapshot after event 39"
        ),
        "{segments}"
    );
    let gap = format!(
        "  not checked: the trace is missing 13 events between segments ({}: segment 3 is not \
         there; reading starts again from segment 4's snapshot)",
        files[3].display()
    );
    assert!(limits.contains(&gap), "{limits}");
    // A window reaching back before the trace began reads from its start, and says so (not
    // "the segment it lies in": it lies in none).
    let text = said(&["report", "--last", "1h", t]);
    assert!(
        line(&text, "  segments").starts_with(
            "  segments  1, 2, 4, 5, 6 on disk; MISSING: 3 (their events are not read) (the last \
             60 min: read from the trace's start); the answers start after what is missing, at \
             segment 4's snapshot after event 39"
        ),
        "{text}"
    );
    // A window from a step that may lie in the missing segment: read from the segment before
    // it, and the answers start after the gap (not "the segment it lies in").
    let text = said(&["report", "--since", "step 6", t]);
    assert_eq!(
        line(&text, "  segments"),
        "  segments  1, 2, 4, 5, 6 on disk; MISSING: 3 (their events are not read); read from \
         segment 2 (since step 6: the last segment on disk to begin before it, in step 2 at 12 \
         ms); the answers start after what is missing, at segment 4's snapshot after event 39"
    );
    // A point in the missing segment is not known: an error, not the next snapshot's moment.
    let out = vramtrace()
        .args(["replay", "--at", "step 6", t])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "error: {t}: step 6 lies in what the trace is missing ({}: segment 3 is not there; \
             reading starts again from segment 4's snapshot): the state there is not known; the \
             trace goes on after event 39, in step 7\n",
            files[3].display()
        )
    );
    // The alert the tracer raised in step 10, in segment 5, missing too: read from where
    // segment 6 begins, it keeps its step (not the 8 read before the gap), and counts once.
    std::fs::remove_file(&files[4]).unwrap();
    let all = json(&["report", "--json", t]);
    let alerts = &all["analysis"]["alerts"];
    assert_eq!(alerts.as_array().map(Vec::len), Some(1), "{alerts}");
    assert_eq!(alerts[0]["step"], TRAINING_ALERT_STEP, "{alerts}");
}

/// A segment's snapshot carries the live set, not the failures before it: in a trace whose
/// first segments rotation removed, an out-of-memory failure read fails the limit, and none
/// read passes nothing.
#[test]
fn the_oom_limit_of_a_rotated_trace_never_passes_what_it_did_not_see() {
    let dir = tempfile::tempdir().unwrap();
    let files = segmented(dir.path());
    std::fs::remove_file(&files[0]).unwrap();
    let t = files[1].to_str().unwrap();
    let run = |limit: &str| {
        let out = vramtrace()
            .args(["report", "--fail-on", limit, t])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, text) = run("oom");
    eprintln!("{text}");
    assert_eq!(code, Some(1), "the failure at the end is read: {text}");
    let (code, text) = run("oom=1");
    eprintln!("{text}");
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains(
        "  not checked: the trace is read from a segment's snapshot in step 2 (rotation deleted \
         what came before, or --last/--since left it out): out-of-memory failures before it \
         are not in the snapshot"
    ), "{text}");
}

/// An answer about the end of a long job reads its last segment, whose few steps cannot show a
/// slow leak: what the leaking line still holds at the end, made step after step before, is its
/// growth, and the verdict is the whole trace's — not a teardown-only note about the same
/// memory, nor the tracer's alert alone.
#[test]
fn the_last_segments_verdict_is_the_whole_traces() {
    let dir = tempfile::tempdir().unwrap();
    let files = segmented(dir.path());
    let t = files[0].to_str().unwrap();
    let text = said(&["report", "--last", "0", t]);
    let whole = said(&["report", t]);
    let verdict = "  verdict   ALERT: steady growth at train.py:42 in step (libtorch_cuda.so) on \
                   device 0, +1.0 MiB per step, out of memory at step 12 (that line is where the \
                   allocator asked the driver for memory: what keeps it may be another); 1 more \
                   finding (DIAGNOSIS below)";
    assert_eq!(line(&text, "  verdict"), verdict);
    assert_eq!(line(&whole, "  verdict"), verdict);
    assert_eq!(line(&text, "  growth "), line(&whole, "  growth "));
    assert!(
        line(&text, "     evidence").starts_with(
            "     evidence  +1.0 MiB per step after step 0, judged on the objects it still holds \
             at the end, by the step each was made in (the samples before step 11, where reading \
             began at a segment's snapshot, are not read); 12 rises"
        ),
        "{text}"
    );
    // The memory of the leak is not what the exit releases: the note names the other place.
    assert_eq!(
        line(&text, "  2. note"),
        "  2. note: teardown-only at libnccl.so.2+0x500 (libnccl.so.2)"
    );
    let last = json(&["report", "--json", "--last", "0", t]);
    let first = &last["analysis"]["diagnosis"][0];
    assert_eq!(first["severity"], "alert", "{first}");
    assert_eq!(first["evidence"]["kept_from"], 11);
    assert_eq!(first["evidence"]["alerted_at_step"], Value::Null);
    let rate = first["evidence"]["rate"].as_f64().unwrap();
    assert!((rate - 1048576.0).abs() < 0.01 * 1048576.0, "{rate}");
    // The whole trace judges the growth on its samples: no finding rests on the alert or on
    // what is kept there.
    let all = json(&["report", "--json", t]);
    let first = &all["analysis"]["diagnosis"][0];
    assert_eq!(
        (
            &first["evidence"]["alerted_at_step"],
            &first["evidence"]["kept_from"]
        ),
        (&Value::Null, &Value::Null)
    );
    assert_eq!(first["evidence"]["rises"], 11, "{first}");
    // A replay reads from the segment its point lies in: a step or two read there are too few
    // to judge, and are said to be, on the steps of the run (not its milliseconds as windows).
    let text = said(&["replay", "--at", "step 3", t]);
    assert_eq!(
        line(&text, "  growth "),
        "  growth         not judged: 1 sample read since step 2, where reading began (at least 4 \
         are needed: read from earlier, `report` of every segment on disk or `--since`)"
    );
    assert!(!text.contains("window"), "{text}");
    // A replay at a step is judged on what was live there, as the report at the end is.
    let text = said(&["replay", "--at", "step 11", t]);
    assert_eq!(line(&text, "     cause"), line(&whole, "     cause"));
}

/// A leak the program frees at its exit leaves nothing live at the end to judge it on: the last
/// segment's few steps rest its verdict on the alert the tracer raised before, at its place,
/// and say so.
#[test]
fn a_leak_freed_at_exit_rests_on_the_tracers_alert() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_segments(dir.path(), "t.vtrace", &training_freed_at_exit(), 13);
    let t = files[0].to_str().unwrap();
    let text = said(&["report", "--last", "0", t]);
    assert_eq!(
        line(&text, "  growth "),
        "  growth         STEADY GROWTH on device 0: +1.0 MiB per step at train.py:42 in step \
         (libtorch_cuda.so), as the tracer alerted at step 10 (the steps read, from step 12, do \
         not show it)"
    );
    let last = json(&["report", "--json", "--last", "0", t]);
    let first = &last["analysis"]["diagnosis"][0];
    assert_eq!(first["severity"], "alert", "{first}");
    assert_eq!(first["evidence"]["alerted_at_step"], TRAINING_ALERT_STEP);
    assert_eq!(first["evidence"]["kept_from"], Value::Null);
    assert_eq!(first["evidence"]["rate"], 1048576.0);
    assert_eq!(
        line(&text, "     cause"),
        "     cause     steady growth the tracer's live analysis saw in the steps before step 12, \
         where reading began: the steps read are too few to show it again"
    );
}

/// The page of a rotated trace counts the run's events and says how many of them it read, over
/// the span it read: not the whole run's count over the span of its last segments.
#[test]
fn the_page_of_a_rotated_trace_says_which_events_it_read() {
    let dir = tempfile::tempdir().unwrap();
    let files = segmented(dir.path());
    std::fs::remove_file(&files[0]).unwrap();
    std::fs::remove_file(&files[1]).unwrap();
    let html = dir.path().join("page.html");
    vramtrace()
        .args(["report", "--html"])
        .arg(&html)
        .arg(&files[2])
        .assert()
        .success();
    let text = std::fs::read_to_string(&html).unwrap();
    assert!(
        text.contains(&format!(
            " · {TRAINING_EVENTS} events, the last {} read, over ",
            TRAINING_EVENTS - 26
        )),
        "{}",
        &text[text.find("class=\"facts\"").unwrap()..][..300]
    );
}

/// A ring of buffers, each made again in turn, keeps its latest ones at the end, made one a step:
/// no growth, whatever part of the run is read. What a place holds at the end is its course
/// only where what it held at the snapshot is still held (a leak frees nothing it made).
#[test]
fn a_ring_of_buffers_read_from_its_last_segment_does_not_grow() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_segments(dir.path(), "t.vtrace", &ring(120, 40), 60);
    assert!(files.len() >= 4, "{files:?}");
    let t = files[0].to_str().unwrap();
    for args in [
        vec!["report", "--json", t],
        vec!["report", "--json", "--last", "0", t],
    ] {
        let r = json(&args);
        assert_eq!(
            r["analysis"]["growth"]["steady"],
            serde_json::json!([]),
            "{args:?}"
        );
        assert_eq!(r["live"]["device_memory"]["bytes"], 40 * MIB, "{args:?}");
        let grows = (r["analysis"]["diagnosis"].as_array().unwrap().iter())
            .filter(|f| f["class"] == "steady-growth")
            .count();
        assert_eq!(grows, 0, "{args:?}: {}", r["analysis"]["diagnosis"]);
    }
}
