//! What the run's processes said became of them, so that a run without traces can say why, and
//! `check` never passes a process it did not see: the program made no GPU memory call, the
//! loader never gave it the library, tracing was off, or its trace could not be written.
//!
//! `run` makes a private directory (mode 0700, removed after the run) and names it in
//! `VRAMTRACE_RUN_STATUS`; each traced process appends lines to a file there named by its pid
//! (see the library's `session::announce`): `tracing` or `disabled` when the library is loaded,
//! `trace PATH` when its trace was created, `removed PATH` when the tracer removed it at the end
//! (no GPU memory call in it), `untraced REASON` when it could not be, `cut PATH` when writing
//! it failed later, `capture LAYERS` when `VRAMTRACE_CAPTURE` left layers out,
//! `exec-untraced PATH` before an exec whose environment no longer preloads the library and
//! `exec-unannounced PATH` before one whose environment preloads it but no longer
//! names the run (the image it makes runs unseen either way), and `exec-failed` when that exec
//! returned. Other files there (`warned-…`) are the library's own.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use tempfile::TempDir;
use vramtrace_collector::format::SegmentFile;

/// The variable the library reads (the same name as in `session::announce`).
pub const RUN_STATUS: &str = "VRAMTRACE_RUN_STATUS";

/// The run's status directory.
pub struct StatusDir(TempDir);

/// What one traced process said, in the order it said it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    /// An image of it loaded the tracer with tracing on.
    pub tracing: bool,
    /// An image of it loaded the tracer with `VRAMTRACE_DISABLE` set.
    pub disabled: bool,
    /// The traces it created.
    pub traces: Vec<PathBuf>,
    /// Why a trace of it could not be created (it ran on untraced).
    pub untraced: Vec<String>,
    /// Its traces whose writing failed part way.
    pub cut: Vec<PathBuf>,
    /// The layers it traced, when `VRAMTRACE_CAPTURE` left some out (`nccl`, `runtime,host`).
    pub capture: Option<String>,
    /// Programs it exec'd with an environment that no longer preloads the tracer, or that
    /// preloads it but no longer names the run: they ran unseen.
    pub exec_unseen: Vec<(PathBuf, Unseen)>,
}

/// Why an image a process exec'd ran unseen by the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unseen {
    /// Its environment no longer preloads the tracer: it ran untraced.
    NoTracer,
    /// Its environment preloads the tracer but no longer names the run (`env -i
    /// LD_PRELOAD=…`): traced, its trace went where its own settings say.
    OtherSettings,
}

/// What the traced processes reported, by pid.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reported {
    pub processes: Vec<Process>,
}

impl Reported {
    /// Processes that loaded the tracer with tracing on.
    pub fn tracing(&self) -> usize {
        self.processes.iter().filter(|p| p.tracing).count()
    }

    /// Processes that loaded it with `VRAMTRACE_DISABLE` set in one of their images (an image
    /// exec'd with it set ran unseen, whatever the image before it did).
    pub fn disabled(&self) -> impl Iterator<Item = &Process> {
        self.processes.iter().filter(|p| p.disabled)
    }

    /// Programs the processes exec'd unseen, each with its process and why.
    pub fn exec_unseen(&self) -> impl Iterator<Item = (&Process, &Path, Unseen)> {
        (self.processes.iter()).flat_map(|p| {
            p.exec_unseen
                .iter()
                .map(move |(t, why)| (p, t.as_path(), *why))
        })
    }

    /// Processes whose trace could not be created.
    pub fn untraced(&self) -> impl Iterator<Item = (&Process, &str)> {
        (self.processes.iter()).flat_map(|p| p.untraced.iter().map(move |r| (p, r.as_str())))
    }

    /// The traces the processes created, in pid order.
    pub fn traces(&self) -> impl Iterator<Item = (&Process, &Path)> {
        (self.processes.iter()).flat_map(|p| p.traces.iter().map(move |t| (p, t.as_path())))
    }

    /// Whether writing the trace at `path` failed part way (in any of its segments).
    pub fn was_cut(&self, path: &Path) -> bool {
        let key = |p: &Path| SegmentFile::open(p).ok().map(|f| f.trace_key());
        let same = |c: &Path| c == path || key(c).is_some_and(|k| Some(k) == key(path));
        (self.processes.iter()).any(|p| p.cut.iter().any(|c| same(c)))
    }
}

/// Reads one process's status file.
fn parse(pid: u32, text: &[u8]) -> Process {
    let mut p = Process {
        pid,
        // A file without a line: the library made it, and its write failed.
        tracing: text.iter().all(|&b| b == b'\n'),
        ..Process::default()
    };
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let (word, rest) = match line.iter().position(|&b| b == b' ') {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (line, &line[line.len()..]),
        };
        let path = || PathBuf::from(OsStr::from_bytes(rest));
        match word {
            b"disabled" => p.disabled = true,
            b"trace" => p.traces.push(path()),
            b"removed" => p.traces.retain(|t| *t != path()),
            b"untraced" => p.untraced.push(String::from_utf8_lossy(rest).into_owned()),
            b"cut" => p.cut.push(path()),
            b"capture" => p.capture = Some(String::from_utf8_lossy(rest).into_owned()),
            b"exec-untraced" => p.exec_unseen.push((path(), Unseen::NoTracer)),
            b"exec-unannounced" => p.exec_unseen.push((path(), Unseen::OtherSettings)),
            // The exec returned: the image it spoke of never ran.
            b"exec-failed" => drop(p.exec_unseen.pop()),
            // `tracing`, and what a newer library may add: it was loaded.
            _ => p.tracing = true,
        }
    }
    p
}

impl StatusDir {
    /// A fresh directory in the temporary directory; `None` when none can be made (the run then
    /// cannot tell why no trace was written, and says so).
    pub fn new() -> Option<StatusDir> {
        tempfile::Builder::new()
            .prefix("vramtrace-run-")
            .tempdir()
            .ok()
            .map(StatusDir)
    }

    /// The value of `VRAMTRACE_RUN_STATUS`.
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// What the processes left so far.
    pub fn read(&self) -> Reported {
        let mut by_pid = BTreeMap::new();
        for entry in std::fs::read_dir(self.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let text = std::fs::read(entry.path()).unwrap_or_default();
            by_pid.insert(pid, parse(pid, &text));
        }
        Reported {
            processes: by_pid.into_values().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_line_says_one_thing() {
        let p = parse(
            7,
            b"tracing\ntrace /t/a.vtrace\ntracing\nuntraced cannot write the trace: x\ncut /t/a.vtrace\n",
        );
        assert!(p.tracing && !p.disabled);
        assert_eq!(p.traces, [PathBuf::from("/t/a.vtrace")]);
        assert_eq!(p.untraced, ["cannot write the trace: x"]);
        assert_eq!(p.cut, [PathBuf::from("/t/a.vtrace")]);
        let off = parse(8, b"disabled\n");
        assert!(off.disabled && !off.tracing);
        // A file whose write failed, or was cut short: loaded, tracing.
        assert!(parse(9, b"").tracing);
        assert!(parse(9, b"trac").tracing);
        // A trace of marks alone, removed at the end: none.
        let marks_only = parse(10, b"tracing\ntrace /t/b.vtrace\nremoved /t/b.vtrace\n");
        assert!(marks_only.tracing && marks_only.traces.is_empty());
    }
}
