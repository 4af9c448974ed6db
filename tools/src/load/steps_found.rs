//! Reading a trace for analysis once, though the steps of a trace without step marks are found
//! only by looking at all of it.
//!
//! Steps change what the state records as it goes (each object's step, the growth series), so a
//! trace without marks was read twice: once to find its repeating allocation, once more with
//! that allocation as the step boundary. A training loop's allocation pattern is there from its
//! first steps, though. The first part of the file (an eighth of it, or all of a small file) is
//! kept in memory as it is read; once the steps can be told from it (the pattern that begins
//! earliest, after a few looks agree), that part is applied again from memory with those steps,
//! and reading goes on: past the boundaries found, each occurrence of the pattern's anchor
//! begins a step. A program that marks its steps may repeat an allocation before its first mark:
//! a mark seen while the part read is all kept applies it again with marks. At the end the steps
//! applied must be exactly those the whole trace shows (marks, or every occurrence of the anchor
//! of its pattern); if they are not (the program changed its pattern later), the trace is read
//! again with those: the answer is always the two passes'.

use std::cell::Cell;
use std::fs::File;
use std::io::{BufReader, Cursor, Read};
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use vramtrace_collector::format::{Header, SeriesReader, TraceReader};
use vramtrace_collector::live::{LiveState, StepPattern, StepSource};

use super::{
    fresh_state, loaded, observe, open_error, start, LoadedTrace, Observer, Progress, ReadFrom,
};

/// Most of the file kept in memory to be applied again.
const MAX_KEPT: u64 = 64 << 20;
/// What is kept of a file at least, when it is larger than an eighth of it.
const MIN_KEPT: u64 = 4 << 20;
/// Steps a pattern must have shown before it is trusted to be the trace's.
const MIN_STEPS: u64 = 8;
/// Looks at the steps, as chunks begin, that must agree before they are applied.
const LOOKS: usize = 3;
/// Looks at the steps come at each chunk of the first [`EVERY_CHUNK_BYTES`] read, then an eighth
/// of what was read apart, at least [`MIN_LOOK_BYTES`] and at most an eighth of the part kept.
/// A look judges up to 2^17 tokens: past the first few hundred kilobytes it takes tens of
/// milliseconds (reading a megabyte takes about as long), and looks at every chunk of a first
/// part without a period cost seconds; eight in the part kept still see a period three times
/// over before the part is applied again with it.
const EVERY_CHUNK_BYTES: u64 = 256 << 10;
const LOOK_GROWTH: u64 = 8;
const MIN_LOOK_BYTES: u64 = 1 << 20;
const LOOKS_IN_KEPT: u64 = 8;
/// Times the part kept is applied again at most (each time the steps it shows change: a program
/// that marks its steps only after a while shows a repeating allocation before its first mark).
const MAX_RESTARTS: usize = 3;

/// What reading found.
pub enum Found<O> {
    /// The trace, read once (its steps are the whole trace's), and what the observer saw.
    Read(Box<(LoadedTrace, O)>),
    /// The steps are these, and the first reading did not apply them: read again.
    ReadAgain(StepSource),
}

/// A file read through, its first `cap` bytes kept.
struct Keeping {
    file: File,
    kept: Arc<Mutex<Vec<u8>>>,
    cap: usize,
}

impl Read for Keeping {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read(buf)?;
        if let Ok(mut kept) = self.kept.lock() {
            let room = self.cap.saturating_sub(kept.len());
            kept.extend_from_slice(&buf[..n.min(room)]);
        }
        Ok(n)
    }
}

/// Reads the trace at `path` once from where `from` says, finding its steps as it goes; an
/// observer (from `new`) sees every event applied to the state that is kept.
pub fn read<O: Observer>(
    path: &Path,
    from: ReadFrom,
    progress: &Progress,
    new: &impl Fn(&Header) -> O,
) -> Result<Found<O>> {
    read_keeping(path, from, None, progress, new)
}

/// [`read`], keeping the first `keep` bytes of the first file read (by default an eighth of
/// the bytes to read, all of a small file: applying it again from memory costs little).
fn read_keeping<O: Observer>(
    path: &Path,
    from: ReadFrom,
    keep: Option<u64>,
    progress: &Progress,
    new: &impl Fn(&Header) -> O,
) -> Result<Found<O>> {
    let (series, first) = start(path, from, progress)?;
    let len: u64 = series.files[first..].iter().map(|f| f.len).sum();
    let keep = keep.unwrap_or((len / 8).max(len.min(MIN_KEPT)).min(MAX_KEPT));
    let file = File::open(&series.files[first].path).map_err(|e| {
        anyhow::anyhow!(
            "{}: {}",
            series.files[first].path.display(),
            super::lower_first(e.to_string())
        )
    })?;
    let kept = Arc::new(Mutex::new(Vec::new()));
    let keeping = Keeping {
        file,
        kept: Arc::clone(&kept),
        cap: usize::try_from(keep).unwrap_or(usize::MAX),
    };
    let boxed: Box<dyn Read + Send> = Box::new(BufReader::with_capacity(1 << 20, keeping));
    let head = TraceReader::new(boxed)
        .map_err(|e| open_error(path, e))?
        .read_ahead();
    let mut reader = SeriesReader::new(head, series.files[first..].to_vec());
    let header = reader.header().clone();
    let (mut state, mut observer) = (fresh_state::<O>(StepSource::Marks), new(&header));
    // Where the chunk being read ends, and where it ended when last looked at.
    let (offset, looked) = (Cell::new(0u64), Cell::new(0u64));
    let mut looks = Looks::default();
    for _ in 0..MAX_RESTARTS {
        // The steps the part read shows, when they are not those applied, and the event next.
        let mut switch = None;
        observe(
            &mut state,
            &mut reader,
            &mut observer,
            |state, e| {
                // Looked at as each chunk begins, while the part read is all kept.
                let at = offset.get();
                let look = at != looked.replace(at)
                    && at <= keep
                    && kept_len(&kept) >= at
                    && looks.due(at, keep);
                match look.then(|| looks.shown(state)).flatten() {
                    Some(shown) if shown != *state.step_source() => {
                        switch = Some((shown, e.clone()));
                        false
                    }
                    _ => true,
                }
            },
            |reader| {
                offset.set(reader.offset());
                progress.follow(reader);
            },
        );
        let Some((source, next)) = switch else {
            break;
        };
        let first_part = kept.lock().ok();
        let events = state.events();
        if let Some(again) = first_part.and_then(|k| again(&k, &header, source, events, new)) {
            (state, observer) = again;
        }
        observer.event(&state, &next);
        state.apply_event(&next);
        observer.applied(&state, &next);
    }
    observe(
        &mut state,
        &mut reader,
        &mut observer,
        |_, _| true,
        |r| progress.follow(r),
    );
    drop(kept.lock().map(|mut k| std::mem::take(&mut *k)));
    progress.set(reader.offset());
    // The steps applied must be exactly the whole trace's: its anchor's every occurrence.
    let read = super::Read {
        series: &series,
        start: first,
        from,
    };
    Ok(match state.unapplied_steps() {
        None => Found::Read(Box::new((
            loaded(path, &read, reader, state, false),
            observer,
        ))),
        Some(whole) => Found::ReadAgain(whole),
    })
}

/// What the looks at the steps have seen: the pattern that begins earliest (a look taken in the
/// middle of a step can name an allocation later in the step), and how many looks since it
/// changed.
#[derive(Default)]
struct Looks {
    earliest: Option<StepPattern>,
    unchanged: usize,
    /// Bytes read before the next look.
    next: u64,
}

impl Looks {
    /// Whether to look now, `read` bytes of the file read and `keep` to be kept; if so, when to
    /// look next.
    fn due(&mut self, read: u64, keep: u64) -> bool {
        let due = read >= self.next;
        if due && read >= EVERY_CHUNK_BYTES {
            let gap = (read / LOOK_GROWTH).max(MIN_LOOK_BYTES);
            self.next = read + gap.min(keep / LOOKS_IN_KEPT);
        }
        due
    }

    /// The steps the records applied to `state` show, once they can be trusted.
    fn shown(&mut self, state: &LiveState) -> Option<StepSource> {
        // Step marks win; iteration marks that began steps before them do not count.
        if state.marks() > 0 {
            let iterations_applied = state.iteration_steps() > 0;
            return Some(match state.step_source() {
                StepSource::StepMarks => StepSource::StepMarks,
                _ if iterations_applied => StepSource::StepMarks,
                _ => StepSource::Marks,
            });
        }
        if state.iterations() > 0 {
            return Some(StepSource::Marks);
        }
        // Steps found are applied: they carry on, and the end checks them.
        if let StepSource::Pattern(_) = state.step_source() {
            return None;
        }
        match state.step_pattern().filter(|p| p.steps >= MIN_STEPS) {
            Some(p)
                if self
                    .earliest
                    .as_ref()
                    .is_none_or(|q| p.first_seq < q.first_seq) =>
            {
                (self.earliest, self.unchanged) = (Some(p), 0);
            }
            Some(_) => self.unchanged += 1,
            None => {}
        }
        self.earliest
            .as_ref()
            .filter(|_| self.unchanged >= LOOKS)
            .map(|p| p.source())
    }
}

/// Bytes kept so far.
fn kept_len(kept: &Mutex<Vec<u8>>) -> u64 {
    kept.lock().map_or(0, |k| k.len() as u64)
}

/// The first `events` events of the trace whose first part is `bytes` (and the records before
/// them) applied with steps from `source`, and an observer (from `new`) that saw them; `None`
/// if they are not all there.
fn again<O: Observer>(
    bytes: &[u8],
    header: &Header,
    source: StepSource,
    events: u64,
    new: &impl Fn(&Header) -> O,
) -> Option<(LiveState, O)> {
    let mut reader = TraceReader::new(Cursor::new(bytes)).ok()?;
    let (mut state, mut observer) = (fresh_state::<O>(source), new(header));
    let stopped = observe(
        &mut state,
        &mut reader,
        &mut observer,
        |s, _| s.events() < events,
        |_| {},
    );
    (stopped && state.events() == events).then_some((state, observer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;
    use vramtrace_collector::analysis::{analyze, GrowthConfig};
    use vramtrace_collector::event::{Api, Event, MemKind, Op};
    use vramtrace_collector::format::{Header, Record, TraceWriter};

    const MIB: u64 = 1 << 20;

    /// A training loop without step marks, in small chunks: each step allocates its step buffer
    /// (3 MiB at `site`) first, then a temporary, and leaks 1 MiB; the buffer and the temporary
    /// are freed by the step's end. `phases` gives each phase's step site and steps.
    fn training(path: &Path, phases: &[(u64, u64)]) {
        let file = File::create(path).unwrap();
        let mut w = TraceWriter::new(file, &Header::default())
            .unwrap()
            .with_chunk_bytes(1024);
        let mut seq = 0;
        let mut write = |api: Api, op: Op, caller: u64| {
            seq += 1;
            let e = Event {
                time_ns: seq * 1000,
                thread: 1,
                context: 0xc7,
                caller,
                ..Event::new(seq, api, op)
            };
            w.write(&Record::Event(e)).unwrap();
        };
        let alloc = |ptr, size| Op::Alloc {
            kind: MemKind::Device,
            ptr,
            size,
            stream: 0,
            pool: 0,
            flags: 0,
            pitch: 0,
        };
        let mut leak = 0x5000_0000_0000;
        for &(site, steps) in phases {
            for _ in 0..steps {
                let (buffer, temporary) = (0x7000_0000_0000, 0x7100_0000_0000);
                write(Api::CudaMalloc, alloc(buffer, 3 * MIB), site);
                write(Api::CudaMalloc, alloc(temporary, 4096), site + 8);
                leak += MIB;
                write(Api::CudaMalloc, alloc(leak, MIB), site + 0x200);
                for ptr in [temporary, buffer] {
                    write(Api::CudaFree, Op::Free { ptr, stream: 0 }, 0x40_0400);
                }
            }
        }
        w.finish().unwrap();
    }

    /// Notes whether the events it saw were applied with steps from a pattern.
    struct Applied(Rc<Cell<bool>>);

    impl Observer for Applied {
        fn event(&mut self, state: &LiveState, _: &Event) {
            if let StepSource::Pattern(_) = state.step_source() {
                self.0.set(true);
            }
        }
    }

    /// Reads `path` once, keeping its first eighth; and whether steps found there were applied.
    fn read_an_eighth(path: &Path) -> (Found<Applied>, bool) {
        let len = std::fs::metadata(path).unwrap().len();
        let applied = Rc::new(Cell::new(false));
        let new = |_: &Header| Applied(Rc::clone(&applied));
        let progress = Progress::new(path, "reading");
        let found = read_keeping(path, ReadFrom::First, Some(len / 8), &progress, &new).unwrap();
        (found, applied.get())
    }

    /// The trace read twice: once for its steps, once more with them.
    fn read_twice(path: &Path) -> LoadedTrace {
        let first = super::super::load(path).unwrap().state;
        let source = first.step_pattern().expect("a pattern").source();
        let progress = Progress::new(path, "reading");
        let apply = |_: &LiveState, _: &Event| super::super::Flow::Apply;
        super::super::read(path, ReadFrom::First, source, &progress, apply).unwrap()
    }

    fn analyzed(state: &LiveState) -> serde_json::Value {
        serde_json::to_value(analyze(state, &GrowthConfig::default())).unwrap()
    }

    /// Steps found in the first eighth of a 4,000-step trace carry on through the other seven:
    /// read once, it has the steps and analyses that reading it twice gives.
    #[test]
    fn steps_found_in_the_part_kept_carry_on_through_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("loop.vtrace");
        training(&path, &[(0x40_0100, 4000)]);
        let (Found::Read(once), true) = read_an_eighth(&path) else {
            panic!("read twice");
        };
        let (once, _) = *once;
        let twice = read_twice(&path);
        assert_eq!(once.passes, 1);
        assert_eq!((once.state.steps(), twice.state.steps()), (4000, 4000));
        let pattern = once.state.step_pattern().unwrap();
        assert_eq!(
            (pattern.steps, pattern.first_seq, pattern.last_seq),
            (4000, 1, 19996)
        );
        assert_eq!(pattern.anchor.bytes, 3 * MIB);
        assert_eq!(Some(pattern), twice.state.step_pattern());
        assert_eq!(analyzed(&once.state), analyzed(&twice.state));
    }

    /// A trace whose step buffer changes after the part kept: the steps found there do not carry
    /// on to the end, and the trace is read again with the whole trace's.
    #[test]
    fn steps_the_rest_departs_from_are_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("changed.vtrace");
        training(&path, &[(0x40_0100, 1000), (0x40_0180, 3000)]);
        let (Found::ReadAgain(StepSource::Pattern(whole)), true) = read_an_eighth(&path) else {
            panic!("read once, or the first part's steps not applied");
        };
        assert_eq!((whole.steps, whole.first_seq), (3000, 5001));
        assert_eq!(
            Some(&*whole),
            read_twice(&path).state.step_pattern().as_ref()
        );
    }
}
