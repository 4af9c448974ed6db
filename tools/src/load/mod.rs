//! Reading traces into the live-allocation state, with the facts about how reading went: one
//! trace whole, up to a point (for `replay`), from a later segment of a trace cut into segments
//! (`window.rs`), or finding the steps of a trace without step marks in its allocation pattern
//! as it goes (`steps_found.rs`); and the traces a command was given, read in parallel
//! (`inputs.rs`).
//!
//! Reading streams: memory follows what is live, not the length of the trace. A progress bar on
//! stderr follows the bytes read when stderr is a terminal.

use std::cell::RefCell;
use std::fs::File;
use std::io::IsTerminal;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use vramtrace_collector::analysis::{analyze_with, Analysis, GrowthConfig};
use vramtrace_collector::event::Event;
use vramtrace_collector::format::{
    Ending, Header, Record, RecordRef, RecordSource, Series, SeriesReader, TraceError, Unread,
};
use vramtrace_collector::live::{LiveState, StepSource};
use vramtrace_collector::symbols::{label_sites, Attribution, Symbolizer};
use vramtrace_collector::torch::{ClockAnchor, TorchView};

use self::steps_found::Found;
pub use self::window::{indexed, removed_point, ReadFrom, SegmentFacts};

pub mod inputs;
mod steps_found;
mod window;

/// Records between progress bar updates.
const PROGRESS_EVERY: u64 = 1 << 16;

/// A trace read to its end (or as far as it could be read).
pub struct LoadedTrace {
    pub path: PathBuf,
    pub header: Header,
    pub ending: Ending,
    /// Records read.
    pub records: u64,
    /// Complete chunks read.
    pub chunks: u64,
    /// Records skipped because this version does not know their kind.
    pub skipped: u64,
    /// Bytes of the file that were read.
    pub bytes_read: u64,
    pub state: LiveState,
    /// Passes over the records: 2 when the steps had to be found in a first one.
    pub passes: u32,
    /// What of the file could not be read (damage), in file order.
    pub unread: Vec<Unread>,
    /// Settings of the growth analysis.
    pub growth: GrowthConfig,
    /// Set when reading stopped before the end: where.
    pub stopped: Option<String>,
    /// How the segments of a trace cut into segments were read; `None` for a trace of one file.
    pub segments: Option<SegmentFacts>,
}

impl LoadedTrace {
    /// What keeps this trace from being judged in full, in words (`is cut short (…)`, `has 2.0
    /// KiB that could not be read (damaged)`, `is missing 3 events the tracer lost`); empty
    /// when the trace is whole. `check`, `report --fail-on` and `diff` refuse a verdict on it.
    pub fn gaps(&self) -> Vec<String> {
        self.gaps_with(true)
    }

    /// What keeps the part read before a replay's point from being whole: [`Self::gaps`]
    /// without the trace's cut, which lies after the point.
    pub fn gaps_before_stop(&self) -> Vec<String> {
        self.gaps_with(false)
    }

    fn gaps_with(&self, with_cut: bool) -> Vec<String> {
        let mut gaps = Vec::new();
        // The chunk the last file ends inside is the cut, not damage.
        let (cut, damaged): (Vec<&Unread>, Vec<&Unread>) = self.unread.iter().partition(|u| u.torn);
        if with_cut && !self.ending.is_complete() {
            let lost: u64 = cut.iter().filter_map(|u| u.events).sum();
            let lost = match lost {
                0 => String::new(),
                1 => "; the 1 event in that chunk is not read".to_string(),
                n => format!(
                    "; the {} events in that chunk are not read",
                    vramtrace_collector::units::grouped(n)
                ),
            };
            gaps.push(format!("is cut short ({}{lost})", self.ending.describe()));
        }
        // A segment missing from the middle of the trace (or one cut short before the next
        // began): no byte is damaged, but the events between the two are not there.
        for u in damaged.iter().filter(|u| u.bytes == 0) {
            let events = u.events.map_or("events".to_string(), |n| {
                crate::render::units::count(n, "event")
            });
            gaps.push(format!(
                "is missing {events} between segments ({})",
                u.reason
            ));
        }
        let unread: u64 = damaged.iter().map(|u| u.bytes).sum();
        if unread > 0 {
            gaps.push(format!(
                "has {} that could not be read (damaged)",
                crate::render::units::bytes(unread)
            ));
        }
        // A driver function handed out without its wrapper (an ABI version the tracer does not
        // wrap): the program may have allocated through it unseen.
        let untraced = self.state.lookups_total();
        if untraced > 0 {
            let mut named: Vec<String> = (self.state.lookups().iter())
                .map(|l| format!("{} of CUDA {}", l.symbol, l.cuda_version))
                .collect();
            named.dedup();
            let more = untraced.saturating_sub(named.len() as u64);
            let more = match more {
                0 => String::new(),
                n => format!(" and {n} more"),
            };
            gaps.push(format!(
                "handed out {} untraced ({}{more}): calls through them are not in the trace",
                crate::render::units::count(untraced, "driver entry point"),
                named.join(", ")
            ));
        }
        // A number is missing for an event the tracer dropped, and for one in a part of the file
        // that could not be read: the tracer's counters say how many were its own.
        let lost = self.state.lost_events();
        if lost > 0 {
            let events = crate::render::units::count(lost, "event");
            let dropped = (self.state.stats()).map_or(0, |s| s.dropped + s.late);
            gaps.push(match (unread > 0, dropped.min(lost)) {
                (false, _) => format!("is missing {events} the tracer lost"),
                (true, 0) => format!("is missing {events}, in what could not be read"),
                (true, d) if d == lost => format!("is missing {events} the tracer lost"),
                (true, d) => format!(
                    "is missing {events} ({} the tracer lost, the others in what could not be \
                     read)",
                    vramtrace_collector::units::grouped(d)
                ),
            });
        }
        gaps
    }

    /// What the trace holds of PyTorch (its allocator's settings and recorder), read from the
    /// payloads its Python hooks attached; the trace header's clock places a snapshot without an
    /// anchor of its own.
    pub fn torch(&self) -> TorchView {
        let fallback = ClockAnchor {
            unix_ns: self.header.start_unix_ns,
            monotonic_ns: self.header.start_mono_ns,
        };
        TorchView::read(self.state.attachments(), Some(fallback))
    }

    /// [`LoadedTrace::torch`] for a reading that stopped before the end (a replay to a
    /// point): PyTorch's recorder hands its history over at exit, after the point, so every
    /// payload of the trace is read (records only, nothing applied); the analysis takes from
    /// the history the tensors up to the point's last step mark. A trace without PyTorch's
    /// hooks, or read to its end, has all it has already.
    pub fn torch_to_point(&self) -> Result<TorchView> {
        let hooked = !(self.state.attachments())
            .of_kind(vramtrace_collector::attached::KIND_TORCH_ALLOCATOR)
            .is_empty();
        if self.stopped.is_none() || !hooked {
            return Ok(self.torch());
        }
        let series = open_series(&self.path)?;
        let first = window::choose(&series, ReadFrom::First)?;
        let mut reader = series
            .read_from(first)
            .map_err(|e| open_error(&self.path, e))?;
        let mut payloads = vramtrace_collector::attached::Attachments::default();
        while let Some(record) = reader.next_event_or_record() {
            if let RecordRef::Other(Record::Attachment(piece)) = record {
                payloads.add(&piece);
            }
        }
        let fallback = ClockAnchor {
            unix_ns: self.header.start_unix_ns,
            monotonic_ns: self.header.start_mono_ns,
        };
        Ok(TorchView {
            until_seq: Some(self.state.last_seq()),
            ..TorchView::read(&payloads, Some(fallback))
        })
    }

    /// Every analysis of the trace, with PyTorch's own view of its tensors (`torch`, from
    /// [`LoadedTrace::torch`]) beside the driver's, its places labelled as every output names
    /// them (with `symbols`): no output relabels them.
    pub fn analyze(&self, torch: &TorchView, symbols: &mut Symbolizer) -> Analysis {
        let mut analysis = analyze_with(&self.state, &self.growth, torch.framework(&self.state));
        label_sites(
            &mut analysis,
            &mut Attribution::of_state(&self.state, symbols),
        );
        analysis
    }
}

thread_local! {
    /// The symbolizer the last trace read on this thread used: the traces of a job's ranks run
    /// one program, and each module's debug information is read (and decompressed) once per
    /// thread, not once per trace. A symbolizer knows its modules by path and build id.
    static SYMBOLS: RefCell<Option<Symbolizer>> = const { RefCell::new(None) };
}

/// This thread's symbolizer (a new one the first time); give it back with [`keep_symbolizer`].
pub fn thread_symbolizer() -> Symbolizer {
    SYMBOLS
        .with(|s| s.borrow_mut().take())
        .unwrap_or_else(Symbolizer::from_env)
}

/// Keeps `symbols` for the next trace read on this thread.
pub fn keep_symbolizer(symbols: Symbolizer) {
    SYMBOLS.with(|s| *s.borrow_mut() = Some(symbols));
}

/// Whether to go on reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Apply,
    Stop,
}

/// A progress bar over the bytes of a file, shown only when stderr is a terminal.
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A bar for reading `path`, labelled `message`.
    pub fn new(path: &Path, message: &str) -> Self {
        let len = std::fs::metadata(path).map_or(0, |m| m.len());
        let shown = std::io::stderr().is_terminal() && len > 0;
        let bar = shown.then(|| {
            let style = ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left)",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
            let bar = ProgressBar::new(len).with_style(style);
            bar.set_message(message.to_string());
            bar
        });
        Progress { bar }
    }

    /// A bar for reading `path` among the bars of `group` (traces read at the same time).
    pub fn in_group(group: &MultiProgress, path: &Path, message: &str) -> Self {
        let mut p = Progress::new(path, message);
        p.bar = p.bar.take().map(|b| group.add(b));
        p
    }

    /// A new pass over the file.
    pub fn restart(&self, message: &str) {
        if let Some(b) = &self.bar {
            b.set_position(0);
            b.set_message(message.to_string());
        }
    }

    pub(crate) fn set(&self, offset: u64) {
        if let Some(b) = &self.bar {
            b.set_position(offset);
        }
    }

    /// The bytes to read, once the files are known.
    pub(crate) fn set_len(&self, len: u64) {
        if let Some(b) = &self.bar {
            b.set_length(len);
        }
    }

    /// Follows `reader` (called after each record).
    pub(crate) fn follow(&self, reader: &SeriesReader) {
        if reader.records().is_multiple_of(PROGRESS_EVERY) {
            self.set(reader.offset());
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// Lowercases the first letter of an OS message ("No such file" → "no such file") so every
/// error line reads alike.
pub fn lower_first(message: String) -> String {
    let mut chars = message.chars();
    match (chars.next(), chars.next()) {
        (Some(a), Some(b)) if a.is_ascii_uppercase() && b.is_ascii_lowercase() => {
            a.to_ascii_lowercase().to_string() + &message[1..]
        }
        _ => message,
    }
}

/// The one-line error for a trace that cannot be opened.
pub(crate) fn open_error(path: &Path, err: TraceError) -> anyhow::Error {
    match err {
        // The reader names its source generically; name the file the user gave.
        TraceError::Io { source, .. } => {
            anyhow!("{}: {}", path.display(), lower_first(source.to_string()))
        }
        other => anyhow!("{}: {other}", path.display()),
    }
}

/// The files of the trace at `path`: the file, or the segments of its trace (a name that no
/// longer exists names the segments written after it).
pub fn open_series(path: &Path) -> Result<Series> {
    if std::fs::symlink_metadata(path).is_ok() {
        drop(open_file(path)?);
    }
    Series::find(path).map_err(|e| open_error(path, e))
}

/// The series of `path`, the file to start at for `from`, and the bytes from there.
fn start(path: &Path, from: ReadFrom, progress: &Progress) -> Result<(Series, usize)> {
    let series = open_series(path)?;
    // Said on stderr too, where a gate's log is read: the segments line says it on stdout.
    if !series.others.is_empty() {
        let pids: Vec<String> = series.others.iter().map(|o| o.pid.to_string()).collect();
        // A file given by its name is read with its own trace's segments; a name no file has
        // stands for the newest trace whose segments carry it.
        let which = match std::fs::symlink_metadata(path).is_ok() {
            true => "the one this file is a segment of",
            false => "the newest",
        };
        say!(
            "warning: {}: the name also stands for the segments of another run (pid {}), not \
             read: {which} (pid {}) is",
            path.display(),
            pids.join(", pid "),
            series.first().header.pid
        );
    }
    let start = window::choose(&series, from)?;
    progress.set_len(series.files[start..].iter().map(|f| f.len).sum());
    Ok((series, start))
}

/// Opens the file at `path` to read a trace. Only a regular file is read: a FIFO would block
/// (and a device never end), so the kind of file is checked before opening, and the open itself
/// cannot block (`O_NONBLOCK`; a name swapped for a FIFO in between is caught after).
fn open_file(path: &Path) -> Result<File> {
    let not_regular = || {
        anyhow!(
            "{}: not a regular file (a FIFO, device or socket); a trace is a file",
            path.display()
        )
    };
    let meta = std::fs::metadata(path)
        .map_err(|e| anyhow!("{}: {}", path.display(), lower_first(e.to_string())))?;
    if meta.is_dir() {
        return Err(anyhow!(
            "{}: is a directory, not a trace (report, diff and export --format parquet read a \
             directory of traces)",
            path.display()
        ));
    }
    if !meta.is_file() {
        return Err(not_regular());
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| anyhow!("{}: {}", path.display(), lower_first(e.to_string())))?;
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Err(not_regular());
    }
    Ok(file)
}

/// Reads every record of the trace at `path` into a fresh [`LiveState`].
#[cfg(test)]
pub fn load(path: &Path) -> Result<LoadedTrace> {
    let progress = Progress::new(path, "reading");
    read(
        path,
        ReadFrom::First,
        StepSource::Marks,
        &progress,
        |_, _| Flow::Apply,
    )
}

/// Reads the trace at `path` for analysis, from where `from` says: when it has no step marks
/// but a repeating allocation pattern, each occurrence of the pattern's anchor begins a step.
/// Read once ([`steps_found::read`]) unless the steps found in its first part turn out wrong.
pub fn load_with_steps(path: &Path, from: ReadFrom, growth: GrowthConfig) -> Result<LoadedTrace> {
    let progress = Progress::new(path, "reading");
    load_with_steps_observing(path, from, growth, &progress, |_| ()).map(|(trace, ())| trace)
}

/// What reading a trace for analysis gathers besides the state, event by event: the course of
/// live memory over time for a chart, say, or the Parquet export's rows.
pub trait Observer {
    /// Whether the state keeps each event's endings ([`LiveState::record_endings`]) for
    /// [`Observer::applied`] to read.
    const ENDINGS: bool = false;
    /// Called before `e` is applied to `state`.
    fn event(&mut self, _state: &LiveState, _e: &Event) {}
    /// Called right after `e` was applied to `state`, before any other record is.
    fn applied(&mut self, _state: &LiveState, _e: &Event) {}
    /// Called once after the last event was applied.
    fn finish(&mut self, _state: &LiveState) {}
}

impl Observer for () {}

/// A fresh state with steps from `source`, keeping what observer `O` reads.
fn fresh_state<O: Observer>(source: StepSource) -> LiveState {
    let mut state = LiveState::with_step_source(source);
    if O::ENDINGS {
        state.record_endings();
    }
    state
}

/// Applies to `state` the records `reader` has left while `go`, asked before each event, says
/// so (`true` when it stopped one), `observer` seeing each event applied before and after;
/// `after` is called after each record.
fn observe<O: Observer, S: RecordSource>(
    state: &mut LiveState,
    reader: &mut S,
    observer: &mut O,
    mut go: impl FnMut(&LiveState, &Event) -> bool,
    after: impl FnMut(&S),
) -> bool {
    // Both calls lend the observer, one at a time.
    let observer = RefCell::new(observer);
    state.replay_observing(
        reader,
        |state, e| {
            let go = go(state, e);
            if go {
                observer.borrow_mut().event(state, e);
            }
            go
        },
        |state, e| observer.borrow_mut().applied(state, e),
        after,
    )
}

/// [`load_with_steps`], with an observer (from `new`, given the header of the first file read)
/// that sees every event of the pass whose state is kept.
pub fn load_with_steps_observing<O: Observer>(
    path: &Path,
    from: ReadFrom,
    growth: GrowthConfig,
    progress: &Progress,
    new: impl Fn(&Header) -> O,
) -> Result<(LoadedTrace, O)> {
    let (trace, mut observer) = match steps_found::read(path, from, progress, &new)? {
        Found::Read(read) => *read,
        Found::ReadAgain(source) => {
            progress.restart("pass 2 (steps from the whole trace)");
            let mut observer = None;
            let state = fresh_state::<O>(source);
            let mut second = read_into(path, from, state, progress, |state, reader| {
                let o = observer.insert(new(reader.header()));
                observe(state, reader, o, |_, _| true, |r| progress.follow(r))
            })?;
            second.passes = 2;
            let observer = observer.ok_or_else(|| anyhow!("{}: not read", path.display()))?;
            (second, observer)
        }
    };
    observer.finish(&trace.state);
    reaches(path, &trace.state, from)?;
    Ok((LoadedTrace { growth, ..trace }, observer))
}

/// An error when the trace ends before the moment `--since` asked to read from: the answers
/// would be about a moment the trace never reached.
fn reaches(path: &Path, state: &LiveState, from: ReadFrom) -> Result<()> {
    let lasted = state.last_time_ns().saturating_sub(state.trace_start_ns());
    match from {
        ReadFrom::Step(_) if state.steps() == 0 => Err(anyhow!(
            "{}: the trace has no steps (no step marks, no repeating allocation pattern): read \
             from a time since its start instead (--since 3s); it lasts {}",
            path.display(),
            crate::render::units::duration(lasted)
        )),
        ReadFrom::Step(n) if state.steps() < n => Err(anyhow!(
            "{}: the trace ends before step {n} (it has {} steps)",
            path.display(),
            state.steps()
        )),
        ReadFrom::Time(t) if lasted < t => Err(anyhow!(
            "{}: the trace ends before {} after its first event (it lasts {})",
            path.display(),
            crate::render::units::duration(t),
            crate::render::units::duration(lasted)
        )),
        _ => Ok(()),
    }
}

/// Reads the trace at `path` from where `from` says, with steps from `source`, asking `visit`
/// before each event whether to apply it; reading stops at the first it refuses.
pub fn read(
    path: &Path,
    from: ReadFrom,
    source: StepSource,
    progress: &Progress,
    mut visit: impl FnMut(&LiveState, &Event) -> Flow,
) -> Result<LoadedTrace> {
    let state = LiveState::with_step_source(source);
    read_into(path, from, state, progress, |state, reader| {
        state.replay_visiting(
            reader,
            |state, e| visit(state, e) == Flow::Apply,
            |reader| progress.follow(reader),
        )
    })
}

/// Reads the trace at `path` from where `from` says into `state`, with `apply` (which applies
/// the records and says whether it stopped before the end).
fn read_into(
    path: &Path,
    from: ReadFrom,
    mut state: LiveState,
    progress: &Progress,
    apply: impl FnOnce(&mut LiveState, &mut SeriesReader) -> bool,
) -> Result<LoadedTrace> {
    let (series, start) = start(path, from, progress)?;
    let mut reader = series.read_from(start).map_err(|e| open_error(path, e))?;
    let stopped = apply(&mut state, &mut reader);
    progress.set(reader.offset());
    let read = Read {
        series: &series,
        start,
        from,
    };
    Ok(loaded(path, &read, reader, state, stopped))
}

/// Which files of a trace were read, and why from there.
pub(crate) struct Read<'a> {
    pub(crate) series: &'a Series,
    pub(crate) start: usize,
    pub(crate) from: ReadFrom,
}

/// What reading `path` (`read`) with `reader` into `state` gave; `stopped` when it stopped
/// early.
pub(crate) fn loaded(
    path: &Path,
    read: &Read<'_>,
    reader: SeriesReader,
    state: LiveState,
    stopped: bool,
) -> LoadedTrace {
    let ending = reader.ending().cloned().unwrap_or(Ending::NoEndRecord {
        offset: reader.offset(),
    });
    let files_read = reader.files_read().len();
    let segments = SegmentFacts::new(read.series, read.start, files_read, read.from, &state);
    LoadedTrace {
        path: path.to_path_buf(),
        header: reader.header().clone(),
        ending,
        records: reader.records(),
        chunks: reader.chunks(),
        skipped: reader.skipped(),
        bytes_read: reader.offset(),
        state,
        passes: 1,
        unread: reader.unread(),
        growth: GrowthConfig::default(),
        stopped: stopped.then(String::new),
        segments,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_messages_are_lowercased_but_names_are_not() {
        assert_eq!(
            lower_first("No such file or directory (os error 2)".into()),
            "no such file or directory (os error 2)"
        );
        assert_eq!(lower_first("GPU".into()), "GPU");
        assert_eq!(lower_first("".into()), "");
    }
}
