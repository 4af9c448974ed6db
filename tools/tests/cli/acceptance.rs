//! The analyses on real traces of the acceptance programs from the GPU (`tests/fixtures/gpu/`,
//! whose README says where they come from): every planted leak is found at its line with its rate, healthy programs get no
//! growth finding and no alert, and the steps are the program's, with step marks and, where the
//! trace shows them, without.

use std::path::PathBuf;

use serde_json::Value;

use crate::support::{json_of, vramtrace};

const MIB: f64 = 1048576.0;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../tests/fixtures/gpu/{name}.vtrace"))
}

/// `vramtrace report --json` of a fixture: its `analysis`.
fn analysis(name: &str) -> Value {
    json_of(&["report"], &fixture(name))["analysis"].clone()
}

/// `vramtrace report` of a fixture: its text.
fn report_text(name: &str) -> String {
    let out = vramtrace()
        .arg("report")
        .arg(fixture(name))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Where the steps came from and how many.
fn steps(a: &Value) -> (String, u64) {
    let s = &a["steps"];
    (
        s["source"].as_str().unwrap().to_string(),
        s["steps"].as_u64().unwrap(),
    )
}

/// The classes of the diagnosis.
fn classes(a: &Value) -> Vec<String> {
    let list = a["diagnosis"].as_array().unwrap();
    list.iter()
        .map(|f| f["class"].as_str().unwrap().to_string())
        .collect()
}

/// A healthy program: nothing grows, nothing alerts.
fn healthy(name: &str, want_steps: (&str, u64)) {
    let a = analysis(name);
    assert_eq!(
        steps(&a),
        (want_steps.0.to_string(), want_steps.1),
        "{name}"
    );
    let g = &a["growth"];
    assert_eq!(
        g["steady"].as_array().unwrap().len(),
        0,
        "{name}: {:#}",
        g["steady"]
    );
    assert_eq!(g["alert"], false, "{name}");
    assert!(
        !classes(&a).contains(&"steady-growth".to_string()),
        "{name}"
    );
}

/// A leaky program: its headline (the fastest steady growth) is at `line` of the program, owned
/// by `module`, at `rate` bytes per step, and alerts.
fn leak(name: &str, want_steps: (&str, u64), line: &str, module: &str, rate: f64) -> Value {
    let a = analysis(name);
    assert_eq!(
        steps(&a),
        (want_steps.0.to_string(), want_steps.1),
        "{name}"
    );
    let top = &a["growth"]["steady"][0];
    assert_eq!(
        (top["label"].as_str(), top["module_name"].as_str()),
        (Some(line), Some(module)),
        "{name}"
    );
    assert_eq!(top["rate"].as_f64(), Some(rate), "{name}");
    assert_eq!(
        (&top["alert"], &a["growth"]["alert"]),
        (&true.into(), &true.into())
    );
    let first = &a["diagnosis"][0];
    assert_eq!(
        (&first["class"], &first["severity"]),
        (&"steady-growth".into(), &"alert".into())
    );
    assert_eq!(first["site"]["label"].as_str(), Some(line), "{name}");
    a
}

#[test]
fn healthy_programs_have_no_growth_finding() {
    healthy("healthy_gpt-marks", ("marks", 120));
    healthy("healthy_hf_llama-marks", ("marks", 100));
    healthy("healthy_peak-marks", ("marks", 120));
    // Without marks, a default or expandable allocator makes no calls once warm: no steps, and
    // over time windows nothing grows either.
    healthy("healthy_gpt-traced", ("none", 0));
    healthy("healthy_hf_llama-traced", ("none", 0));
    healthy("healthy_peak-traced", ("none", 0));
}

// The 1 GiB pass at step 60 makes the caching allocator take 512 MiB more and keep it: a peak
// note at the pass's line, not growth, with or without step marks.
#[test]
fn a_one_off_pass_is_a_peak_note() {
    for (name, at) in [("healthy_peak-marks", 61), ("healthy_peak-traced", 85)] {
        let a = analysis(name);
        let peak = &a["diagnosis"][0];
        let what = (&peak["class"], &peak["severity"]);
        assert_eq!(what, (&"peak".into(), &"note".into()), "{name}");
        assert_eq!(peak["site"]["label"], "healthy_peak.py:30 in <module>");
        let e = &peak["evidence"];
        let rise = (e["bytes"].as_f64(), e["growth_from"].as_u64());
        assert_eq!(rise, (Some(512.0 * MIB), Some(at)), "{name}");
    }
}

#[test]
fn tensors_kept_across_steps_are_found_at_their_line() {
    let logits = "leak_logits_ddp.py:38 in <module>";
    leak(
        "leak_logits_ddp-marks",
        ("marks", 100),
        logits,
        "libc10_cuda.so",
        64.0 * MIB,
    );
    leak(
        "leak_logits_ddp-traced",
        ("pattern", 100),
        logits,
        "libc10_cuda.so",
        64.0 * MIB,
    );
    // From step 80 on: the rate is the late growth's, not averaged over the flat half.
    let late = "leak_late.py:36 in <module>";
    for (name, source) in [
        ("leak_late-marks", "marks"),
        ("leak_late-traced", "pattern"),
    ] {
        let a = leak(name, (source, 160), late, "libc10_cuda.so", 2.0 * MIB);
        assert_eq!(
            a["growth"]["steady"][0]["phases"]["growth_from"], 80,
            "{name}"
        );
    }
    // Half a MiB a step, seen as a new 2 MiB segment every fourth step: the driver charges it
    // to the line that made the allocator grow (the optimizer step, one above the leak).
    let slow = "leak_slow.py:32 in <module>";
    leak(
        "leak_slow-marks",
        ("marks", 200),
        slow,
        "libc10_cuda.so",
        0.5 * MIB,
    );
    // Without marks the segments are the only pattern: a "step" is four of the program's.
    let a = leak(
        "leak_slow-traced",
        ("pattern", 50),
        slow,
        "libc10_cuda.so",
        2.0 * MIB,
    );
    assert_eq!(a["steps"]["pattern"]["kinds"], 1);
}

#[test]
fn an_extension_s_raw_allocations_are_found_with_their_advice() {
    let line = "leak_extension.py:39 in <module>";
    for (name, source) in [
        ("leak_extension-marks", "marks"),
        ("leak_extension-traced", "pattern"),
    ] {
        let a = leak(name, (source, 120), line, "libleaky.so", 3.0 * MIB);
        let first = &a["diagnosis"][0];
        assert_eq!(
            first["cause"],
            "raw device allocations in libleaky.so never freed"
        );
    }
}

// A communicator every 5 steps, all torn down at exit: the staircase is growth though nothing
// is live at the end, and the teardown is named as what hid it.
#[test]
fn communicators_torn_down_at_exit_are_still_growth() {
    let line = "leak_comm.py:49 in <module>";
    let a = leak(
        "leak_comm-marks",
        ("marks", 100),
        line,
        "libnccl.so.2",
        81369497.6,
    );
    let top = &a["growth"]["steady"][0];
    assert_eq!(top["now_bytes"], 0);
    let e = &a["diagnosis"][0]["evidence"];
    assert_eq!(e["freed_at_teardown"], top["last_bytes"]);
    assert!(a["diagnosis"][0]["fix"]
        .as_str()
        .unwrap()
        .contains("destroy_process_group"));
    // Without marks nothing else recurs: growth over time windows, up to the teardown.
    let a = analysis("leak_comm-traced");
    assert_eq!(steps(&a), ("none".to_string(), 0));
    let g = &a["growth"];
    let top = &g["steady"][0];
    assert_eq!(
        (top["label"].as_str(), g["alert"].as_bool()),
        (Some(line), Some(true))
    );
    assert_eq!(g["holders"][0]["phases"]["teardown_from"], 57);
}

/// A steady-growth finding: its label, rate, view, and related rows as `(role, label)`.
type Cause = (String, f64, String, Vec<(String, String)>);

/// The steady-growth findings of an analysis.
fn causes(a: &Value) -> Vec<Cause> {
    a["diagnosis"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["class"] == "steady-growth")
        .map(|f| {
            let related = f["related"].as_array().map_or(Vec::new(), |r| {
                r.iter()
                    .map(|x| {
                        let role = x["role"].as_str().unwrap().to_string();
                        (role, x["site"]["label"].as_str().unwrap().to_string())
                    })
                    .collect()
            });
            (
                f["site"]["label"].as_str().unwrap().to_string(),
                f["evidence"]["rate"].as_f64().unwrap(),
                f["evidence"]["view"].as_str().unwrap().to_string(),
                related,
            )
        })
        .collect()
}

// Three leaks in one loop, seen by PyTorch's tensors and by the caching allocator's segments:
// three findings, each at the line that keeps its tensors with its own rate, and the segments
// as their evidence: the one requested at line 34 (the input's line) belongs to the 4 MiB
// activations of line 38, the nearest rate; nothing else is a finding.
#[test]
fn one_finding_per_cause_when_several_views_see_it() {
    let a = analysis("leak_three-recorder");
    let at = |line: u32| format!("leak_three.py:{line} in <module>");
    let seg = |line: u32| ("segments".to_string(), at(line));
    let view = "allocator".to_string();
    assert_eq!(
        causes(&a),
        [
            (at(39), 8.0 * MIB, view.clone(), vec![seg(39)]),
            (at(38), 4.0 * MIB, view.clone(), vec![seg(34)]),
            (at(40), 1.0 * MIB, view.clone(), vec![seg(40)]),
        ]
    );
    // Every steady row is part of a finding: the three causes and their segments.
    let rows = a["growth"]["steady"].as_array().unwrap();
    assert_eq!(rows.len(), 6);
    assert!(
        rows.iter().all(|r| r["finding"]["number"].is_u64()),
        "{rows:#?}"
    );
    // An evaluation without no_grad keeps its graph: one finding at the evaluation's line, the
    // segments the allocator took for it (charged to the optimizer step above) its evidence.
    let a = analysis("leak_eval_grad-recorder");
    let eval = "leak_eval_grad.py:42 in <module>".to_string();
    let segments = vec![(
        "segments".to_string(),
        "leak_eval_grad.py:41 in <module>".to_string(),
    )];
    let found = causes(&a);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        (&found[0].0, &found[0].2, &found[0].3),
        (&eval, &view, &segments)
    );
    // 33,575,936 bytes a step, as the program measured with torch.cuda.memory_allocated().
    assert!(
        (found[0].1 - 33_575_936.0).abs() < 0.01 * 33_575_936.0,
        "{}",
        found[0].1
    );
    // The report's text says it once, with its evidence.
    let text = report_text("leak_eval_grad-recorder");
    let diagnosis = &text[text.find("\nDIAGNOSIS").expect("a diagnosis")..];
    assert_eq!(
        diagnosis.matches("ALERT: steady growth").count(),
        1,
        "{text}"
    );
    // The verdict at the head names that finding, and only it.
    assert!(
        text.lines().nth(1).unwrap().starts_with(
            "  verdict   ALERT: steady growth at leak_eval_grad.py:42 in <module> (PyTorch \
             tensors) on device 0, +32.0 MiB per step; 1 more finding"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "     also      PyTorch's caching allocator reserved +32.0 MiB per step for them: \
             segments asked for at leak_eval_grad.py:41 in <module> (libc10_cuda.so)\n"
        ),
        "{text}"
    );
}

// torch.compile's warm-up takes six 2 MiB segments in a burst while it compiles, the only
// repeating allocation of the trace without marks: their "steps" end seconds before the run
// does, and the quiet after them says the growth stopped. JAX's pool, preallocated at start,
// is a note with JAX's own advice.
#[test]
fn a_warm_up_burst_and_jax_s_pool_are_not_leaks() {
    healthy("healthy_compile-bare", ("pattern", 6));
    let a = analysis("healthy_jax-recorder");
    assert!(!classes(&a).contains(&"steady-growth".to_string()));
    let peak = &a["diagnosis"][0];
    assert_eq!(
        (&peak["class"], &peak["site"]["owner"]),
        (&"peak".into(), &"jax".into())
    );
    let fix = peak["fix"].as_str().unwrap();
    assert!(fix.contains("XLA_PYTHON_CLIENT_PREALLOCATE=false"), "{fix}");
    assert!(!fix.contains("empty_cache"), "{fix}");
}

// gpt_leaky keeps 16 MiB of logits from its first step to its 120th; PyTorch's recorder kept
// only its latest 100,000 actions, whole from step 69 on. The finding's growth runs from there,
// and says that it may have begun earlier, rather than that the leak started at step 69.
#[test]
fn a_growth_from_where_the_recorder_s_history_begins_says_so() {
    let a = analysis("gpt_leaky-recorder");
    let first = &a["diagnosis"][0];
    assert_eq!(first["site"]["label"], "gpt_leaky.py:57 in <module>");
    let e = &first["evidence"];
    assert_eq!(
        (&e["growth_from"], &e["history_from"]),
        (&69.into(), &69.into())
    );
    assert_eq!(e["rate"], 16.0 * MIB);
    let text = report_text("gpt_leaky-recorder");
    assert!(
        text.contains(
            "+16.0 MiB per step after step 69, where the recorder's history begins whole (it \
             keeps only its latest actions: the growth may have begun earlier)"
        ),
        "{text}"
    );
    // A recorder that held the whole run says nothing of it.
    let a = analysis("leak_three-recorder");
    assert_eq!(a["diagnosis"][0]["evidence"]["history_from"], Value::Null);
}

// A live alert the whole run does not bear out says so beside it: healthy_gpt's warm-up alerted
// on its first steps and the run shows no steady growth; ranks_gloo's rank 2 alerted at the line
// that asked the caching allocator for segments, and the diagnosis names the line that keeps
// the tensors. One that agrees says nothing more.
#[test]
fn a_live_alert_is_read_against_the_whole_run() {
    let alerted = |name: &str| -> String {
        let text = report_text(name);
        let line = text.lines().find(|l| l.trim_start().starts_with("alerted"));
        line.unwrap_or_else(|| panic!("{text}")).to_string()
    };
    let healthy = alerted("healthy_gpt-recorder");
    assert!(
        healthy.ends_with("; not confirmed: the whole run shows no steady growth there"),
        "{healthy}"
    );
    let rank2 = alerted("ranks_gloo/traced-rank2-2011");
    assert!(
        rank2.contains(" at ranks_gloo.py:42 in <module> (libc10_cuda.so) "),
        "{rank2}"
    );
    assert!(
        rank2.ends_with(
            "; the whole run's diagnosis names ranks_gloo.py:48 in <module> (PyTorch tensors) for \
             it"
        ),
        "{rank2}"
    );
}
