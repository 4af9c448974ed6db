//! The page in a real headless Chromium: it loads without a console message and its script
//! draws the chart on the axis the trace calls for, with the tracer's alert, the phases, the
//! failures, the steps and the NVTX ranges on it.
//!
//! These tests need Debian's `chromium` (`.ci/run` installs it). Where it is absent they fail,
//! unless `VRAMTRACE_SKIP_BROWSER=1` says skipping is fine here: then they print why and pass.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::page;
use crate::support::*;

/// Debian's Chromium; `None` when it is absent and `VRAMTRACE_SKIP_BROWSER=1` allows `test` to
/// skip (it says so); a panic when it is absent otherwise.
pub fn chromium(test: &str) -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH")?
                .to_str()?
                .split(':')
                .map(|d| Path::new(d).join(name))
                .find(|p| p.is_file())
        });
    if found.is_none() {
        if std::env::var("VRAMTRACE_SKIP_BROWSER").as_deref() == Ok("1") {
            eprintln!("SKIPPED {test}: no chromium on PATH and VRAMTRACE_SKIP_BROWSER=1");
            return None;
        }
        panic!(
            "chromium is not installed: install it (apt-get install chromium) or set \
             VRAMTRACE_SKIP_BROWSER=1 to skip this test"
        );
    }
    found
}

/// Runs headless `browser` on `url` with `action` (`--dump-dom`, `--screenshot=…`), a fresh
/// profile in `dir` and no network of its own; returns its stdout and its log.
pub fn headless(browser: &Path, dir: &Path, action: &[String], url: &str) -> (String, String) {
    let profile = tempfile::tempdir_in(dir).unwrap();
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
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(action)
        .arg(url)
        .output()
        .expect("running chromium");
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{log}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), log)
}

/// The page's DOM after its scripts ran, checked for what every drawn page has: no console
/// message, no script error, the script ran to its end.
pub fn drawn_dom(browser: &Path, dir: &Path, url: &str) -> String {
    let (dom, log) = headless(browser, dir, &["--dump-dom".to_string()], url);
    // The page logs nothing: any console line is an error or a warning.
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "{console:#?}");
    assert!(!dom.contains("data-errors"), "{dom}");
    assert!(
        dom.contains(r#"data-chart="drawn""#),
        "the script ran to its end"
    );
    dom
}

/// The opening tag of the element with `id`.
pub fn tag<'a>(dom: &'a str, id: &str) -> &'a str {
    let at = dom
        .find(&format!(r#"id="{id}""#))
        .unwrap_or_else(|| panic!("no element {id}"));
    let start = dom[..at].rfind('<').unwrap();
    let end = dom[at..].find('>').unwrap() + at;
    &dom[start..=end]
}

/// The texts of the `<text>` elements of `class` in `svg`, in order.
pub fn texts<'a>(svg: &'a str, class: &str) -> Vec<&'a str> {
    svg.split(&format!(r#"class="{class}""#))
        .skip(1)
        .map(|rest| {
            let start = rest.find('>').unwrap() + 1;
            let end = rest[start..].find('<').unwrap() + start;
            &rest[start..end]
        })
        .collect()
}

#[test]
fn the_page_draws_its_chart_in_headless_chromium() {
    let Some(browser) = chromium("the_page_draws_its_chart_in_headless_chromium") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (html, _) = page(dir.path());
    let url = format!("file://{}", html.display());
    let dom = drawn_dom(&browser, dir.path(), &url);
    // One chart for the one device, with points drawn, on the steps axis.
    let svg = tag(&dom, "chart-device-0");
    assert!(svg.contains(r#"data-axis="steps""#), "{svg}");
    let points: u64 = svg
        .split("data-points=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no data-points in {svg}"));
    assert!(points > 0, "{svg}");
    assert!(dom.matches("<polygon").count() >= 3, "envelope and bands");
    // The x axis counts steps: 0 (the start-up) to 12, every second one labelled.
    assert_eq!(texts(&dom, "axis-name"), ["step"]);
    assert_eq!(
        texts(&dom, "axis x-tick"),
        ["0", "2", "4", "6", "8", "10", "12"]
    );
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
    // The tracer's alert, with the signal it sent.
    assert_eq!(dom.matches(r#"class="alert-marker""#).count(), 1);
    assert_eq!(
        texts(&dom, "alert-label"),
        ["ALERT at step 10, SIGUSR1 sent"]
    );
    assert_eq!(dom.matches(r#"class="alert-line""#).count(), 1);
    // The phases lane, and the diagnosis above the chart.
    assert!(
        dom.contains(r#"class="phase-span phase-span-steady""#),
        "phases"
    );
    assert!(dom.contains(r#"<section id="diagnosis">"#));
    assert!(dom.find(r#"id="diagnosis""#) < dom.find(r#"id="timeline""#));
    assert!(dom.contains(r#"<button type="button" data-axis="steps" class="on">steps</button>"#));

    // Wall time is one click away; the page's address can ask for it too.
    let dom = drawn_dom(&browser, dir.path(), &format!("{url}#axis=time&by=module"));
    let svg = tag(&dom, "chart-device-0");
    assert!(svg.contains(r#"data-axis="time""#), "{svg}");
    assert_eq!(texts(&dom, "axis-name"), ["time"]);
    let ticks = texts(&dom, "axis x-tick");
    assert_eq!(ticks.first(), Some(&"0"));
    assert!(ticks[1..].iter().all(|t| t.ends_with(" ms")), "{ticks:?}");
    assert!(dom.contains(r#"<span id="axis-name">time</span>"#));
    assert!(dom.contains(r#"data-by="module" class="on""#));
    assert_eq!(
        texts(&dom, "alert-label"),
        ["ALERT at step 10, SIGUSR1 sent"]
    );
}

// A native program without steps (12 events 1 µs apart): drawn on the time axis in µs, by
// native function, with no steps lane and nothing the tracer raised.
#[test]
fn a_trace_without_steps_is_drawn_on_the_time_axis() {
    let Some(browser) = chromium("a_trace_without_steps_is_drawn_on_the_time_axis") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (trace, _) = write_workload(dir.path(), "native.vtrace");
    let (html, _) = super::page_of(dir.path(), &trace);
    let dom = drawn_dom(&browser, dir.path(), &format!("file://{}", html.display()));
    let svg = tag(&dom, "chart-device-0");
    assert!(svg.contains(r#"data-axis="time""#), "{svg}");
    assert_eq!(texts(&dom, "axis-name"), ["time"]);
    assert_eq!(
        texts(&dom, "axis x-tick"),
        ["0", "2 µs", "4 µs", "6 µs", "8 µs", "10 µs"]
    );
    assert_eq!(texts(&dom, "lane-label"), Vec::<&str>::new());
    assert!(!dom.contains(r#"class="alert-marker""#));
    assert!(dom.contains(r#"data-by="function" class="on""#));
    // The failures of the workload: an out-of-memory failure and a failed call.
    assert_eq!(dom.matches(r#"class="failure-line""#).count(), 2);
}
