//! The tracer's own profile (`VRAMTRACE_SELF_PROFILE=1`): where a traced call's time goes, stage
//! by stage, and where the writer thread's goes, printed as one table on stderr when the trace
//! ends.
//!
//! Why built in: the machines the tracer matters on (GPU hosts) have no `perf`, `gdb` or
//! `strace`, and the cost of a hook is a few hundred nanoseconds spread over stages that no
//! sampling profiler would separate at that scale anyway.
//!
//! How: a hook made while profiling reads the clock (the TSC where invariant, see
//! [`crate::capture::clock`]) at each stage boundary and adds the difference to its thread's own
//! row of counters. Rows are a fixed static table claimed once per thread (no allocation, no
//! lock); a row is written only by its thread, with plain loads and stores on atomics, and read
//! by the printer. Threads beyond the table share its last row, which takes atomic additions.
//! The writer thread has a row of its own too.
//!
//! Off (the default), the hooks pay one load and one predictable branch per call: the profiled
//! and the plain hook paths are separate copies of the same generic code ([`Timer`]), chosen
//! once at the top of [`crate::hooks::Call::run`].

use std::cell::Cell;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crate::capture::clock;

/// The stages timed. Hook stages first, then the writer's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Stage {
    /// The session and thread looked up, the call classified (traced, merged, passed through).
    Enter,
    /// A sequence number taken and the ring slot claimed (the wait when the ring is full).
    Claim,
    /// The real function.
    Real,
    /// The current device and context asked of the driver.
    Context,
    /// The native stack walked (one lap per walk, the remembered-walk lookup before it
    /// included).
    Native,
    /// A native stack this thread remembered: found without walking.
    Remembered,
    /// The Python stack read.
    Python,
    /// Stacks interned (looked up, or defined on first sight).
    Intern,
    /// The event written into its slot and published.
    Fill,
    /// The device-memory sample (when due) and the way out of the hook.
    Leave,
    /// A hook inside the real function of a traced call (a driver call merged into its runtime
    /// call): its own time, which the outer call's real function also contains.
    Nested,
    /// Writer: an event taken out of the ring.
    Take,
    /// Writer: stack and module definitions written on first sight.
    Define,
    /// Writer: the event encoded into the chunk.
    Encode,
    /// Writer: a full chunk compressed.
    Compress,
    /// Writer: a compressed chunk written to the file.
    Write,
    /// Writer: waiting for events (parked).
    Idle,
}

const STAGES: usize = 17;
const HOOK_STAGES: [Stage; 11] = [
    Stage::Enter,
    Stage::Claim,
    Stage::Real,
    Stage::Context,
    Stage::Native,
    Stage::Remembered,
    Stage::Python,
    Stage::Intern,
    Stage::Fill,
    Stage::Leave,
    Stage::Nested,
];
const WRITER_STAGES: [Stage; 5] = [
    Stage::Take,
    Stage::Define,
    Stage::Encode,
    Stage::Compress,
    Stage::Write,
];

impl Stage {
    fn label(self) -> &'static str {
        match self {
            Stage::Enter => "enter (session, thread, classify)",
            Stage::Claim => "number + claim ring slot (waits when full)",
            Stage::Real => "the real function",
            Stage::Context => "current device and context",
            Stage::Native => "native stack walk",
            Stage::Remembered => "native stack remembered (no walk)",
            Stage::Python => "Python stack read",
            Stage::Intern => "stack interning",
            Stage::Fill => "event into slot + publish",
            Stage::Leave => "device-memory sample + leave",
            Stage::Nested => "nested hook (merged driver call)",
            Stage::Take => "take from ring",
            Stage::Define => "stack/module definitions",
            Stage::Encode => "encode into chunk",
            Stage::Compress => "compress chunk",
            Stage::Write => "write chunk to file",
            Stage::Idle => "idle (parked)",
        }
    }
}

/// One thread's counters: clock ticks and count per stage, and traced calls.
#[repr(align(64))]
struct Row {
    ticks: [AtomicU64; STAGES],
    counts: [AtomicU64; STAGES],
    /// Hook laps longer than [`SLOW_TICKS`], kept apart (see [`add`]).
    slow_ticks: [AtomicU64; STAGES],
    slow_counts: [AtomicU64; STAGES],
    calls: AtomicU64,
}

impl Row {
    const fn new() -> Row {
        Row {
            ticks: [const { AtomicU64::new(0) }; STAGES],
            counts: [const { AtomicU64::new(0) }; STAGES],
            slow_ticks: [const { AtomicU64::new(0) }; STAGES],
            slow_counts: [const { AtomicU64::new(0) }; STAGES],
            calls: AtomicU64::new(0),
        }
    }
}

/// A lap longer than this (clock units: TSC ticks, about 25–50 µs at 2–4 GHz, else nanoseconds)
/// is the thread being preempted or waiting for a full ring, not the work of the stage: such laps
/// are counted apart, so that on a busy machine the averages still describe the work. (Not for
/// compressing and writing a chunk, which take this long by themselves, nor for idling.)
const SLOW_TICKS: u64 = 100_000;

/// Whether `stage`'s long laps are counted apart.
const fn splits(stage: Stage) -> bool {
    !matches!(stage, Stage::Compress | Stage::Write | Stage::Idle)
}

/// Rows for this many threads; the last is shared by any beyond.
const ROWS: usize = 64;
static TABLE: [Row; ROWS] = [const { Row::new() }; ROWS];
static NEXT_ROW: AtomicU32 = AtomicU32::new(0);
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Turns profiling on (from the settings, before any hook runs).
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Whether hooks are profiled.
#[inline(always)]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// A row index for a new thread (1-based; 0 in the thread state means "none yet").
fn claim_row() -> u32 {
    let i = NEXT_ROW.fetch_add(1, Ordering::Relaxed);
    i.min(ROWS as u32 - 1) + 1
}

#[inline]
fn add(row: usize, stage: Stage, ticks: u64) {
    add_laps(row, stage, ticks, 1);
}

/// `ticks` more in `stage`, as `laps` more laps (0: the time continues the stage's last lap).
#[inline]
fn add_laps(row: usize, stage: Stage, ticks: u64, laps: u64) {
    let r = &TABLE[row];
    let s = stage as usize;
    let (t, c) = if ticks > SLOW_TICKS && splits(stage) {
        (&r.slow_ticks[s], &r.slow_counts[s])
    } else {
        (&r.ticks[s], &r.counts[s])
    };
    if row == ROWS - 1 {
        t.fetch_add(ticks, Ordering::Relaxed);
        c.fetch_add(laps, Ordering::Relaxed);
    } else {
        // Only this thread writes its row.
        t.store(t.load(Ordering::Relaxed) + ticks, Ordering::Relaxed);
        c.store(c.load(Ordering::Relaxed) + laps, Ordering::Relaxed);
    }
}

/// Stage timing on a hook's path: [`Off`] compiles to nothing, [`On`] reads the clock.
pub trait Timer {
    /// Starts timing a call on the calling thread.
    fn start() -> Self;
    /// Restarts the lap without counting the time since the last one (it belongs elsewhere).
    fn skip(&mut self);
    /// The time since the last lap (or the start) was spent in `stage`.
    fn lap(&mut self, stage: Stage);
    /// The time since the last lap still belongs to `stage`'s last lap (not counted as one more).
    fn extend(&mut self, stage: Stage);
    /// The call was traced (counted once per call).
    fn traced(&self);
}

/// No profiling.
pub struct Off;

impl Timer for Off {
    #[inline(always)]
    fn start() -> Off {
        Off
    }
    #[inline(always)]
    fn skip(&mut self) {}
    #[inline(always)]
    fn lap(&mut self, _: Stage) {}
    #[inline(always)]
    fn extend(&mut self, _: Stage) {}
    #[inline(always)]
    fn traced(&self) {}
}

/// Profiling: the clock read at every lap.
pub struct On {
    row: usize,
    last: u64,
}

impl On {
    fn start_on(row: &Cell<u32>) -> On {
        On {
            row: On::row(row),
            last: clock::now(),
        }
    }

    /// The row of the calling thread, kept in a word of its own state (`row`): claimed on first
    /// use.
    fn row(row: &Cell<u32>) -> usize {
        let mut r = row.get();
        if r == 0 {
            r = claim_row();
            row.set(r);
        }
        r as usize - 1
    }
}

impl Timer for On {
    #[inline]
    fn start() -> On {
        On::start_on(crate::capture::thread::current().profile_row())
    }
    #[inline]
    fn skip(&mut self) {
        self.last = clock::now();
    }
    #[inline]
    fn lap(&mut self, stage: Stage) {
        let now = clock::now();
        add(self.row, stage, now.wrapping_sub(self.last));
        self.last = now;
    }
    #[inline]
    fn extend(&mut self, stage: Stage) {
        let now = clock::now();
        add_laps(self.row, stage, now.wrapping_sub(self.last), 0);
        self.last = now;
    }
    #[inline]
    fn traced(&self) {
        let c = &TABLE[self.row].calls;
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// The writer thread's stopwatch (a plain branch on [`enabled`]: the writer's loop is not where a
/// branch matters).
pub struct WriterTimer(Option<On>);

impl WriterTimer {
    pub fn new() -> WriterTimer {
        WriterTimer(enabled().then(|| On::start_on(&Cell::new(0))))
    }
    /// Restarts the lap without counting (time that belongs to no stage).
    #[inline]
    pub fn reset(&mut self) {
        if let Some(w) = self.0.as_mut() {
            w.last = clock::now();
        }
    }
    /// Counts the time since the last lap in `stage`; returns it (0 when off).
    #[inline]
    pub fn lap(&mut self, stage: Stage) -> u64 {
        match self.0.as_mut() {
            Some(w) => {
                let now = clock::now();
                let ticks = now.wrapping_sub(w.last);
                add(w.row, stage, ticks);
                w.last = now;
                ticks
            }
            None => 0,
        }
    }

    /// [`WriterTimer::lap`] for a span that wrote chunks out: `written` of its ticks went to the
    /// file, the rest to compressing.
    pub fn lap_flush(&mut self, written: u64) {
        let ticks = self.lap(Stage::Compress);
        self.moved(Stage::Compress, Stage::Write, written.min(ticks));
    }
    /// Counts `n` events through the writer.
    #[inline]
    pub fn events(&self, n: u64) {
        if let Some(w) = self.0.as_ref() {
            TABLE[w.row].calls.fetch_add(n, Ordering::Relaxed);
        }
    }
    /// Moves `ticks` already counted in `from` (a lap that covered both) to `to`.
    pub fn moved(&self, from: Stage, to: Stage, ticks: u64) {
        if let Some(w) = self.0.as_ref() {
            let r = &TABLE[w.row];
            r.ticks[from as usize].fetch_sub(ticks, Ordering::Relaxed);
            r.ticks[to as usize].fetch_add(ticks, Ordering::Relaxed);
            r.counts[to as usize].fetch_add(1, Ordering::Relaxed);
        }
    }
    pub fn row(&self) -> Option<usize> {
        self.0.as_ref().map(|w| w.row)
    }
}

impl Default for WriterTimer {
    fn default() -> Self {
        WriterTimer::new()
    }
}

/// Nanoseconds per clock tick (1 when the clock is nanoseconds).
fn ns_per_tick() -> f64 {
    clock::raw_span(std::time::Duration::from_secs(1))
        .filter(|&t| t > 0)
        .map_or(1.0, |t| 1e9 / t as f64)
}

/// What one lap costs (two clock reads and the bookkeeping), in ticks: measured on a scratch row
/// so the table can say how much of each stage is the stopwatch itself.
fn lap_cost_ticks() -> f64 {
    let mut w = On {
        row: ROWS - 1,
        last: clock::now(),
    };
    let start = clock::now();
    const N: u64 = 20_000;
    for _ in 0..N {
        w.lap(Stage::Idle);
    }
    let spent = clock::now().wrapping_sub(start);
    // Undo what the scratch laps added to the shared row.
    let r = &TABLE[ROWS - 1];
    r.ticks[Stage::Idle as usize].fetch_sub(
        r.ticks[Stage::Idle as usize]
            .load(Ordering::Relaxed)
            .min(spent),
        Ordering::Relaxed,
    );
    r.counts[Stage::Idle as usize].fetch_sub(N, Ordering::Relaxed);
    spent as f64 / N as f64
}

/// Sums over the given rows, per stage.
#[derive(Default)]
struct Sums {
    ticks: [u64; STAGES],
    counts: [u64; STAGES],
    slow_ticks: [u64; STAGES],
    slow_counts: [u64; STAGES],
    calls: u64,
}

fn sums(rows: impl Iterator<Item = usize>) -> Sums {
    let mut out = Sums::default();
    for i in rows {
        let r = &TABLE[i];
        for s in 0..STAGES {
            out.ticks[s] += r.ticks[s].load(Ordering::Relaxed);
            out.counts[s] += r.counts[s].load(Ordering::Relaxed);
            out.slow_ticks[s] += r.slow_ticks[s].load(Ordering::Relaxed);
            out.slow_counts[s] += r.slow_counts[s].load(Ordering::Relaxed);
        }
        out.calls += r.calls.load(Ordering::Relaxed);
    }
    out
}

/// The profile as a table (what [`print()`] writes), given the writer's row and how many events
/// were dropped.
pub fn report(writer_row: Option<usize>, dropped: u64) -> String {
    let ns = ns_per_tick();
    let lap_ns = lap_cost_ticks() * ns;
    let used = (NEXT_ROW.load(Ordering::Relaxed) as usize).min(ROWS);
    let hooks = sums((0..used).filter(|&i| Some(i) != writer_row));
    let (t, c, calls) = (&hooks.ticks, &hooks.counts, hooks.calls);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "vramtrace self-profile: {calls} traced calls on {} thread(s); ns per traced call, each \
         stage's laps including about {lap_ns:.0} ns of the stopwatch",
        used.saturating_sub(writer_row.is_some() as usize)
    );
    let per_call = |ticks: u64| {
        if calls == 0 {
            0.0
        } else {
            ticks as f64 * ns / calls as f64
        }
    };
    let hook_total: u64 = HOOK_STAGES
        .iter()
        .filter(|&&s| s != Stage::Real)
        .map(|&s| t[s as usize])
        .sum();
    let _ = writeln!(
        out,
        "  {:<46} {:>12} {:>10} {:>7} {:>11} {:>10}",
        "hook stage", "laps", "ns/call", "% hook", "slow laps", "slow ms"
    );
    for s in HOOK_STAGES {
        let i = s as usize;
        // The outer call's real function contains its nested hooks: shown without them.
        let ticks = if s == Stage::Real {
            t[i].saturating_sub(t[Stage::Nested as usize])
        } else {
            t[i]
        };
        let share = if s == Stage::Real || hook_total == 0 {
            String::from("-")
        } else {
            format!("{:.1}", 100.0 * ticks as f64 / hook_total as f64)
        };
        let _ = writeln!(
            out,
            "  {:<46} {:>12} {:>10.1} {:>7} {:>11} {:>10.1}",
            s.label(),
            c[i],
            per_call(ticks),
            share,
            hooks.slow_counts[i],
            hooks.slow_ticks[i] as f64 * ns / 1e6
        );
    }
    let _ = writeln!(
        out,
        "  {:<46} {:>12} {:>10.1} {:>7}",
        "hook total (all but the real function)",
        calls,
        per_call(hook_total),
        "100.0"
    );
    let _ = writeln!(
        out,
        "  (laps over {:.0} µs are counted apart as slow: the thread was preempted, or waited \
         for a full ring in the claim stage; the writer's busy time below leaves them out too)",
        SLOW_TICKS as f64 * ns / 1e3
    );
    if let Some(w) = writer_row {
        let writer = sums(std::iter::once(w));
        let (wt, wc, events) = (&writer.ticks, &writer.counts, writer.calls);
        let busy: u64 = WRITER_STAGES.iter().map(|&s| wt[s as usize]).sum();
        let per_event = |ticks: u64| {
            if events == 0 {
                0.0
            } else {
                ticks as f64 * ns / events as f64
            }
        };
        let _ = writeln!(
            out,
            "  {:<46} {:>12} {:>10} {:>7} {:>11} {:>10}",
            "writer stage", "laps", "ns/event", "% busy", "slow laps", "slow ms"
        );
        for s in WRITER_STAGES {
            let i = s as usize;
            let _ = writeln!(
                out,
                "  {:<46} {:>12} {:>10.1} {:>7.1} {:>11} {:>10.1}",
                s.label(),
                wc[i],
                per_event(wt[i]),
                if busy == 0 {
                    0.0
                } else {
                    100.0 * wt[i] as f64 / busy as f64
                },
                writer.slow_counts[i],
                writer.slow_ticks[i] as f64 * ns / 1e6
            );
        }
        let busy_s = busy as f64 * ns / 1e9;
        let _ = writeln!(
            out,
            "  writer: {events} events, busy {:.3} s, idle {:.3} s: it could take {:.1} M events/s",
            busy_s,
            wt[Stage::Idle as usize] as f64 * ns / 1e9,
            if busy_s > 0.0 {
                events as f64 / busy_s / 1e6
            } else {
                0.0
            }
        );
    }
    let _ = writeln!(out, "  dropped events: {dropped}");
    out
}

/// Writes the profile on stderr (one `write(2)`), when profiling is on.
pub fn print(writer_row: Option<usize>, dropped: u64) {
    if !enabled() {
        return;
    }
    let text = report(writer_row, dropped);
    // SAFETY: writes our own buffer to fd 2.
    unsafe { libc::write(2, text.as_ptr().cast(), text.len()) };
}

/// The trace file as the writer sees it: with the profile on, the time spent in `write(2)` is
/// counted apart from compressing.
pub struct TimedWrite<W> {
    inner: W,
    ticks: u64,
}

impl<W> TimedWrite<W> {
    pub fn new(inner: W) -> TimedWrite<W> {
        TimedWrite { inner, ticks: 0 }
    }

    /// The writer underneath.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.inner
    }

    /// Clock ticks spent writing since the last call.
    pub fn take_ticks(&mut self) -> u64 {
        std::mem::take(&mut self.ticks)
    }

    #[inline]
    fn timed<T>(&mut self, f: impl FnOnce(&mut W) -> T) -> T {
        if !enabled() {
            return f(&mut self.inner);
        }
        let start = clock::now();
        let out = f(&mut self.inner);
        self.ticks += clock::now().wrapping_sub(start);
        out
    }
}

impl<W: std::io::Write> std::io::Write for TimedWrite<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.timed(|w| w.write(buf))
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.timed(|w| w.write_all(buf))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.timed(|w| w.flush())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn laps_add_up_per_stage_and_slow_hook_laps_apart() {
        let row = claim_row() as usize - 1;
        add(row, Stage::Native, 10);
        add(row, Stage::Native, 30);
        add(row, Stage::Native, SLOW_TICKS + 1);
        // The same walk's remembering: more time, no more laps.
        add_laps(row, Stage::Native, 5, 0);
        // Compressing is not split: a chunk takes long by itself.
        add(row, Stage::Compress, SLOW_TICKS + 1);
        let s = sums(std::iter::once(row));
        let n = Stage::Native as usize;
        assert_eq!((s.counts[n], s.ticks[n]), (2, 45));
        assert_eq!((s.slow_counts[n], s.slow_ticks[n]), (1, SLOW_TICKS + 1));
        let c = Stage::Compress as usize;
        assert_eq!((s.counts[c], s.slow_counts[c]), (1, 0));
        let text = report(None, 7);
        assert!(text.contains("native stack walk"), "{text}");
        assert!(text.ends_with("dropped events: 7\n"), "{text}");
    }
}
