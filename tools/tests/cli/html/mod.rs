//! `vramtrace report --html` on the training-loop trace: the page is self-contained, its tables
//! carry the planted numbers, and in a real headless Chromium it loads without a console message
//! and draws its chart.
//!
//! The browser test needs Debian's `chromium` (`.ci/run` installs it). Where it is absent the
//! test fails, unless `VRAMTRACE_SKIP_BROWSER=1` says skipping is fine here: then it prints why
//! and passes.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

fn page(dir: &Path) -> (PathBuf, String) {
    let trace = write_training(dir, "train.vtrace");
    let html = dir.join("report.html");
    let out = vramtrace()
        .args(["report", "--html"])
        .arg(&html)
        .arg(&trace)
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
    assert!(
        html.contains("STEADY GROWTH") || html.contains("steady growth"),
        "findings"
    );
    assert!(
        html.contains(r#"title="14680064 bytes""#),
        "live at the end"
    );
    assert!(html.contains(r#"title="23068672 bytes""#), "the peak");
    assert!(html.contains(r#"title="12582912 bytes""#), "the leak site");
    assert!(html.contains("train.py:42 in step"), "the leak's line");
    // The out-of-memory post-mortem.
    assert!(html.contains("cudaMalloc asked for"), "oom section");
    assert!(
        html.contains(r#"title="68719476736 bytes""#),
        "the failed request"
    );
    // Rows link to stacks the page holds.
    let data_start = html.find(r#"id="vramtrace-data">"#).unwrap();
    let data_end = html[data_start..].find("</script>").unwrap() + data_start;
    let json = &html[data_start + r#"id="vramtrace-data">"#.len()..data_end];
    let data: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(data["steps_total"], TRAINING_STEPS);
    assert_eq!(data["devices"][0]["peak_bytes"], 22 * MIB);
    assert_eq!(data["devices"][0]["end_bytes"], 14 * MIB);
    assert_eq!(data["failures"][0]["oom"], true);
    assert_eq!(data["marks"][0]["name"], "checkpoint");
    let bands = data["devices"][0]["bands"]["python"].as_array().unwrap();
    let leak = bands
        .iter()
        .find(|b| b["label"] == "/work/app/train.py:42 in step")
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

/// Debian's Chromium, or `None` when it is not installed.
fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH")?
                .to_str()?
                .split(':')
                .map(|d| Path::new(d).join(name))
                .find(|p| p.is_file())
        })
}

#[test]
fn the_page_draws_its_chart_in_headless_chromium() {
    let Some(browser) = chromium() else {
        if std::env::var("VRAMTRACE_SKIP_BROWSER").as_deref() == Ok("1") {
            eprintln!(
                "SKIPPED the_page_draws_its_chart_in_headless_chromium: no chromium on PATH \
                 and VRAMTRACE_SKIP_BROWSER=1"
            );
            return;
        }
        panic!(
            "chromium is not installed: install it (apt-get install chromium) or set \
             VRAMTRACE_SKIP_BROWSER=1 to skip this test"
        );
    };
    let dir = tempfile::tempdir().unwrap();
    let (html, _) = page(dir.path());
    let profile = dir.path().join("profile");
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", html.display()))
        .output()
        .expect("running chromium");
    let dom = String::from_utf8_lossy(&out.stdout);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    // The page logs nothing: any console line is an error or a warning.
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "{console:#?}");
    assert!(!dom.contains("data-errors"), "{dom}");
    assert!(
        dom.contains(r#"data-chart="drawn""#),
        "the script ran to its end"
    );
    // One chart for the one device, with points drawn.
    let chart = dom
        .find(r#"id="chart-device-0""#)
        .expect("the device's chart element");
    let tag_end = dom[chart..].find('>').unwrap() + chart;
    let tag = &dom[chart..tag_end];
    let points: u64 = tag
        .split("data-points=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no data-points in {tag}"));
    assert!(points > 0, "{tag}");
    assert!(dom.matches("<polygon").count() >= 3, "envelope and bands");
    assert_eq!(
        dom.matches(r#"class="step""#).count() as u64,
        TRAINING_STEPS,
        "one tick per step"
    );
    assert_eq!(
        dom.matches(r#"class="range""#).count() as u64,
        TRAINING_STEPS
    );
    assert!(dom.contains(r#"class="failure oom""#), "the OOM is marked");
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
    let start = text.find(r#"id="vramtrace-data">"#).unwrap() + r#"id="vramtrace-data">"#.len();
    let end = text[start..].find("</script>").unwrap() + start;
    let data: serde_json::Value = serde_json::from_str(&text[start..end]).unwrap();
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
