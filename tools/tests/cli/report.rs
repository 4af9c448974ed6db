//! `vramtrace report` on the known workload: exact numbers in JSON, key lines in the tables.

use serde_json::{json, Value};

use crate::support::*;

fn report_json(path: &std::path::Path, extra: &[&str]) -> Value {
    let out = vramtrace()
        .arg("report")
        .arg("--json")
        .args(extra)
        .arg(path)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    serde_json::from_slice(&out).expect("one JSON document")
}

pub fn report_text(path: &std::path::Path, extra: &[&str]) -> String {
    let out = vramtrace()
        .arg("report")
        .args(extra)
        .arg(path)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    String::from_utf8(out).unwrap()
}

#[test]
fn json_has_the_exact_live_set() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_workload(dir.path(), "run.vtrace");
    let r = report_json(&path, &[]);
    assert_eq!(r["schema"], "vramtrace-report/1");
    assert_eq!(r["trace"]["pid"], 4242);
    assert_eq!(r["trace"]["host"], "gpu-node-7");
    assert_eq!(r["trace"]["rank"], 3);
    assert_eq!(
        r["trace"]["command_line"],
        json!(["python", "train.py", "--epochs", "1"])
    );
    assert_eq!(r["reading"]["complete"], true);
    assert_eq!(r["reading"]["ending"]["kind"], "complete");
    assert_eq!(r["reading"]["end_reason"], "exit");
    assert_eq!(r["reading"]["records"], 20);
    assert_eq!(r["reading"]["skipped_records"], 0);
    assert_eq!(r["tracer"]["recorded"], true);
    assert_eq!(r["tracer"]["dropped"], 0);
    assert_eq!(r["events"]["applied"], 12);

    let live = &r["live"];
    assert_eq!(live["device_memory"], json!({"count": 4, "bytes": 4718592}));
    assert_eq!(live["orphaned"], json!({"count": 1, "bytes": 2097152}));
    assert_eq!(
        live["by_device"],
        json!([{"device": 0, "count": 4, "bytes": 4718592}])
    );
    let modules: Vec<(&str, u64)> = live["by_module"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["name"].as_str().unwrap(), m["bytes"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        modules,
        [
            ("libtorch_cuda.so", 2097152),
            ("libnccl.so.2", 2097152),
            ("python3.12", 524288)
        ]
    );
    let comm = &live["by_communicator"][0];
    assert_eq!(comm["comm"], "0xc0");
    assert_eq!(comm["state"], "destroyed");
    assert_eq!(
        (comm["count"].as_u64(), comm["bytes"].as_u64()),
        (Some(1), Some(2097152))
    );

    let sites: Vec<(&str, u64, u64)> = r["call_sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["site"].as_str().unwrap(),
                s["count"].as_u64().unwrap(),
                s["bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        sites,
        [
            ("libtorch_cuda.so+0x1234", 2, 2097152),
            ("libnccl.so.2+0x500", 1, 2097152),
            ("python3.12+0x30", 1, 524288)
        ]
    );
    assert_eq!(r["call_sites"][0]["stack"], 1);
    assert_eq!(r["call_sites"][0]["first_seq"], 1);
    assert_eq!(r["call_sites"][0]["last_seq"], 2);

    let orphan = &r["orphans"][0];
    assert_eq!(orphan["address"], "0x700000400000");
    assert_eq!(orphan["bytes"], 2097152);
    assert_eq!(orphan["flags"], json!(["communicator-gone"]));
    assert_eq!(orphan["origin"]["communicator"], "0xc0");

    let f = &r["failures"];
    assert_eq!(
        (f["total"].as_u64(), f["out_of_memory"].as_u64()),
        (Some(2), Some(1))
    );
    let oom = &f["list"][0];
    assert_eq!(oom["api"], "cudaMalloc");
    assert_eq!(oom["out_of_memory"], true);
    assert_eq!(oom["request_bytes"], 8589934592u64);
    assert_eq!(oom["live_device_bytes"], 2621440);
    assert_eq!(oom["device"], 0);

    let a = &r["anomalies"];
    assert_eq!(a["total"], 1);
    assert_eq!(a["by_kind"], json!([{"kind": "double-free", "count": 1}]));
    assert_eq!(a["list"][0]["address"], "0x700000200000");
    assert_eq!(a["list"][0]["related_seq"], 4);

    assert_eq!(r["lookups"]["total"], 0);
    assert_eq!(r["warnings"]["total"], 1);
    let malloc = r["calls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["api"] == "cudaMalloc")
        .unwrap();
    assert_eq!(
        (malloc["calls"].as_u64(), malloc["failed"].as_u64()),
        (Some(7), Some(1))
    );
    assert_eq!(r["modules"][1]["path"], "/usr/lib/libtorch_cuda.so");
    assert_eq!(r["modules"][1]["build_id"], "abcd");
}

#[test]
fn top_limits_the_lists() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_workload(dir.path(), "run.vtrace");
    let r = report_json(&path, &["--top", "1"]);
    assert_eq!(r["call_sites"].as_array().unwrap().len(), 1);
    assert_eq!(r["call_sites_total"], 3);
}

#[test]
fn the_tables_say_what_is_live_and_what_went_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_workload(dir.path(), "run.vtrace");
    let text = report_text(&path, &[]);
    // The path and the compressed size vary with the machine and the zstd build.
    let text: Vec<String> = text
        .replace(&path.display().to_string(), "[TRACE]")
        .lines()
        .map(|l| match (l.find("chunks ("), l.find(" bytes)")) {
            (Some(a), Some(b)) if a < b => format!("{}chunks (N{}", &l[..a], &l[b..]),
            _ => l.to_string(),
        })
        .collect();
    insta::assert_snapshot!("report_text", text.join("\n"));
}

#[test]
fn module_ranking() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_workload(dir.path(), "run.vtrace");
    let text = report_text(&path, &["--by", "module", "--top", "2"]);
    assert!(
        text.contains("Top owner modules by device memory (2 of 3)"),
        "{text}"
    );
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("Top owner modules"))
        .skip(3)
        .take(2)
        .map(str::trim)
        .collect();
    assert_eq!(
        rows,
        [
            "libtorch_cuda.so         2   2.0 MiB",
            "libnccl.so.2             1   2.0 MiB"
        ]
    );
    assert!(!text.contains("Top call sites"));
}

#[test]
fn a_truncated_trace_reports_how_far_it_got_and_the_live_set_then() {
    let dir = tempfile::tempdir().unwrap();
    let (path, boundary) = write_workload(dir.path(), "cut.vtrace");
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(boundary + 10).unwrap();
    drop(file);

    let r = report_json(&path, &[]);
    assert_eq!(r["reading"]["complete"], false);
    assert_eq!(r["reading"]["ending"]["kind"], "truncated");
    assert_eq!(r["reading"]["ending"]["offset"], boundary);
    assert_eq!(r["reading"]["records"], FIRST_CHUNK);
    assert_eq!(r["reading"]["end_reason"], Value::Null);
    assert_eq!(r["tracer"]["recorded"], false);
    assert_eq!(
        r["live"]["device_memory"],
        json!({"count": 3, "bytes": 2621440})
    );

    let text = report_text(&path, &[]);
    let want_ending =
        format!("  trace     truncated: cut off inside the chunk at byte {boundary} (10 of ");
    assert!(text.contains(&want_ending), "{text}");
    assert!(
        text.contains("  lost      not known: the trace holds no tracer counters"),
        "{text}"
    );
    assert!(
        text.contains("  device memory  2.5 MiB in 3 objects"),
        "{text}"
    );
    // The first line of FINDINGS says the answers cover only what could be read.
    let findings: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != "FINDINGS")
        .skip(1)
        .take(2)
        .collect();
    let head = format!(
        "  trace          INCOMPLETE: it is cut short (truncated: cut off inside the chunk at \
         byte {boundary} (10 of "
    );
    // The chunk the cut goes through is the cut, not damage.
    let tail = " bytes present)); what follows covers only what could be read";
    assert!(
        findings[0].starts_with(&head) && findings[0].ends_with(tail),
        "{text}"
    );
    assert!(findings[1].starts_with("  orphans "), "{text}");

    // Cut exactly between chunks: whole chunks, no end record.
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(boundary).unwrap();
    drop(file);
    let r = report_json(&path, &[]);
    assert_eq!(r["reading"]["ending"]["kind"], "no-end-record");
    assert_eq!(r["live"]["device_memory"]["bytes"], 2621440);
}

#[test]
fn every_top_level_field_is_documented() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/report-json.md"
    ))
    .unwrap();
    let top_level: Vec<&str> = doc
        .split("## Top level")
        .nth(1)
        .unwrap()
        .split("\n## ")
        .next()
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_workload(dir.path(), "run.vtrace");
    // `limits` comes with --fail-on.
    let r = report_json(&path, &["--fail-on", "leak=1GiB"]);
    let mut keys: Vec<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
    let mut documented = top_level.clone();
    keys.sort_unstable();
    documented.sort_unstable();
    assert_eq!(keys, documented);
}

/// The report of GPU fixture `name` (under `tests/fixtures/gpu`), as text.
fn fixture_text(name: &str) -> String {
    let out = vramtrace()
        .arg("report")
        .arg(gpu_fixture(name))
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

/// The report of GPU fixture `name`, as JSON.
fn fixture_json(name: &str) -> serde_json::Value {
    let out = vramtrace()
        .args(["report", "--json"])
        .arg(gpu_fixture(name))
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

fn gpu_fixture(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/gpu")
        .join(name)
}

// The live alert of an H100 run, as the report says it: at its step as the report counts steps
// (the tracer counted the loop's first iteration too: "at step 201" of 200), and full at the
// run's step time, as the finding beside it says (the tracer's warm-up-laden timing said 9 min
// for the 5 of the same 155,773 steps).
#[test]
fn a_live_alert_is_said_in_the_report_s_steps_and_time() {
    let text = fixture_text("h100/leak_slow-run.vtrace");
    let alerted = text.lines().find(|l| l.contains("alerted ")).unwrap();
    assert!(
        alerted.contains("alerted        at step 200: "),
        "{alerted}"
    );
    assert!(
        alerted.contains("full in 155,773 steps (5 min)"),
        "{alerted}"
    );
    assert!(
        text.contains("76.1 GiB left, full in 155,773 steps (5 min)"),
        "{text}"
    );
}

// Rank 2's leak without the hooks: 62 events, no steps, the allocator's segments rising in a
// few large steps. A rise that stayed is then no proof of a one-off: the note says so, where it
// said "(not a leak)" of the leaking rank.
#[test]
fn a_rise_that_stayed_without_steps_is_not_called_no_leak() {
    let r = fixture_json("h100/ranks_gloo-rank2-bare.vtrace");
    let peak = (r["analysis"]["diagnosis"].as_array().unwrap().iter())
        .find(|f| f["class"] == "peak")
        .unwrap();
    let cause = peak["cause"].as_str().unwrap();
    assert!(!cause.contains("not a leak"), "{cause}");
    assert!(
        cause.contains("with no steps to count it cannot be told apart"),
        "{cause}"
    );
}

// Steps found in a caching allocator's segments, without the hooks: leak_three's driver sees
// them every second training step (60 for 120), its rates doubled. The steps line says a step
// may span several of the program's (it said so only when one or two kinds recurred; here 3
// do); a stream-ordered allocator's steps (every tensor asks the driver) are the program's.
#[test]
fn steps_from_a_caching_allocator_s_segments_are_said_to_span_several() {
    let steps_line = |name: &str| {
        let text = fixture_text(name);
        text.lines()
            .find(|l| l.starts_with("  steps "))
            .unwrap()
            .to_string()
    };
    let three = steps_line("h100/leak_three-bare.vtrace");
    assert!(
        three.contains("60 steps from the allocation pattern"),
        "{three}"
    );
    assert!(
        three.contains("it begins where a caching allocator took memory, which it does as it runs short, so a step may span several of the program's"),
        "{three}"
    );
    let late = steps_line("leak_late-traced.vtrace");
    assert!(
        late.contains("160 steps from the allocation pattern"),
        "{late}"
    );
    assert!(!late.contains("may span several"), "{late}");
}

// JAX's pool rose once and stayed until the teardown freed it: the note says so, where it said
// "and stayed (0 B live at the end)".
#[test]
fn a_rise_freed_by_the_teardown_is_said_so() {
    let text = fixture_text("healthy_jax-recorder.vtrace");
    assert!(
        text.contains(" and stayed until the teardown freed it\n"),
        "{text}"
    );
    assert!(!text.contains("0 B live at the end"), "{text}");
}

// One native call site of gpt_leaky (the caching allocator's cudaMalloc, stack 30) allocated at
// lines 63 and 53 and at step 0: 1.9 GiB, where the table by place gives line 63 1.4 GiB. The
// native table says its label is the first object's of several lines.
#[test]
fn a_native_site_of_several_lines_says_so() {
    let r = fixture_json("gpt_leaky-traced.vtrace");
    let first = &r["call_sites"][0];
    assert_eq!(
        (&first["bytes"], &first["lines_vary"]),
        (&2_013_265_920u64.into(), &true.into())
    );
    assert_eq!(r["call_sites"][2]["lines_vary"], false);
    let text = fixture_text("gpt_leaky-traced.vtrace");
    assert!(
        text.contains("gpt_leaky.py:63 in <module> and other lines"),
        "{text}"
    );
}

// gpt_leaky's steps are guessed (one per 8 of the program's): its time to full counts guessed
// steps, as its rate does, in the headline, the evidence and the device's line.
#[test]
fn a_time_to_full_counts_guessed_steps() {
    let text = fixture_text("gpt_leaky-traced.vtrace");
    for said in [
        "+128.0 MiB per guessed step at gpt_leaky.py:63 in <module> (libc10_cuda.so); 125.7 GiB \
         left, full in 1,005 guessed steps (2 min)\n",
        "; device full in 1,005 guessed steps (2 min); the line is where",
        "; 125.7 GiB left, full in 1,005 guessed steps (2 min); live 2.2 GiB -> 3.4 GiB",
    ] {
        assert!(text.contains(said), "{said}\n{text}");
    }
    assert!(!text.contains("1,005 steps"), "{text}");
}

// leak_comm's communicators are freed by destroy_process_group: its finding's NCCL site is in
// no table of what is live at the end, and the stacks listed only those (ten cuBLAS and c10
// workspaces). The stacks open with each finding's, titled by the finding.
#[test]
fn the_stacks_open_with_the_findings() {
    let text = fixture_text("leak_comm-marks.vtrace");
    let stacks = &text[text.find("\nStacks, innermost frame first").unwrap()..];
    let first = stacks.lines().nth(2).unwrap();
    assert_eq!(
        first,
        "  finding 1: leak_comm.py:49 in <module> (libnccl.so.2)"
    );
    let own = stacks
        .lines()
        .skip(3)
        .take(12)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(own.contains("/leak_comm.py:49 in <module>"), "{own}");
    assert!(own.contains("libnccl.so.2+"), "{own}");
    assert!(
        stacks.contains("\n  #1 "),
        "the table's stacks follow: {stacks}"
    );
}

// healthy_peak's one pass of 1 GiB at line 30 is its peak finding; the memory held until exit
// is that of the places no other finding names (it named line 30 twice, and counted its bytes
// in both).
#[test]
fn one_place_is_named_by_one_finding() {
    let r = fixture_json("healthy_peak-marks.vtrace");
    let named: Vec<(&str, &str)> = (r["analysis"]["diagnosis"].as_array().unwrap().iter())
        .map(|f| {
            (
                f["class"].as_str().unwrap(),
                f["site"]["label"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        named,
        [
            ("peak", "healthy_peak.py:30 in <module>"),
            ("teardown-only", "healthy_peak.py:25 in <module>")
        ]
    );
}

// A device size given below what leak_slow's device held (360 MiB) makes the growth full at
// once: the headline says the size is too small, not "full in under a step (0 s)" alone.
#[test]
fn a_device_memory_below_what_the_device_held_is_said() {
    let out = vramtrace()
        .args(["report", "--device-memory", "1KiB"])
        .arg(gpu_fixture("leak_slow-marks.vtrace"))
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let growth = text.lines().find(|l| l.starts_with("  growth ")).unwrap();
    assert!(
        growth.ends_with(
            "; 0 B left, full in under a step (--device-memory 1.0 KiB is less than the device \
             held: give its size)"
        ),
        "{growth}"
    );
}

// A one-off peak: the device's rise is said as given back, and the place's height as the
// highest sample, which the event-by-event peak tables can exceed.
#[test]
fn a_one_off_peak_is_said_as_given_back_at_its_highest_sample() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_one_off_peak(dir.path(), "peak.vtrace");
    let out = vramtrace().arg("report").arg(&trace).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = |head: &str| {
        text.lines()
            .find(|l| l.starts_with(head))
            .unwrap_or_default()
    };
    assert_eq!(
        line("  phases"),
        "  phases         device 0: steady from step 0, a one-off rise at step 5 (+32.0 MiB, \
         given back later)"
    );
    assert_eq!(
        line("     evidence"),
        "     evidence  rose to 32.0 MiB and fell back (its highest at a step boundary; within \
         a step it can hold more)"
    );
}
