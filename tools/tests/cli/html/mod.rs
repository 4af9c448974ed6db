//! `vramtrace report --html` on traces of known contents: the page is self-contained, its tables
//! carry the planted numbers, it says the diagnosis and the findings in the text report's own
//! words, and it opens on the axis and grouping that fit the trace (steps and Python lines for a
//! Python training run, time and native functions for a native program without steps).
//! `browser` opens it in a real headless Chromium; `screenshot` makes the README's picture from
//! the demo's page.

mod browser;
pub mod screenshot;

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::*;

/// `vramtrace report --html` of `trace` into `dir/report.html`: its path and text.
pub fn page_of(dir: &Path, trace: &Path) -> (PathBuf, String) {
    let html = dir.join("report.html");
    let out = vramtrace()
        .args(["report", "--html"])
        .arg(&html)
        .arg(trace)
        .assert()
        .success()
        .get_output()
        .clone();
    assert!(out.stdout.is_empty(), "the page goes to its file only");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with(&format!("wrote {}", html.display())),
        "{err}"
    );
    let text = std::fs::read_to_string(&html).unwrap();
    (html, text)
}

/// The page of the training-loop trace.
pub fn page(dir: &Path) -> (PathBuf, String) {
    let trace = write_training(dir, "train.vtrace");
    page_of(dir, &trace)
}

/// The chart's data the page embeds.
pub fn chart_data(html: &str) -> Value {
    let tag = r#"id="vramtrace-data">"#;
    let start = html.find(tag).unwrap() + tag.len();
    let end = html[start..].find("</script>").unwrap() + start;
    serde_json::from_str(&html[start..end]).unwrap()
}

/// `text` as the page's template writes it (minijinja's HTML escaping).
fn escaped(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#x27;")
        .replace('/', "&#x2f;")
}

/// The lines of the text report's block that starts with `heading`, up to the blank line.
fn block<'a>(text: &'a str, heading: &str) -> Vec<&'a str> {
    let start = text
        .find(&format!("\n{heading}"))
        .unwrap_or_else(|| panic!("no {heading} in {text}"));
    text[start + 1..]
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect()
}

#[test]
fn the_page_is_self_contained_and_has_the_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let (_, html) = page(dir.path());
    // Nothing is loaded from elsewhere: no external scripts, styles, images or frames.
    for needle in [
        "<script src",
        "<link",
        "<img",
        "<iframe",
        "@import",
        "url(http",
    ] {
        assert!(!html.contains(needle), "{needle}");
    }
    assert!(!html.contains("https://"), "no address outside the page");
    // The findings, and exact bytes in the tables.
    assert!(html.contains("<h2>Diagnosis"), "diagnosis");
    assert!(html.contains("STEADY GROWTH on device 0"), "findings");
    assert!(
        html.contains(r#"title="14680064 bytes""#),
        "live at the end"
    );
    assert!(html.contains(r#"title="23068672 bytes""#), "the peak");
    assert!(html.contains(r#"title="12582912 bytes""#), "the leak site");
    assert!(html.contains("train.py:42 in step"), "the leak's line");
    // Every place is named by the one rule: no table row says `stack N` (the grouping by site
    // named its rows by their stack ids).
    assert!(!html.contains(">stack "), "a place named by its stack id");
    // The out-of-memory post-mortem.
    assert!(html.contains("cudaMalloc asked for"), "oom section");
    assert!(
        html.contains(r#"title="68719476736 bytes""#),
        "the failed request"
    );
    // Rows link to stacks the page holds.
    let data = chart_data(&html);
    assert_eq!(data["steps_total"], TRAINING_STEPS);
    assert_eq!(data["devices"][0]["peak_bytes"], 22 * MIB);
    assert_eq!(data["devices"][0]["end_bytes"], 14 * MIB);
    assert_eq!(data["failures"][0]["oom"], true);
    assert_eq!(data["marks"][0]["name"], "checkpoint");
    let bands = data["devices"][0]["bands"]["python"].as_array().unwrap();
    let leak = bands
        .iter()
        .find(|b| b["label"] == "train.py:42 in step")
        .unwrap();
    assert_eq!(leak["values"].as_array().unwrap().last().unwrap(), 12 * MIB);
    let key = leak["stack"].as_str().unwrap();
    let stack: Vec<&str> = data["stacks"][key]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert_eq!(stack[0], "/work/app/train.py:42 in step");
    assert!(
        html.contains(&format!(r#"data-stack="{key}""#)),
        "a row links the stack"
    );
}

#[test]
fn a_long_trace_is_downsampled_without_losing_its_peak() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_pairs(dir.path(), "pairs.vtrace", 5000);
    let html = dir.path().join("pairs.html");
    vramtrace()
        .args(["report", "--html"])
        .arg(&html)
        .arg(&trace)
        .assert()
        .success();
    let text = std::fs::read_to_string(&html).unwrap();
    let data = chart_data(&text);
    // 10,000 events in at most 800 stretches, at least half of them kept.
    let x = data["x"].as_array().unwrap();
    assert!((400..=800).contains(&x.len()), "{}", x.len());
    let device = &data["devices"][0];
    let max = device["max"].as_array().unwrap();
    let highest = max.iter().map(|v| v.as_u64().unwrap()).max();
    assert_eq!(highest, Some(5 * MIB), "the one-event peak survives");
    assert!(device["min"].as_array().unwrap().iter().all(|v| v == 0));
    // The table keeps the exact number.
    assert!(text.contains(r#"title="5242880 bytes""#));
}

// The page's DIAGNOSIS and FINDINGS are the text report's, piece by piece: each finding's
// headline, evidence, other views, cause and fix, and each FINDINGS line under its topic.
#[test]
fn the_page_says_the_diagnosis_and_the_findings_in_the_text_reports_words() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_training(dir.path(), "train.vtrace");
    let (_, html) = page_of(dir.path(), &trace);
    let text = crate::report::report_text(&trace, &[]);

    let findings = block(&text, "FINDINGS");
    assert!(findings.len() >= 10, "{findings:#?}");
    for line in &findings {
        let (topic, words) = line.trim_start().split_at(15);
        let want = format!("<dt>{}</dt><dd>{}</dd>", topic.trim_end(), escaped(words));
        assert!(html.contains(&want), "{want}");
    }
    let alerted = findings
        .iter()
        .find(|l| l.trim_start().starts_with("alerted"))
        .unwrap();
    assert!(
        alerted.ends_with(
            "at step 10: device 0 grew steadily, +1.0 MiB per step at \
             train.py:42 in step (libtorch_cuda.so) (above the threshold of 512.0 KiB per step); full in \
             1,013 steps (6 s) at the run's step time; signal SIGUSR1 \
             sent"
        ),
        "{alerted}"
    );

    let diagnosis = block(&text, "DIAGNOSIS");
    let heading = text.lines().find(|l| l.starts_with("DIAGNOSIS (")).unwrap();
    let count = heading
        .trim_start_matches("DIAGNOSIS (")
        .trim_end_matches(')');
    assert!(
        html.contains(&format!(
            r#"<span class="count">({})</span>"#,
            escaped(count)
        )),
        "{count}"
    );
    let mut headlines = 0;
    for line in &diagnosis {
        let line = line.trim_start();
        if let Some((number, rest)) = line.split_once(". ") {
            if number.parse::<usize>().is_ok() {
                // `1. ALERT: steady growth at PLACE on device 0`
                let (severity, headline) = rest.split_once(": ").unwrap();
                let (class, place) = match headline.find(" at ").or(headline.find(" on ")) {
                    Some(i) => (&headline[..i], &headline[i + 1..]),
                    None => (headline, ""),
                };
                let want = format!(
                    r#"<span class="severity">{severity}</span> {number}. {class}{}"#,
                    if place.is_empty() {
                        String::new()
                    } else {
                        format!(r#" <span class="place">{}</span>"#, escaped(place))
                    }
                );
                assert!(html.contains(&want), "{want}");
                headlines += 1;
                continue;
            }
        }
        let (term, words) = line.split_at(10);
        let want = format!("<dt>{}</dt><dd>{}</dd>", term.trim_end(), escaped(words));
        assert!(html.contains(&want), "{want}");
    }
    assert!(headlines >= 1, "{diagnosis:#?}");
    assert_eq!(
        html.matches(r#"<article class="finding "#).count(),
        headlines
    );
}

// A native program without steps (the known workload: no step marks, no Python frames) opens
// on the time axis, stacked by native function, with no steps button to press.
#[test]
fn a_native_program_without_steps_opens_on_time_by_native_function() {
    let dir = tempfile::tempdir().unwrap();
    let (trace, _) = write_workload(dir.path(), "native.vtrace");
    let (_, html) = page_of(dir.path(), &trace);
    let data = chart_data(&html);
    assert_eq!(data["axis"], "time");
    assert_eq!(data["by"], "function");
    assert_eq!(data["steps_total"], 0);
    assert!(
        !html.contains("data-axis="),
        "no axis buttons without steps"
    );
    assert!(html.contains(
        r#"<button type="button" data-by="function" class="on">native function</button>"#
    ));
    assert!(html.contains("Live device memory over <span id=\"axis-name\">time</span>"));
    assert!(html.contains("No steps: the x axis is time."));
}

// The GPU run of a Python training program with step marks (a 4 s start-up, then 120 steps in
// 2.6 s): the page opens on steps, stacked by Python line, and draws the phases the analysis
// found: the warm-up up to the start of step 5, then the steady state to the end.
#[test]
fn a_python_training_run_opens_on_steps_by_python_line_with_its_phases() {
    let dir = tempfile::tempdir().unwrap();
    let trace = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/gpu/healthy_gpt-marks.vtrace");
    let (_, html) = page_of(dir.path(), &trace);
    let data = chart_data(&html);
    assert_eq!(data["axis"], "steps");
    assert_eq!(data["by"], "python");
    assert_eq!(data["steps_total"], 120);
    assert_eq!(data["steps_every"], 1);
    let steps: Vec<u64> = data["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect();
    assert_eq!(steps.len(), 120);
    // The start-up before the first step is most of the run's time.
    let end = data["duration_us"].as_u64().unwrap();
    assert!(steps[0] * 2 > end, "{} of {end}", steps[0]);
    let phases = data["phases"].as_array().unwrap();
    let spans: Vec<(&str, &str, u64, u64)> = phases
        .iter()
        .map(|p| {
            (
                p["kind"].as_str().unwrap(),
                p["label"].as_str().unwrap(),
                p["start_us"].as_u64().unwrap(),
                p["end_us"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        spans,
        [
            ("warm-up", "warm-up", 0, steps[4]),
            ("steady", "steady from step 5", steps[4], end)
        ]
    );
    assert!(phases.iter().all(|p| p["device"] == 0));
    assert!(html.contains(r#"<dt>phases</dt><dd>device 0: steady from step 5</dd>"#));
}

// Counts of one are in the singular: the demo's page has one other object and one place growing
// steadily.
#[test]
fn counts_of_one_are_singular() {
    let dir = tempfile::tempdir().unwrap();
    let trace = screenshot::demo_trace(dir.path());
    let (_, html) = page_of(dir.path(), &trace);
    assert!(html.contains(" 1 other object,"), "one other object");
    assert!(
        html.contains("call site; 1 place, rate"),
        "one steady place"
    );
    for plural in [" 1 other objects", "(1 sites", " 1 places", " 1 objects"] {
        assert!(!html.contains(plural), "{plural}");
    }
}

// leak_slow's H100 run grows +512 KiB a step, under the threshold of 81.1 MiB a step, and alerts
// because the device fills within the horizon: the growth table says why beside ALERT, as the
// text report does (it showed "alert above +81.1 MiB" and ALERT, unexplained).
#[test]
fn an_alert_under_the_threshold_says_the_horizon() {
    let dir = tempfile::tempdir().unwrap();
    let trace = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/gpu/h100/leak_slow-run.vtrace");
    let (_, html) = page_of(dir.path(), &trace);
    let growth = html.split("<section id=\"growth\">").nth(1).unwrap();
    let row = growth
        .lines()
        .find(|l| l.starts_with("<tr class=\"alert\">"))
        .unwrap();
    assert!(
        row.ends_with("<td>ALERT: under the threshold, but full within the horizon</td></tr>"),
        "{row}"
    );
}

// Rank 2 of the gloo job: the tracer's live alert named the line whose allocator segments grew
// (42), the whole run's diagnosis the line that keeps the tensors (48). The chart's alert flag
// says both, as the text report's FINDINGS line does: a teammate reading the picture alone
// reads the line that keeps the memory.
#[test]
fn the_chart_s_alert_says_what_the_diagnosis_says_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let trace = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/gpu/ranks_gloo/traced-rank2-2011.vtrace");
    let (_, html) = page_of(dir.path(), &trace);
    let data = chart_data(&html);
    let flag = data["alerts"][0]["text"].as_str().unwrap().to_string();
    let out = vramtrace().arg("report").arg(&trace).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let alerted = (text.lines())
        .find(|l| l.starts_with("  alerted "))
        .unwrap()
        .trim_start_matches("  alerted")
        .trim_start();
    assert_eq!(flag, alerted);
    assert!(
        flag.contains("the whole run's diagnosis names ranks_gloo.py:48 in <module>"),
        "{flag}"
    );
}
