//! README and docs link only to files inside the repository: every Markdown link, image and
//! autolink in a tracked `.md` file names a file or folder of the repository that exists (an
//! `#anchor` after it is allowed), and no web address appears outside code. A reader of a copy
//! without network, or of a later version, can follow every link; what lives elsewhere goes
//! stale without anyone noticing.

use std::path::{Path, PathBuf};
use std::process::Command;

#[test]
fn markdown_links_stay_inside_the_repository() {
    let root = super::repository_root();
    let mut problems = Vec::new();
    for file in tracked_markdown(&root) {
        let text = std::fs::read_to_string(root.join(&file)).unwrap();
        for (line, target) in links(&text) {
            if let Some(why) = problem(&root, &file, &target) {
                problems.push(format!("{}:{line}: {target}: {why}", file.display()));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "links that leave the repository or name nothing:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_link_reader_finds_every_kind() {
    let text = "See [a](docs/a.md#part), ![b](b.png \"title\") and <https://example.com>.\n\
                [ref]: notes/c.md\n\
                ```\n[not](a/link.md) https://in.code.example\n```\n\
                Plain https://example.org/x, chrome://tracing and `https://inline.code`.\n";
    let found: Vec<(usize, String)> = links(text);
    assert_eq!(
        found,
        [
            (1, "docs/a.md#part".to_string()),
            (1, "b.png".to_string()),
            (1, "https://example.com".to_string()),
            (2, "notes/c.md".to_string()),
            (6, "https://example.org/x".to_string()),
        ]
    );
    let root = super::repository_root();
    let here = Path::new("README.md");
    assert!(problem(&root, here, "docs/design.md#limitations").is_none());
    assert!(problem(&root, here, "https://example.com").is_some());
    assert!(problem(&root, here, "docs/no-such-page.md").is_some());
    assert!(problem(&root, here, "../outside.md").is_some());
}

/// The Markdown files git tracks (untracked scratch files are not the repository's).
fn tracked_markdown(root: &Path) -> Vec<PathBuf> {
    let out = Command::new("git")
        .args(["ls-files", "*.md"])
        .current_dir(root)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git ls-files failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(PathBuf::from)
        .collect()
}

/// Why `target`, linked from `file`, is not a file of the repository; `None` when it is.
fn problem(root: &Path, file: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") || target.starts_with("www.") {
        return Some("a web address (link to a file of the repository instead)".into());
    }
    let path = target.split('#').next().unwrap_or_default();
    if path.is_empty() {
        return None;
    }
    let resolved = file.parent().unwrap_or(Path::new("")).join(path);
    let mut depth: i32 = 0;
    for part in resolved.components() {
        match part {
            std::path::Component::ParentDir => depth -= 1,
            std::path::Component::Normal(_) => depth += 1,
            _ => return Some("an absolute path".into()),
        }
        if depth < 0 {
            return Some("outside the repository".into());
        }
    }
    (!root.join(&resolved).exists()).then(|| "no such file in the repository".into())
}

/// Link targets with their line numbers: `[text](target)`, `![alt](target "title")`,
/// `<https://...>`, `[label]: target`, and bare `http(s)://` and `ftp://` addresses (which
/// renderers turn into links; `chrome://tracing` they leave as text); code blocks and code spans
/// are skipped.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_fence = false;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        if raw.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let prose = without_code_spans(raw);
        if let Some(rest) = prose.trim_start().strip_prefix('[') {
            if let Some((_, target)) = rest.split_once("]:") {
                out.push((line, target.trim().to_string()));
                continue;
            }
        }
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            let target = after[..end].split_whitespace().next().unwrap_or_default();
            out.push((line, target.to_string()));
            rest = &after[end..];
        }
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("://") {
            let start = rest[..at]
                .rfind(|c: char| !c.is_ascii_alphanumeric() && c != '+' && c != '-')
                .map_or(0, |p| p + 1);
            let end = rest[at..]
                .find(|c: char| c.is_whitespace() || matches!(c, '>' | ')' | '"' | '\''))
                .map_or(rest.len(), |p| at + p);
            let address = rest[start..end].trim_end_matches(['.', ',', ';', ':']);
            let web = ["http://", "https://", "ftp://"]
                .iter()
                .any(|s| address.starts_with(s));
            if web && !out.iter().any(|(l, t)| *l == line && t == address) {
                out.push((line, address.to_string()));
            }
            rest = &rest[end..];
        }
    }
    out
}

/// A line with its `code spans` blanked out.
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(' ');
        } else {
            out.push(if in_code { ' ' } else { c });
        }
    }
    out
}
