//! Finding the traces a run wrote and summarising each.
//!
//! Every traced process (the program, its forks, what it execs) writes its own file, named by the
//! output pattern with `%p` replaced by its pid. The run's traces are the files in the output
//! directory matching the pattern for any pid that are new, or changed, since the run started.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use vramtrace_collector::live::{Accounting, LiveState};

use crate::load::load;
use crate::units::bytes;

/// Call sites listed per trace in the summary.
const SUMMARY_SITES: usize = 5;

/// An output path pattern such as `/tmp/job-%p.vtrace`.
#[derive(Clone, Debug)]
pub struct OutputPattern {
    dir: PathBuf,
    /// The file name before and after `%p`; `None` when the name holds no `%p`.
    prefix: String,
    suffix: Option<String>,
}

/// What the matching files looked like before the run: (modified, length).
pub type Snapshot = HashMap<PathBuf, (Option<SystemTime>, u64)>;

impl OutputPattern {
    /// Splits an absolute output path around its `%p`.
    pub fn new(path: &Path) -> Self {
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let name = path
            .file_name()
            .map(OsStr::to_string_lossy)
            .unwrap_or_default()
            .into_owned();
        match name.split_once("%p") {
            Some((prefix, suffix)) => OutputPattern {
                dir,
                prefix: prefix.to_string(),
                suffix: Some(suffix.to_string()),
            },
            None => OutputPattern {
                dir,
                prefix: name,
                suffix: None,
            },
        }
    }

    /// Whether a file name is one this pattern produces.
    fn matches(&self, name: &str) -> bool {
        let Some(suffix) = &self.suffix else {
            return name == self.prefix;
        };
        name.strip_prefix(&self.prefix)
            .and_then(|rest| rest.strip_suffix(suffix.as_str()))
            .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
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

/// Prints a short summary of each trace.
pub fn summarize(out: &mut impl Write, traces: &[PathBuf]) -> io::Result<()> {
    if traces.is_empty() {
        return writeln!(
            out,
            "vramtrace: no trace was written (was the tracer library loaded? \
             LD_PRELOAD is ignored for setuid programs and static binaries)"
        );
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
