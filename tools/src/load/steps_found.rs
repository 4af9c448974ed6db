//! Reading a trace for analysis once, though the steps of a trace without step marks are found
//! only by looking at all of it.
//!
//! Steps change what the state records as it goes (each object's step, the growth series), so a
//! trace without marks was read twice: once to find its repeating allocation, once more with
//! that allocation as the step boundary. A training loop's allocation pattern is there from its
//! first steps, though. The first part of the file (an eighth of it, or all of a small file) is
//! kept in memory as it is read; once the steps can be told from it (the pattern that begins
//! earliest, after a few looks agree), that part is applied again from memory with those steps,
//! and reading goes on. While the part read is all kept, this is done again if the steps shown
//! change (a program that marks its steps may repeat an allocation before its first mark). At
//! the end the whole trace must show the steps applied; if it does not (the program changed its
//! pattern later), the trace is read again as before: the answer is always the two passes'.

use std::cell::Cell;
use std::fs::File;
use std::io::{BufReader, Cursor, Read};
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use vramtrace_collector::format::TraceReader;
use vramtrace_collector::live::{LiveState, StepPattern, StepSource};

use super::{loaded, open_error, open_file, LoadedTrace, Observer, Progress};

/// Most of the file kept in memory to be applied again.
const MAX_KEPT: u64 = 64 << 20;
/// What is kept of a file at least, when it is larger than an eighth of it.
const MIN_KEPT: u64 = 4 << 20;
/// Steps a pattern must have shown before it is trusted to be the trace's.
const MIN_STEPS: u64 = 8;
/// Looks at the steps, as chunks begin, that must agree before they are applied.
const LOOKS: usize = 3;
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

/// The steps the records applied to `state` show, when it has no marks: its repeating
/// allocation, if one repeats.
fn steps_of(state: &LiveState) -> Option<StepSource> {
    if state.marks() > 0 {
        return None;
    }
    state.step_pattern().map(|p| p.source())
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

/// Reads the trace at `path` once, finding its steps as it goes; an observer (from `new`) sees
/// every event applied to the state that is kept.
pub fn read<O: Observer>(
    path: &Path,
    progress: &Progress,
    new: &impl Fn() -> O,
) -> Result<Found<O>> {
    let file = open_file(path)?;
    let len = file.metadata().map_or(0, |m| m.len());
    // A small file is all kept: applying it again from memory costs little.
    let keep = (len / 8).max(len.min(MIN_KEPT)).min(MAX_KEPT);
    let kept = Arc::new(Mutex::new(Vec::new()));
    let keeping = Keeping {
        file,
        kept: Arc::clone(&kept),
        cap: usize::try_from(keep).unwrap_or(usize::MAX),
    };
    let mut reader = TraceReader::new(BufReader::with_capacity(1 << 20, keeping))
        .map_err(|e| open_error(path, e))?
        .read_ahead();
    let (mut state, mut observer) = (LiveState::with_step_source(StepSource::Marks), new());
    // Where the chunk being read ends, and where it ended when last looked at.
    let (offset, looked) = (Cell::new(0u64), Cell::new(0u64));
    let mut looks = Looks::default();
    for _ in 0..MAX_RESTARTS {
        // The steps the part read shows, when they are not those applied, and the event next.
        let mut switch = None;
        state.replay_visiting(
            &mut reader,
            |state, e| {
                // Looked at as each chunk begins, while the part read is all kept.
                let at = offset.get();
                let look = at != looked.replace(at) && at <= keep && kept_len(&kept) >= at;
                match look.then(|| looks.shown(state)).flatten() {
                    Some(shown) if shown != *state.step_source() => {
                        switch = Some((shown, e.clone()));
                        false
                    }
                    _ => {
                        observer.event(state, e);
                        true
                    }
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
        if let Some(again) = first_part.and_then(|k| again(&k, source, state.events(), new)) {
            (state, observer) = again;
        }
        observer.event(&state, &next);
        state.apply_event(&next);
    }
    state.replay_visiting(
        &mut reader,
        |state, e| {
            observer.event(state, e);
            true
        },
        |reader| progress.follow(reader),
    );
    drop(kept.lock().map(|mut k| std::mem::take(&mut *k)));
    progress.set(reader.offset());
    let whole = steps_of(&state).unwrap_or(StepSource::Marks);
    Ok(if whole == *state.step_source() {
        Found::Read(Box::new((loaded(path, reader, state, false), observer)))
    } else {
        Found::ReadAgain(whole)
    })
}

/// What the looks at the steps have seen: the pattern that begins earliest (a look taken in the
/// middle of a step can name an allocation later in the step), and how many looks since it
/// changed.
#[derive(Default)]
struct Looks {
    earliest: Option<StepPattern>,
    unchanged: usize,
}

impl Looks {
    /// The steps the records applied to `state` show, once they can be trusted.
    fn shown(&mut self, state: &LiveState) -> Option<StepSource> {
        if state.marks() > 0 {
            return Some(StepSource::Marks);
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
    source: StepSource,
    events: u64,
    new: &impl Fn() -> O,
) -> Option<(LiveState, O)> {
    let mut reader = TraceReader::new(Cursor::new(bytes)).ok()?;
    let (mut state, mut observer) = (LiveState::with_step_source(source), new());
    let stopped = state.replay_visiting(
        &mut reader,
        |s, e| {
            let more = s.events() < events;
            if more {
                observer.event(s, e);
            }
            more
        },
        |_| {},
    );
    (stopped && state.events() == events).then_some((state, observer))
}
