//! Damaged traces: a small real trace cut at every byte, a larger one mutated at random. Each
//! damaged copy is read in process (reader, live state, every analysis) and by `vramtrace report`:
//! no panic, no hang, and either a report or one `error:` line.

use std::io::Cursor;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::{Duration, Instant};

use vramtrace_collector::analysis::{analyze, GrowthConfig};
use vramtrace_collector::format::TraceReader;
use vramtrace_collector::live::LiveState;
use vramtrace_tests::traced::Workload;

use crate::{report, scratch, Rng, Row};

/// Random mutations tried.
const MUTATIONS: u64 = 3000;
/// Of those, how many also go through `vramtrace report` (a process each).
const MUTATIONS_BY_CLI: u64 = 300;

/// What reading a damaged copy gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Refused with an error (a damaged or cut header).
    Refused,
    /// Read: this many events, and whether to a clean end.
    Read {
        events: u64,
        complete: bool,
    },
    Panicked,
}

/// Reads `bytes` in process as `vramtrace report` would: header, records, live state, analyses.
fn read_in_process(bytes: &[u8]) -> (Outcome, Duration) {
    let start = Instant::now();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let Ok(mut reader) = TraceReader::new(Cursor::new(bytes)) else {
            return Outcome::Refused;
        };
        let mut state = LiveState::new();
        state.replay(&mut reader);
        let _ = analyze(&state, &GrowthConfig::default());
        Outcome::Read {
            events: state.events(),
            complete: reader.ending().is_some_and(|e| e.is_complete()),
        }
    }))
    .unwrap_or(Outcome::Panicked);
    (outcome, start.elapsed())
}

/// A trace of `workload`, written by the tracer under test.
fn real_trace(dir: &Path, workload: &str) -> Vec<u8> {
    let run = Workload::new(workload).run_traced(dir);
    let trace = run.single_trace();
    trace.assert_clean("exit");
    std::fs::read(&trace.path).unwrap()
}

fn truncation() -> Row {
    let dir = scratch("cut");
    let whole = real_trace(dir.path(), "wl_runtime");
    let (full, _) = read_in_process(&whole);
    let Outcome::Read {
        events: all,
        complete: true,
    } = full
    else {
        panic!("the whole trace does not read: {full:?}");
    };
    let cut_path = dir.path().join("cut.vtrace");
    let (mut survived, mut refused, mut first_read, mut last_events) = (0, 0, None, 0);
    let mut monotonic = true;
    for cut in 0..=whole.len() {
        let bytes = &whole[..cut];
        let (outcome, took) = read_in_process(bytes);
        std::fs::write(&cut_path, bytes).unwrap();
        let cli = report(&cut_path);
        let ok = match outcome {
            Outcome::Panicked => false,
            Outcome::Refused => {
                refused += 1;
                cli.is_err()
            }
            Outcome::Read { events, .. } => {
                first_read.get_or_insert(cut);
                monotonic &= events >= last_events;
                last_events = events;
                cli.is_ok_and(|j| j["events"]["applied"] == events)
            }
        };
        survived += u64::from(ok && took < Duration::from_secs(10));
    }
    let header = first_read.unwrap_or(whole.len());
    Row {
        what: format!(
            "a {}-byte trace ({all} events) cut at every byte",
            whole.len()
        ),
        trials: whole.len() as u64 + 1,
        survived,
        detail: format!(
            "no panic or hang; the {refused} cuts inside the header ({header} bytes) refused with \
             one error line, every longer cut reported{}; the whole trace: all {all} events",
            if monotonic {
                " with never fewer events than a shorter cut"
            } else {
                " (FEWER events than a shorter cut somewhere)"
            }
        ),
    }
}

/// Damages `bytes` in one of three ways: one bit flipped anywhere, a run of 1–16 random bytes
/// anywhere, or one bit flipped in the header.
fn mutate(rng: &mut Rng, bytes: &mut [u8], header: usize) {
    let len = bytes.len() as u64;
    match rng.below(4) {
        0 | 1 => {
            let at = rng.below(len) as usize;
            bytes[at] ^= 1 << rng.below(8);
        }
        2 => {
            let at = rng.below(len) as usize;
            let n = (1 + rng.below(16) as usize).min(bytes.len() - at);
            for b in &mut bytes[at..at + n] {
                *b = rng.next_u64() as u8;
            }
        }
        _ => {
            let at = rng.below(header as u64) as usize;
            bytes[at] ^= 1 << rng.below(8);
        }
    }
}

fn mutation() -> Row {
    let dir = scratch("mutate");
    let whole = real_trace(dir.path(), "wl_train");
    let Outcome::Read { events: all, .. } = read_in_process(&whole).0 else {
        panic!("the whole trace does not read");
    };
    // The header's length: the shortest prefix that reads.
    let header = (0..whole.len())
        .find(|&n| matches!(read_in_process(&whole[..n]).0, Outcome::Read { .. }))
        .unwrap_or(whole.len());
    let mut rng = Rng::new(0x5eed_0016);
    let path = dir.path().join("mutated.vtrace");
    let (mut survived, mut whole_reads, mut partial, mut refused) = (0, 0, 0, 0);
    let mut slowest = Duration::ZERO;
    for i in 0..MUTATIONS {
        let mut bytes = whole.clone();
        mutate(&mut rng, &mut bytes, header);
        let (outcome, took) = read_in_process(&bytes);
        slowest = slowest.max(took);
        let mut ok = outcome != Outcome::Panicked && took < Duration::from_secs(10);
        match outcome {
            Outcome::Read { events, .. } if events == all => whole_reads += 1,
            Outcome::Read { .. } => partial += 1,
            Outcome::Refused => refused += 1,
            Outcome::Panicked => {}
        }
        if i % (MUTATIONS / MUTATIONS_BY_CLI) == 0 {
            std::fs::write(&path, &bytes).unwrap();
            ok &= matches!(
                (report(&path), outcome),
                (Ok(_), Outcome::Read { .. }) | (Err(_), Outcome::Refused)
            );
        }
        survived += u64::from(ok);
    }
    Row {
        what: format!(
            "a {}-byte trace ({all} events) with random damage (a bit flipped, 1–16 bytes \
             overwritten, a header bit flipped)",
            whole.len()
        ),
        trials: MUTATIONS,
        survived,
        detail: format!(
            "no panic or hang (slowest read {slowest:.1?}); {whole_reads} read every event, \
             {partial} read up to the damage, {refused} refused (header damaged); \
             {MUTATIONS_BY_CLI} of them through `vramtrace report`: a report or one error line"
        ),
    }
}

pub fn trials() -> Vec<Row> {
    vec![truncation(), mutation()]
}
