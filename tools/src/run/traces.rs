//! Finding the traces a run wrote and summarising each.
//!
//! Every traced process (the program, its forks, what it execs) writes its own file, named by the
//! output pattern with its placeholders filled in (`%p` pid, `%r` rank, `%h` host, `%t` start
//! time). The run's traces are the files in the output directory that the pattern can produce,
//! new or changed since the run started.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use vramtrace_collector::live::{Accounting, LiveState};

use super::status::Loaded;
use crate::load::load;
use crate::units::bytes;

/// Call sites listed per trace in the summary.
const SUMMARY_SITES: usize = 5;

/// An output path pattern such as `/tmp/job-%p.vtrace`.
#[derive(Clone, Debug)]
pub struct OutputPattern {
    dir: PathBuf,
    /// The file name, split at its placeholders.
    name: Vec<Part>,
}

/// A piece of a file name pattern, as the tracer expands it (`session::output::expand`).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    /// `%p` (pid) or `%t` (start time, Unix seconds).
    Number,
    /// `%r`: the rank, `x` when unknown.
    Rank,
    /// `%h`: the host name.
    Host,
}

/// What the matching files looked like before the run: (modified, length).
pub type Snapshot = HashMap<PathBuf, (Option<SystemTime>, u64)>;

impl OutputPattern {
    /// Splits an absolute output path's file name at its placeholders.
    pub fn new(path: &Path) -> Self {
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let name = path
            .file_name()
            .map(OsStr::to_string_lossy)
            .unwrap_or_default();
        OutputPattern {
            dir,
            name: parts(&name),
        }
    }

    /// Whether a file name is one this pattern produces.
    fn matches(&self, name: &str) -> bool {
        matches(&self.name, name)
    }

    /// The matching files now, with their modification time and length.
    pub fn snapshot(&self) -> Snapshot {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Snapshot::new();
        };
        entries
            .filter_map(Result::ok)
            .filter(|e| self.matches(&e.file_name().to_string_lossy()))
            .filter_map(|e| {
                let meta = e.metadata().ok()?;
                meta.is_file()
                    .then(|| (e.path(), (meta.modified().ok(), meta.len())))
            })
            .collect()
    }

    /// The matching files that are new or changed since `before`, oldest first.
    pub fn written_since(&self, before: &Snapshot) -> Vec<PathBuf> {
        let mut found: Vec<(Option<SystemTime>, PathBuf)> = self
            .snapshot()
            .into_iter()
            .filter(|(path, now)| before.get(path) != Some(now))
            .map(|(path, (modified, _))| (modified, path))
            .collect();
        found.sort();
        found.into_iter().map(|(_, p)| p).collect()
    }
}

/// A file name pattern in parts; `%%` is a percent sign, an unknown `%x` stays as it is.
fn parts(pattern: &str) -> Vec<Part> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            text.push(c);
            continue;
        }
        let part = match chars.next() {
            Some('p' | 't') => Part::Number,
            Some('r') => Part::Rank,
            Some('h') => Part::Host,
            Some('%') | None => {
                text.push('%');
                continue;
            }
            Some(other) => {
                text.push('%');
                text.push(other);
                continue;
            }
        };
        if !text.is_empty() {
            out.push(Part::Text(std::mem::take(&mut text)));
        }
        out.push(part);
    }
    if !text.is_empty() {
        out.push(Part::Text(text));
    }
    out
}

/// Whether `name` is what `parts` expand to for some pid, rank, host and time.
fn matches(parts: &[Part], name: &str) -> bool {
    let Some((first, rest)) = parts.split_first() else {
        return name.is_empty();
    };
    let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
    match first {
        Part::Text(t) => name
            .strip_prefix(t.as_str())
            .is_some_and(|n| matches(rest, n)),
        Part::Number => (1..=digits(name)).any(|end| matches(rest, &name[end..])),
        Part::Rank => {
            if let Some(n) = name.strip_prefix('x') {
                return matches(rest, n);
            }
            let sign = usize::from(name.starts_with('-'));
            (1..=digits(&name[sign..])).any(|end| matches(rest, &name[sign + end..]))
        }
        Part::Host => name
            .char_indices()
            .skip(1)
            .map(|(i, _)| i)
            .chain([name.len()])
            .any(|end| matches(rest, &name[end..])),
    }
}

/// Prints a short summary of each trace; without traces, why there are none (`loaded`: what
/// the run's processes reported, `None` when the run could not ask).
pub fn summarize(
    out: &mut impl Write,
    traces: &[PathBuf],
    loaded: Option<Loaded>,
) -> io::Result<()> {
    if traces.is_empty() {
        return writeln!(out, "vramtrace: {}", why_no_trace(loaded));
    }
    for path in traces {
        match load(path) {
            Ok(trace) => {
                let state = &trace.state;
                let dropped = state
                    .stats()
                    .map_or("unknown".to_string(), |s| s.dropped.to_string());
                let events = state
                    .stats()
                    .map_or(state.events(), |s| s.events.max(state.events()));
                writeln!(
                    out,
                    "vramtrace: {}: pid {}, {events} events, {dropped} dropped, {}",
                    path.display(),
                    trace.header.pid,
                    trace.ending.describe()
                )?;
                summarize_live(out, state)?;
            }
            Err(e) => writeln!(out, "vramtrace: {e:#}")?,
        }
    }
    Ok(())
}

/// Why a run wrote no trace.
fn why_no_trace(loaded: Option<Loaded>) -> &'static str {
    const NOT_LOADED: &str = "the tracer library was not loaded (no trace written): the loader \
        ignores LD_PRELOAD for setuid programs and static binaries, and says on stderr when it \
        cannot load a library";
    match loaded {
        Some(l) if l.tracing > 0 => "the program made no GPU memory call (no trace written)",
        Some(l) if l.disabled > 0 => "tracing was off: VRAMTRACE_DISABLE is set (no trace written)",
        Some(_) => NOT_LOADED,
        None => {
            "no trace was written: the program made no GPU memory call, or the tracer library \
             was not loaded (setuid programs and static binaries ignore LD_PRELOAD)"
        }
    }
}

fn summarize_live(out: &mut impl Write, state: &LiveState) -> io::Result<()> {
    let summary = state.summary();
    writeln!(
        out,
        "  live device memory at the end: {} in {} objects",
        bytes(summary.device_memory.bytes),
        summary.device_memory.count
    )?;
    let sites = state.by_call_site();
    let device_sites: Vec<_> = sites.iter().filter(|s| s.bytes > 0).collect();
    for s in device_sites.iter().take(SUMMARY_SITES) {
        writeln!(
            out,
            "    {:>10}  {:>5} objects  {:<24} {} (owner {})",
            bytes(s.bytes),
            s.count,
            s.api.name(),
            s.location,
            s.module_name.as_deref().unwrap_or("unknown")
        )?;
    }
    let orphans = state
        .orphans()
        .filter(|o| o.category.accounting() == Accounting::Device)
        .count();
    if orphans > 0 {
        writeln!(out, "  {orphans} orphaned objects: see `vramtrace report`")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_every_placeholder() {
        let p = OutputPattern::new(Path::new("/t/%h-rank%r-%p-%t.vtrace"));
        assert!(p.matches("node-1-rank3-42-1700000000.vtrace"));
        assert!(p.matches("n-rankx-42-1.vtrace"));
        assert!(p.matches("n-rank-1-42-1.vtrace"));
        assert!(!p.matches("-rank3-42-1.vtrace"));
        assert!(!p.matches("n-rank3-42-.vtrace"));
        assert!(!p.matches("n-ranky-42-1.vtrace"));
        let literal = OutputPattern::new(Path::new("/t/100%%-%p.vtrace"));
        assert!(literal.matches("100%-7.vtrace"));
        assert!(!literal.matches("100%%-7.vtrace"));
    }

    #[test]
    fn patterns_match_any_pid() {
        let p = OutputPattern::new(Path::new("/t/vramtrace-%p.vtrace"));
        assert!(p.matches("vramtrace-42.vtrace"));
        assert!(!p.matches("vramtrace-.vtrace"));
        assert!(!p.matches("vramtrace-4x2.vtrace"));
        assert!(!p.matches("other-42.vtrace"));
        let fixed = OutputPattern::new(Path::new("/t/run.vtrace"));
        assert!(fixed.matches("run.vtrace"));
        assert!(!fixed.matches("run.vtrace.1"));
    }
}
