//! The traces a command was given: trace files, and directories of traces (one per rank or
//! process, as `torchrun` and forked workers write them), read in parallel, one trace per core,
//! with what the comparisons need besides the live state: the analyses, and a tally of every
//! call's allocations and failures taken on the way.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use indicatif::MultiProgress;
use rayon::prelude::*;
use vramtrace_collector::analysis::{Analysis, GrowthConfig};
use vramtrace_collector::compare::CallTally;
use vramtrace_collector::event::Event;
use vramtrace_collector::format::{SegmentFile, TraceKey};
use vramtrace_collector::live::LiveState;
use vramtrace_collector::torch::TorchView;

use crate::load::{load_with_steps_observing, LoadedTrace, Observer, Progress, ReadFrom};

/// The traces named by `inputs`: each file as given, each directory's `*.vtrace` files in
/// name order; the segments of one trace cut into segments are one trace, named by the first
/// of them there. A directory is read one level deep: traces in its subdirectories are named in
/// a warning (or in the error, when the directory itself holds none), never read unsaid.
pub fn expand(inputs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let found = expand_readable(inputs)?;
    match found.unreadable.is_empty() {
        true => Ok(found.traces),
        false => Err(cannot_read(&found.unreadable, found.total())),
    }
}

/// The traces of several that can be read, and those that cannot, each with why.
pub struct Readable {
    pub traces: Vec<PathBuf>,
    pub unreadable: Vec<Unreadable>,
}

/// A trace that cannot be opened (a rank that died before its tracer wrote, a damaged file).
#[derive(serde::Serialize, Clone)]
pub struct Unreadable {
    pub path: String,
    pub error: String,
}

impl Readable {
    /// How many traces were named, readable or not.
    pub fn total(&self) -> usize {
        self.traces.len() + self.unreadable.len()
    }
}

/// As [`expand`], but of several traces, those that cannot be opened are handed back beside the
/// others (a job where one rank crashed is still reported by its other ranks); an error only
/// when none can be read.
pub fn expand_readable(inputs: &[PathBuf]) -> Result<Readable> {
    let mut traces = Vec::new();
    for input in inputs {
        if input.is_dir() {
            let found = traces_in(input)?;
            if found.is_empty() {
                return Err(anyhow!(
                    "{}: no trace files (*.vtrace) in this directory{}",
                    input.display(),
                    subdirectories_with_traces(input).map_or(String::new(), |(b, _)| format!(
                        "; {b} (a directory is read one level deep: give a subdirectory)"
                    ))
                ));
            }
            if let Some(unread) = unread_below(input) {
                say!("warning: {unread}");
            }
            traces.extend(found);
        } else {
            traces.push(input.clone());
        }
    }
    let traces = one_per_trace(once_each(traces));
    let found = readable(traces);
    if found.traces.is_empty() && found.unreadable.len() > 1 {
        return Err(cannot_read(&found.unreadable, found.total()));
    }
    Ok(found)
}

/// `paths` with each file once: a file named again (overlapping globs, a directory and a
/// trace in it) would be one rank counted twice, and the odd one out of the ranks misjudged.
fn once_each(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let mut seen: Vec<((u64, u64), PathBuf)> = Vec::new();
    let mut kept = Vec::new();
    for path in paths {
        let Ok(meta) = std::fs::metadata(&path) else {
            kept.push(path);
            continue;
        };
        let id = (meta.dev(), meta.ino());
        match seen.iter().find(|(s, _)| *s == id) {
            Some((_, first)) if *first == path => {
                say!("warning: {} given twice: read once", path.display())
            }
            Some((_, first)) => say!(
                "warning: {} is {}, given before: read once",
                path.display(),
                first.display()
            ),
            None => {
                seen.push((id, path.clone()));
                kept.push(path);
            }
        }
    }
    kept
}

/// Of several traces, those that cannot be opened, all found at once (a job where one rank
/// crashed may leave more than one). A single trace is read as given: its own error is the
/// reader's.
fn readable(traces: Vec<PathBuf>) -> Readable {
    if traces.len() < 2 {
        return Readable {
            traces,
            unreadable: Vec::new(),
        };
    }
    let opened: Vec<Option<String>> = traces
        .par_iter()
        .map(|t| crate::load::open_series(t).err().map(|e| e.to_string()))
        .collect();
    let mut found = Readable {
        traces: Vec::new(),
        unreadable: Vec::new(),
    };
    for (path, error) in traces.into_iter().zip(opened) {
        match error {
            None => found.traces.push(path),
            Some(error) => found.unreadable.push(Unreadable {
                path: path.display().to_string(),
                error,
            }),
        }
    }
    found
}

/// The error of `unreadable`, of `total` traces: one is its own error, as reading it gives;
/// more are counted, the first three said.
fn cannot_read(unreadable: &[Unreadable], total: usize) -> anyhow::Error {
    if let [one] = unreadable {
        return anyhow!("{}", one.error);
    }
    if unreadable.len() == total {
        return anyhow!(
            "none of the {total} traces can be read: {}",
            unreadable_list(unreadable)
        );
    }
    anyhow!(
        "{} of {total} traces cannot be read (move them aside to read the others): {}",
        unreadable.len(),
        unreadable_list(unreadable)
    )
}

/// The errors of `unreadable` in one line: the first three, then how many more.
pub fn unreadable_list(unreadable: &[Unreadable]) -> String {
    let shown = 3;
    let mut list: Vec<String> = (unreadable.iter().take(shown))
        .map(|u| u.error.clone())
        .collect();
    if unreadable.len() > shown {
        list.push(format!("and {} more", unreadable.len() - shown));
    }
    list.join("; ")
}

/// Every file of the traces at `paths`: a trace cut into segments is all of its segments there,
/// and its name as given even where rotation removed that file (an output must be none of them).
pub fn files_of(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut files = paths.to_vec();
    for path in paths {
        if let Ok(series) = vramtrace_collector::format::Series::find(path) {
            files.extend(series.first_name());
            files.extend(series.files.into_iter().map(|f| f.path));
        }
    }
    files
}

/// `paths` with each trace cut into segments once, at the place of its first file, named by
/// its segment of the lowest number there. Two files that are the same segment of one trace
/// (a copy, a cut copy) are two traces: each is read, none left out unsaid.
pub fn one_per_trace(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut kept: Vec<(PathBuf, Option<(TraceKey, u32)>)> = Vec::new();
    for path in paths {
        let series = (path.is_file())
            .then(|| SegmentFile::open(&path).ok())
            .flatten()
            .filter(|f| f.info().is_some())
            .map(|f| (f.trace_key(), f.index()));
        let Some((key, index)) = series else {
            kept.push((path, None));
            continue;
        };
        match kept
            .iter_mut()
            .find(|(_, k)| k.as_ref().is_some_and(|k| k.0 == key))
        {
            Some(entry) if entry.1.as_ref().is_some_and(|k| k.1 == index) => {
                kept.push((path, None));
            }
            Some(entry) if entry.1.as_ref().is_some_and(|k| k.1 > index) => {
                *entry = (path, Some((key, index)));
            }
            Some(_) => {}
            None => kept.push((path, Some((key, index)))),
        }
    }
    kept.into_iter().map(|(p, _)| p).collect()
}

/// The `*.vtrace` files of `dir`, sorted by name.
fn traces_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        anyhow!(
            "{}: {}",
            dir.display(),
            crate::load::lower_first(e.to_string())
        )
    })?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        // Whatever is named as a trace is one: a link that leads nowhere or a directory of that
        // name is an input that cannot be read, named as such, never left out unsaid.
        .filter(|p| p.extension().is_some_and(|x| x == "vtrace"))
        .collect();
    found.sort();
    Ok(found)
}

/// The traces below directory `dir` that reading it leaves out, in a sentence naming `dir`
/// (a warning), or `None`.
pub fn unread_below(dir: &Path) -> Option<String> {
    let (below, traces) = subdirectories_with_traces(dir)?;
    let verb = if traces == 1 { "is" } else { "are" };
    Some(format!(
        "{}: {below} {verb} not read (a directory is read one level deep)",
        dir.display()
    ))
}

/// The subdirectories of `dir` that hold traces, in words (`3 traces in its subdirectories
/// rank0/, rank1/`), and how many traces; or `None`.
fn subdirectories_with_traces(dir: &Path) -> Option<(String, usize)> {
    let mut dirs: Vec<(String, usize)> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .filter_map(|p| {
            let n = traces_in(&p).ok()?.len();
            let name = p.file_name()?.to_string_lossy().into_owned();
            (n > 0).then_some((name, n))
        })
        .collect();
    if dirs.is_empty() {
        return None;
    }
    dirs.sort();
    let traces: usize = dirs.iter().map(|(_, n)| n).sum();
    let mut names: Vec<String> = dirs.iter().take(3).map(|(d, _)| format!("{d}/")).collect();
    if dirs.len() > 3 {
        names.push(format!("and {} more", dirs.len() - 3));
    }
    let noun = if traces == 1 { "trace" } else { "traces" };
    let place = if dirs.len() == 1 {
        "subdirectory"
    } else {
        "subdirectories"
    };
    let words = format!("{traces} {noun} in its {place} {}", names.join(", "));
    Some((words, traces))
}

/// A trace read to its end, with its analyses and the tally of its calls.
pub struct Run {
    pub trace: LoadedTrace,
    /// What the trace holds of PyTorch, read once.
    pub torch: TorchView,
    /// Every analysis, with PyTorch's own view of its tensors beside the driver's, as the
    /// report makes them.
    pub analysis: Analysis,
    pub tally: CallTally,
}

/// The tally of every call, taken as the trace is read.
struct Tallying(CallTally);

impl Observer for Tallying {
    fn event(&mut self, _: &LiveState, e: &Event) {
        self.0.note(e);
    }
}

/// Reads the trace at `path` as [`crate::load::load_with_steps`] does (its steps decided the same
/// way), tallying its calls in the pass that counts, and analyzes it with PyTorch's view.
pub fn load_run(
    path: &Path,
    from: ReadFrom,
    growth: GrowthConfig,
    progress: &Progress,
) -> Result<Run> {
    let (trace, Tallying(tally)) =
        load_with_steps_observing(path, from, growth, progress, |_| Tallying(CallTally::new()))?;
    let torch = trace.torch();
    let mut symbols = crate::load::thread_symbolizer();
    let analysis = trace.analyze(&torch, &mut symbols);
    crate::load::keep_symbolizer(symbols);
    Ok(Run {
        analysis,
        trace,
        torch,
        tally,
    })
}

/// Reads every trace of `paths` in parallel, then hands each to `then` (also in parallel);
/// results keep the order of `paths`. The first trace that cannot be read is the error.
pub fn load_all<T: Send>(
    paths: &[PathBuf],
    from: ReadFrom,
    growth: GrowthConfig,
    then: impl Fn(Run) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let group = MultiProgress::new();
    paths
        .par_iter()
        .map(|path| {
            let progress = Progress::in_group(&group, path, "reading");
            let run = load_run(path, from, growth, &progress)?;
            drop(progress);
            then(run).with_context(|| path.display().to_string())
        })
        .collect()
}
