//! The README's picture of the page, `docs/report-html.png`, made from the current page of the
//! bundled demo's trace so that it cannot show a page that no longer exists.
//!
//! The test runs `vramtrace-demo` (the stand-in training loop under `vramtrace run`, built by
//! `cargo build --workspace` beside this test), writes the page of its trace, checks in headless
//! Chromium what the README says the page shows (the step axis, the tracer's alert, the
//! diagnosis), and takes the screenshot. A picture differs in its pixels from machine to machine
//! (fonts, timings in the trace), so the committed one is not compared pixel by pixel: it carries
//! a stamp of what it shows (an `iTXt` chunk: the page's template, script and style, the window,
//! the section titles and the words of the part the picture holds, durations left out). When the
//! committed picture is missing or its stamp is not the current page's, the test writes the new
//! picture to `docs/report-html.png` and fails, asking for it to be looked at and committed.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::browser::{chromium, drawn_dom, headless, tag, texts};
use super::page_of;

/// The picture's size: the page's header, the diagnosis and the chart with its legend.
const WIDTH: u32 = 1100;
const HEIGHT: u32 = 1030;
/// The `iTXt` keyword of the stamp.
const KEYWORD: &str = "vramtrace-page";
/// What the picture is drawn from, besides the trace.
const SOURCES: [(&str, &str); 3] = [
    ("page.html", include_str!("../../../src/html/page.html")),
    ("chart.js", include_str!("../../../src/html/chart.js")),
    ("page.css", include_str!("../../../src/html/page.css")),
];

/// `docs/report-html.png` in this checkout.
fn committed_png() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/report-html.png")
}

/// `name` as the workspace build put it beside this test executable
/// (`target/<profile>/deps/cli-…` → `target/<profile>/name`).
fn built(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().and_then(Path::parent).unwrap().join(name);
    assert!(
        path.is_file(),
        "{} is missing: run `cargo build --workspace` first (the screenshot is of the demo's \
         page, and the demo runs the stand-ins under the tracer)",
        path.display()
    );
    path
}

/// Runs the demo in `dir`; returns the trace it wrote.
pub fn demo_trace(dir: &Path) -> PathBuf {
    let mut demo = Command::new(built("vramtrace-demo"));
    demo.current_dir(dir);
    // Only the demo's own settings count, not the tracer's or the stand-ins' of this shell.
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("VRAMTRACE_") || k.starts_with("STANDIN_") || k == "LD_PRELOAD" {
            demo.env_remove(&key);
        }
    }
    let out = demo.output().unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let traces: Vec<PathBuf> = std::fs::read_dir(dir.join("vramtrace-demo"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "vtrace"))
        .collect();
    assert_eq!(traces.len(), 1, "{traces:?}");
    traces[0].clone()
}

/// The text between the opening tag of the element with `id` and the next `</section>`.
fn section<'a>(dom: &'a str, id: &str) -> &'a str {
    let start = dom
        .find(&format!(r#"<section id="{id}""#))
        .unwrap_or_else(|| panic!("no section {id}"));
    let end = dom[start..].find("</section>").unwrap() + start;
    &dom[start..end]
}

/// The visible words of an HTML fragment, one line per text node (tooltips left out).
fn visible_text(html: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut in_title = false;
    for piece in html.split('<').skip(1) {
        let (tag, text) = piece.split_once('>').unwrap_or((piece, ""));
        if tag.starts_with("title") {
            in_title = true;
        } else if tag.starts_with("/title") {
            in_title = false;
        }
        let text = text
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&nbsp;", " ")
            .replace("&amp;", "&");
        let words: Vec<&str> = text.split_whitespace().collect();
        if !in_title && !words.is_empty() {
            lines.push(without_durations(&words));
        }
    }
    lines
}

/// `words` joined, each duration (`30 µs`, `(0 s)`, `2 min`) as `#T`: how long the demo's steps
/// take depends on the machine, and the picture is the same page either way.
fn without_durations(words: &[&str]) -> String {
    const UNITS: [&str; 6] = ["µs", "ms", "s", "min", "h", "days"];
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let number = words[i].trim_start_matches('(');
        let unit = words
            .get(i + 1)
            .map(|u| u.trim_end_matches([')', ';', ',', '.']));
        if number.parse::<f64>().is_ok() && unit.is_some_and(|u| UNITS.contains(&u)) {
            let open = &words[i][..words[i].len() - number.len()];
            let close = &words[i + 1][unit.unwrap().len()..];
            out.push(format!("{open}#T{close}"));
            i += 2;
        } else {
            out.push(words[i].to_string());
            i += 1;
        }
    }
    out.join(" ")
}

/// What the picture of `dom` shows, as the stamp it carries.
fn stamp(dom: &str) -> String {
    let mut lines = vec![format!("window {WIDTH}x{HEIGHT}")];
    for (name, text) in SOURCES {
        lines.push(format!(
            "{name} crc32 {:08x}",
            crc32fast::hash(text.as_bytes())
        ));
    }
    let titles: Vec<String> = dom
        .split("<h2>")
        .skip(1)
        .map(|h| visible_text(&format!("<h2>{}", &h[..h.find("</h2>").unwrap()])).join(" "))
        .collect();
    lines.push(format!("sections: {}", titles.join(" | ")));
    lines.extend(visible_text(section(dom, "diagnosis")));
    lines.extend(visible_text(section(dom, "timeline")));
    lines.join("\n")
}

/// The PNG's chunks: (type, data).
fn chunks(png: &[u8]) -> Vec<([u8; 4], &[u8])> {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let mut out = Vec::new();
    let mut at = 8;
    while at + 12 <= png.len() {
        let len = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
        let kind: [u8; 4] = png[at + 4..at + 8].try_into().unwrap();
        out.push((kind, &png[at + 8..at + 8 + len]));
        at += 12 + len;
    }
    out
}

/// Width and height of a PNG.
fn size(png: &[u8]) -> (u32, u32) {
    let (kind, ihdr) = chunks(png)[0];
    assert_eq!(&kind, b"IHDR");
    let word = |i: usize| u32::from_be_bytes(ihdr[i..i + 4].try_into().unwrap());
    (word(0), word(4))
}

/// The stamp a PNG carries, if any.
fn stamp_of(png: &[u8]) -> Option<String> {
    chunks(png).into_iter().find_map(|(kind, data)| {
        let text = data.strip_prefix(format!("{KEYWORD}\0").as_bytes())?;
        // Not compressed, no language tag, no translated keyword.
        let text = text.strip_prefix(b"\0\0\0\0")?;
        (&kind == b"iTXt").then(|| String::from_utf8_lossy(text).into_owned())
    })
}

/// `png` with `stamp` in an `iTXt` chunk after its header.
fn stamped(png: &[u8], stamp: &str) -> Vec<u8> {
    let mut body = b"iTXt".to_vec();
    body.extend_from_slice(KEYWORD.as_bytes());
    body.extend_from_slice(b"\0\0\0\0\0");
    body.extend_from_slice(stamp.as_bytes());
    let mut chunk = ((body.len() - 4) as u32).to_be_bytes().to_vec();
    chunk.extend_from_slice(&body);
    chunk.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
    // The signature, then IHDR (4 + 4 + 13 + 4 bytes), then the stamp.
    let after_header = 8 + 25;
    [&png[..after_header], &chunk[..], &png[after_header..]].concat()
}

#[test]
fn the_readme_screenshot_is_made_from_the_current_page_of_the_demo() {
    let test = "the_readme_screenshot_is_made_from_the_current_page_of_the_demo";
    let Some(browser) = chromium(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let trace = demo_trace(dir.path());
    let (html, _) = page_of(dir.path(), &trace);
    let url = format!("file://{}", html.display());
    let dom = drawn_dom(&browser, dir.path(), &url);

    // What the README says of the picture: the demo's 20 steps on the x axis, its native
    // functions stacked, the alert the tracer raised at step 11, the diagnosis first.
    let svg = tag(&dom, "chart-device-0");
    assert!(svg.contains(r#"data-axis="steps""#), "{svg}");
    assert_eq!(
        texts(&dom, "axis x-tick"),
        ["0", "2", "4", "6", "8", "10", "12", "14", "16", "18", "20"]
    );
    assert!(dom.contains(r#"data-by="function" class="on""#));
    assert_eq!(texts(&dom, "alert-label"), ["ALERT at step 11"]);
    let diagnosis = visible_text(section(&dom, "diagnosis"));
    assert_eq!(
        diagnosis[..3],
        ["Diagnosis", "(2 findings, most urgent first)", "ALERT"],
        "{diagnosis:#?}"
    );
    assert!(
        diagnosis.contains(
            &"at main at wl_train.c:128 → fw_alloc (libtorch_standin.so) on device 0".to_string()
        ),
        "{diagnosis:#?}"
    );

    let shot = dir.path().join("report-html.png");
    headless(
        &browser,
        dir.path(),
        &[
            format!("--screenshot={}", shot.display()),
            format!("--window-size={WIDTH},{HEIGHT}"),
        ],
        &url,
    );
    let png = std::fs::read(&shot).unwrap();
    assert_eq!(size(&png), (WIDTH, HEIGHT));
    // A page drawn, not a blank window: a blank one compresses to a few hundred bytes.
    assert!(png.len() > 50_000, "{} bytes", png.len());

    let now = stamp(&dom);
    let path = committed_png();
    let committed = std::fs::read(&path).ok();
    let then = committed.as_deref().and_then(stamp_of);
    if then.as_deref() == Some(now.as_str()) {
        return;
    }
    std::fs::write(&path, stamped(&png, &now)).unwrap();
    let then = then.unwrap_or_default();
    let gone: Vec<&str> = then
        .lines()
        .filter(|l| !now.lines().any(|n| n == *l))
        .collect();
    let new: Vec<&str> = now
        .lines()
        .filter(|l| !then.lines().any(|t| t == *l))
        .collect();
    panic!(
        "{} was not made from the current page: it has been made again now — look at it and \
         commit it.\nwhat the old picture showed and the page no longer does:\n  {}\nwhat the \
         page shows now:\n  {}",
        path.display(),
        gone.join("\n  "),
        new.join("\n  ")
    );
}
