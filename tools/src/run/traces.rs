//! Finding the traces a run wrote and summarising each.
//!
//! Every traced process (the program, its forks, what it execs) writes its own file, named by the
//! output pattern (`%p` the pid, `%r` the rank, `%h` the host, `%t` the start time). A process
//! whose name was taken writes beside it with a tag before the extension (`run.4242.vtrace`,
//! `t-42.1.vtrace`: the tracer never replaces a file). The run's traces are the files in the
//! output directory matching the pattern, tagged or not, that are new, or changed, since the run
//! started.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use vramtrace_collector::live::{Accounting, LiveState, StepSource};

use super::status::Loaded;
use crate::load::{read, Flow, Progress, ReadFrom};
use crate::units::bytes;

/// Call sites listed per trace in the summary.
const SUMMARY_SITES: usize = 5;

/// One part of a file name pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    /// `%p`, `%t`: a number.
    Number,
    /// `%r`: a number, or `x` when the rank is unknown.
    Rank,
    /// `%h`: a host name.
    Host,
}

/// An output path pattern such as `/tmp/job-%p.vtrace`.
#[derive(Clone, Debug)]
pub struct OutputPattern {
    dir: PathBuf,
    name: Vec<Piece>,
    /// The name has no extension: tags go at its end.
    tags_at_end: bool,
}

/// What the matching files looked like before the run: (modified, length).
pub type Snapshot = HashMap<PathBuf, (Option<SystemTime>, u64)>;

fn pieces(name: &str) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut chars = name.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            text.push(c);
            continue;
        }
        let piece = match chars.next() {
            Some('p') | Some('t') => Piece::Number,
            Some('r') => Piece::Rank,
            Some('h') => Piece::Host,
            Some('%') => {
                text.push('%');
                continue;
            }
            Some(other) => {
                text.push('%');
                text.push(other);
                continue;
            }
            None => {
                text.push('%');
                continue;
            }
        };
        if !text.is_empty() {
            out.push(Piece::Text(std::mem::take(&mut text)));
        }
        out.push(piece);
    }
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    out
}

/// Whether `name` is what `pattern` expands to for some values.
fn fits(pattern: &[Piece], name: &str) -> bool {
    let Some((first, rest)) = pattern.split_first() else {
        return name.is_empty();
    };
    let number_len = name.bytes().take_while(u8::is_ascii_digit).count();
    match first {
        Piece::Text(t) => name.strip_prefix(t.as_str()).is_some_and(|r| fits(rest, r)),
        Piece::Number => (1..=number_len).any(|n| fits(rest, &name[n..])),
        Piece::Rank => {
            if let Some(r) = name.strip_prefix('x') {
                return fits(rest, r);
            }
            let sign = usize::from(name.starts_with('-'));
            let digits = name[sign..].bytes().take_while(u8::is_ascii_digit).count();
            (1..=digits).any(|n| fits(rest, &name[sign + n..]))
        }
        Piece::Host => name
            .char_indices()
            .skip(1)
            .map(|(i, _)| i)
            .chain(std::iter::once(name.len()))
            .filter(|&i| i > 0)
            .any(|i| fits(rest, &name[i..])),
    }
}

/// `name` without the tags (`.N`) the tracer puts before the extension of a taken name (at the
/// end, for a pattern without one): the name itself, then with one and two tags removed. A later
/// segment's name (`NAME.segN.EXT`, and the fresh names given way to from it) stands for the
/// first segment's, `NAME.EXT`.
fn untagged(name: &str, at_end: bool) -> Vec<String> {
    fn strip_tag(stem: &str) -> Option<&str> {
        let (head, tag) = stem.rsplit_once('.')?;
        (!tag.is_empty() && tag.bytes().all(|b| b.is_ascii_digit()) && !head.is_empty())
            .then_some(head)
    }
    let (mut stem, ext) = match name.rsplit_once('.') {
        Some((s, e)) if !s.is_empty() && !at_end => (s, format!(".{e}")),
        _ => (name, String::new()),
    };
    let segment = stem.match_indices(".seg").map(|(i, _)| i).find(|&i| {
        let rest = &stem[i + 4..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        digits > 0 && (rest.len() == digits || rest.as_bytes()[digits] == b'.')
    });
    if let Some(i) = segment.filter(|&i| i > 0) {
        stem = &stem[..i];
    }
    let mut out = vec![format!("{stem}{ext}")];
    for _ in 0..2 {
        if let Some(s) = strip_tag(stem) {
            stem = s;
            out.push(format!("{s}{ext}"));
        }
    }
    out
}

impl OutputPattern {
    /// The pattern of an absolute output path.
    pub fn new(path: &Path) -> Self {
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let name = path
            .file_name()
            .map(OsStr::to_string_lossy)
            .unwrap_or_default()
            .into_owned();
        OutputPattern {
            dir,
            tags_at_end: !name.get(1..).is_some_and(|n| n.contains('.')),
            name: pieces(&name),
        }
    }

    /// Whether a file name is one this pattern produces.
    fn matches(&self, name: &str) -> bool {
        untagged(name, self.tags_at_end)
            .iter()
            .any(|n| fits(&self.name, n))
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

    /// The traces whose files are new or changed since `before`, oldest first (a trace cut
    /// into segments once, by its first segment there).
    pub fn written_since(&self, before: &Snapshot) -> Vec<PathBuf> {
        let mut found: Vec<(Option<SystemTime>, PathBuf)> = self
            .snapshot()
            .into_iter()
            .filter(|(path, now)| before.get(path) != Some(now))
            .map(|(path, (modified, _))| (modified, path))
            .collect();
        found.sort();
        crate::inputs::one_per_trace(found.into_iter().map(|(_, p)| p).collect())
    }
}

/// Prints a short summary of each trace.
pub fn summarize(
    out: &mut impl Write,
    traces: &[PathBuf],
    loaded: Option<Loaded>,
) -> io::Result<()> {
    if traces.is_empty() {
        return writeln!(out, "vramtrace: {}", why_no_trace(loaded));
    }
    for path in traces {
        // The end of a trace cut into segments is its last segment's.
        let progress = Progress::new(path, "reading");
        match read(
            path,
            ReadFrom::Last(0),
            StepSource::Marks,
            &progress,
            |_, _| Flow::Apply,
        ) {
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
pub fn why_no_trace(loaded: Option<Loaded>) -> &'static str {
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

    #[test]
    fn patterns_match_every_placeholder_and_the_names_of_taken_names() {
        let p = OutputPattern::new(Path::new("/t/job-%h-r%r-%p.vtrace"));
        assert!(p.matches("job-node1-r3-42.vtrace"));
        assert!(p.matches("job-node-a.b-rx-42.vtrace"));
        assert!(p.matches("job-node1-r3-42.1.vtrace"), "an exec'd image's");
        assert!(!p.matches("job--r3-42.vtrace"));
        assert!(!p.matches("job-node1-ry-42.vtrace"));
        let fixed = OutputPattern::new(Path::new("/t/run.vtrace"));
        assert!(
            fixed.matches("run.4242.vtrace"),
            "a child's beside the parent's"
        );
        assert!(fixed.matches("run.4242.3.vtrace"));
        assert!(!fixed.matches("run.x.vtrace"));
        assert!(!fixed.matches("run.4.2.1.vtrace"));
        assert!(fixed.matches("run.seg12.vtrace"), "a later segment's");
        assert!(fixed.matches("run.seg12.4242.vtrace") && fixed.matches("run.4242.seg3.vtrace"));
        assert!(!fixed.matches("run.segx.vtrace"));
        let bare = OutputPattern::new(Path::new("/t/run"));
        assert!(bare.matches("run.4242") && bare.matches("run.4242.1"));
        assert!(!bare.matches("runs"));
    }
}
