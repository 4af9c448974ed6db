//! The writer thread: receives events from the hooks, puts them back in causal (sequence)
//! order, names new modules, interns stacks, and writes the trace in chunks (`sink.rs`), cut
//! into segments when the trace is bounded (`rotation.rs`).

mod definitions;
pub mod module_tracker;
mod rotation;
mod sink;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use vramtrace_collector::attached;
use vramtrace_collector::event::{Event, Op};
use vramtrace_collector::format::{End, Header, Packing, PyStackDef, Record, StackDef, Stats};
use vramtrace_collector::units::pattern::Naming;

use self::definitions::{Codes, Defined, TraceIds};
use self::module_tracker::ModuleTracker;
use self::sink::Sink;
use crate::capture::clock::{self, Calibration};
use crate::capture::{intern, python};
use crate::files::segments::Segments;
use crate::monitor::{AlertSettings, Monitor};
use crate::self_profile::{self, Stage, WriterTimer};
use crate::session::lifecycle::Ending;
use crate::session::ring::Take;
use crate::session::{Session, HOOK_PANICS, MISSING_REAL};
use crate::tracer_thread;
use crate::warn::warn;

/// How long the writer stays behind the hooks before the live analysis judges less often (and
/// again, each time, to the coarsest).
const MONITOR_BEHIND_FOR: Duration = Duration::from_secs(1);
/// How long the writer keeps up before the live analysis judges more often again.
const MONITOR_KEPT_UP_FOR: Duration = Duration::from_secs(10);

/// How long the loop sleeps when the channel is empty.
const POLL: Duration = Duration::from_millis(2);
/// How long the end (exit, `_exit`, exec, a fatal signal) spends writing the events still in the
/// buffer while the program goes on making calls: its exit waits for it. Threads that still
/// allocate leave the writer little of the CPU, so what is not written by then is counted as lost
/// (the report leaves out what it could explain). A program that has gone quiet gets its whole
/// buffer written (a full one takes milliseconds on a free core).
const END_BUDGET: Duration = Duration::from_millis(20);

/// When the end was first seen, and how busy the program was then.
#[derive(Clone, Copy, Debug)]
struct EndSeen {
    at: Instant,
    last_seq: u64,
    after_end: u64,
}

/// How much the writer's pass over the ring must take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Drain {
    /// Its usual pass: a bounded batch.
    No,
    /// Someone waits for what is ready to be written (a signal handler that chains on).
    Flush,
    /// The process is ending: everything numbered so far, giving up on what is not ready.
    End,
}

struct Writer {
    session: &'static Session,
    sink: Sink,
    /// The trace's header (each segment's says where the segment stands).
    header: Header,
    /// The segments written, when the trace is cut into segments.
    segments: Option<Segments>,
    /// Events written before the current segment.
    segment_first_event: u64,
    /// Sequence number and time of the last event written.
    last_event: (u64, u64),
    modules: ModuleTracker,
    /// Native stacks: the trace's id of each id of `intern::NATIVE`.
    stacks: TraceIds,
    /// Python stacks, the same way (`intern::PYTHON`).
    py_stacks: TraceIds,
    /// Python code objects named (their ids are the trace's).
    codes: Codes,
    next_seq: u64,
    gap_since: Option<Instant>,
    dropped_seqs: BTreeSet<u64>,
    /// Numbers passed over without an event that no hook reported dropped.
    given_up: u64,
    /// Events dropped before they had a number, by the last number handed out then.
    drop_marks: BTreeMap<u64, u64>,
    /// How far the numbers written are ahead of the hooks' numbers: one per such drop placed.
    renumbered: u64,
    /// When the end was first seen: the end's writing stops [`END_BUDGET`] after, if the
    /// program is still making calls.
    end_seen: Option<EndSeen>,
    last_stats: Stats,
    /// Event times arrive as raw clock readings (TSC ticks where invariant).
    calibration: Calibration,
    /// Payloads written so far (the last `Attachment` id).
    attachments: u32,
    /// The self-profile's stopwatch (does nothing unless `VRAMTRACE_SELF_PROFILE` is on).
    timer: WriterTimer,
    /// The live analysis (alerts), fed every record written; `None` when turned off.
    monitor: Option<Monitor>,
    /// The trace's name, its first file's (later segments are named after it): what an alert's
    /// live set is named beside, whichever segment is being written.
    trace_name: String,
    /// Since when the backlog has stayed above half the ring (see [`Writer::monitor_tick`]).
    behind_since: Option<Instant>,
    /// Since when it has stayed below.
    kept_up_since: Option<Instant>,
    /// The trace's first file as created, and whether an event other than a mark (a GPU call)
    /// was written: a trace of marks alone is removed at the end.
    first_file: Option<(std::path::PathBuf, crate::files::trace_file::FileId)>,
    gpu_calls: bool,
}

impl Writer {
    /// The tracer's counters. `dropped` and `late` count every event lost before the end, once
    /// each: those the hooks dropped, those the writer gave up waiting for (a hook still inside
    /// its call when the process ended) — less the ones whose hook arrived after all and counted
    /// itself `late`. Each left a gap in the sequence numbers.
    fn stats(&self) -> Stats {
        let late = self.session.late.load(Ordering::Relaxed);
        Stats {
            dropped: self.session.dropped.load(Ordering::Relaxed)
                + self.given_up.saturating_sub(late),
            late: self.session.late.load(Ordering::Relaxed),
            hook_panics: HOOK_PANICS.load(Ordering::Relaxed),
            missing_real: MISSING_REAL.load(Ordering::Relaxed),
            events: self.sink.events,
        }
    }

    fn write_modules(&mut self) {
        for m in self.modules.refresh() {
            self.write_record(Record::Module(m));
        }
    }

    /// Writes a record that is not an event, and feeds it to the live analysis.
    fn write_record(&mut self, r: Record) {
        let alerts = match self.monitor.as_mut() {
            Some(monitor) => monitor.record(&r, clock::monotonic_ns(), &self.trace_name),
            None => Vec::new(),
        };
        self.sink.write(&r);
        self.write_alerts(alerts);
    }

    /// Writes the alerts the live analysis raised, through its state as every record: the next
    /// segment's snapshot carries them, so rotation never takes an alert away.
    fn write_alerts(&mut self, alerts: Vec<vramtrace_collector::format::Alert>) {
        for a in alerts {
            self.write_record(Record::Alert(Box::new(a)));
        }
    }

    /// Lets the live analysis judge when due (programs without step marks, windows of time),
    /// less often while the writer has fallen behind the hooks: [`MONITOR_BEHIND_FOR`] behind
    /// halves the resolution, and as long again as judgements are then apart halves it again;
    /// each [`MONITOR_KEPT_UP_FOR`] of keeping up doubles it back; each change is a note in the
    /// trace. Behind means more than half the ring waiting for [`MONITOR_BEHIND_FOR`] on end: a
    /// burst, or the writer waking to a ring that filled while it slept, is not (a flood of 2 M
    /// calls a second on the stand-ins, which the writer keeps up with, would have lowered it at
    /// once under a rule of one look).
    fn monitor_tick(&mut self) {
        let Some(monitor) = self.monitor.as_mut() else {
            return;
        };
        let backlog = self.session.last_seq().saturating_sub(self.next_seq);
        let note = if backlog <= self.session.ring.capacity() / 2 {
            self.behind_since = None;
            let kept_up = self.kept_up_since.get_or_insert_with(Instant::now);
            if monitor.is_coarse() && kept_up.elapsed() >= MONITOR_KEPT_UP_FOR {
                self.kept_up_since = Some(Instant::now());
                monitor.finer()
            } else {
                None
            }
        } else {
            // Halved after a second behind, then after as long again as the judgements are
            // apart by then: the stride follows the time spent behind, not its exponent.
            self.kept_up_since = None;
            let behind = self.behind_since.get_or_insert_with(Instant::now);
            if behind.elapsed() >= MONITOR_BEHIND_FOR * monitor.stride() as u32 {
                self.behind_since = Some(Instant::now());
                monitor.coarser()
            } else {
                None
            }
        };
        let dropped = self.session.dropped.load(Ordering::Relaxed);
        let alerts = monitor.tick(clock::monotonic_ns(), &self.trace_name, dropped);
        if let Some(note) = note {
            self.write_record(Record::Warning(note));
        }
        self.write_alerts(alerts);
    }

    fn write_event(&mut self, mut event: Event) {
        if event.py_stack != 0 {
            event.py_stack = match self.py_stacks.get(event.py_stack) {
                Some(id) => id,
                None => self.define_python(event.py_stack),
            };
        }
        if event.stack != 0 {
            event.stack = match self.stacks.get(event.stack) {
                Some(id) => id,
                None => self.define_native(event.stack),
            };
        }
        event.seq = self.written_number(event.seq);
        event.time_ns = self.calibration.to_ns(event.time_ns);
        if !self.modules.knows(event.caller) {
            self.write_modules();
        }
        self.timer.lap(Stage::Define);
        self.last_event = (event.seq, event.time_ns);
        self.gpu_calls |= !is_mark(&event.op);
        let chunk_written = self.sink.write_event(&event);
        if chunk_written {
            let written = self.sink.write_ticks();
            self.timer.lap_flush(written);
        } else {
            self.timer.lap(Stage::Encode);
        }
        if let Some(monitor) = self.monitor.as_mut() {
            // Events taken in after the process began to exit raise alerts without a signal (a
            // relaxed load: the flag is only ever set, and is read again each event).
            if self.session.control.finish.load(Ordering::Relaxed) != 0 {
                monitor.ending();
            }
            if self.session.dropped.load(Ordering::Relaxed) != 0 {
                monitor.events_lost();
            }
            let alerts = monitor.event(&event, &self.trace_name);
            if !alerts.is_empty() {
                self.write_alerts(alerts);
            }
        }
        if chunk_written && self.segments.is_some() {
            self.rotate_if_due();
        }
    }

    /// The number event `seq` is written with: a gap is left for every event dropped before it
    /// had a number while the hooks' numbers were below `seq`, so a lost event is a missing
    /// number in the trace, where it was lost.
    #[inline]
    fn written_number(&mut self, seq: u64) -> u64 {
        if !self.session.drop_marks.is_empty() {
            while let Some(mark) = self.session.drop_marks.pop() {
                *self.drop_marks.entry(mark).or_default() += 1;
            }
        }
        while let Some(entry) = self.drop_marks.first_entry() {
            if *entry.key() >= seq {
                break;
            }
            self.renumbered += entry.remove();
        }
        seq + self.renumbered
    }

    /// Writes native stack `id` (a table id) on its first sight, after the modules its frames
    /// lie in; returns its trace id (0 if the table does not know it).
    #[cold]
    fn define_native(&mut self, id: u32) -> u32 {
        let Some(frames) = intern::NATIVE.frames(id) else {
            return 0;
        };
        let modules = &mut self.modules;
        if frames.iter().any(|&a| !modules.knows(a)) {
            self.write_modules();
        }
        let defined = self.stacks.define(id);
        let stack = Record::Stack(StackDef {
            id: defined.id(),
            frames: frames.to_vec(),
        });
        self.write_definition(defined, stack);
        defined.id()
    }

    /// Writes a definition: to the live analysis too on its first sight (a segment that defines
    /// it again tells the analysis nothing new).
    fn write_definition(&mut self, defined: Defined, r: Record) {
        match defined {
            Defined::New(_) => self.write_record(r),
            Defined::Again(_) => self.sink.write(&r),
        }
    }

    /// Writes Python stack `id` (a table id) on its first sight, with the names of code objects
    /// it is the first to use; returns its trace id (0 if the table does not know it).
    #[cold]
    fn define_python(&mut self, id: u32) -> u32 {
        let Some(frames) = python::frames(id) else {
            return 0;
        };
        for f in &frames {
            if let Some(defined) = self.codes.define(f.code) {
                if let Some(code) = python::code(f.code) {
                    self.write_definition(defined, Record::PyCode(code));
                }
            }
        }
        let defined = self.py_stacks.define(id);
        let stack = Record::PyStack(PyStackDef {
            id: defined.id(),
            frames,
        });
        self.write_definition(defined, stack);
        defined.id()
    }

    fn write_lookups(&mut self) {
        while let Some(l) = self.session.lookups.pop() {
            self.sink.write(&Record::Lookup(l));
        }
    }

    /// Writes the payloads the program handed over, each in pieces that fit a chunk, puts them
    /// on disk at once (one handed over at an out-of-memory error may be the last thing the
    /// process does), and says so to the threads waiting for them. The queue is only tried: a
    /// thread stopped by a fatal signal while holding it must not stop the writer.
    fn write_attachments(&mut self) {
        let waiting = match self.session.attachments.try_lock() {
            Ok(mut q) => std::mem::take(&mut q.waiting),
            Err(_) => return,
        };
        if waiting.is_empty() {
            return;
        }
        let count = waiting.len() as u64;
        for a in waiting {
            self.attachments += 1;
            let id = self.attachments;
            for piece in attached::pieces(&a.kind, id, a.time_ns, a.after_seq, &a.data) {
                // Through the live analysis: PyTorch's payloads name an alert's line.
                self.write_record(Record::Attachment(piece));
            }
        }
        self.sink.flush();
        self.session
            .attachments_written
            .fetch_add(count, Ordering::Release);
    }

    /// Writes every event that is next in sequence, up to number `last`. Gives up on a number
    /// nobody claimed when its hook dropped it, when it has been missing for `reorder_wait`, or
    /// at the end (`Drain::End`: exit, fatal signal), which also stops waiting for hooks still
    /// inside their call. A flush (`Drain::Flush`) writes all that is ready without a pause but
    /// gives nothing up: the process goes on, and a number passed over while its hook still
    /// writes would leave that slot a lap behind for good. Returns how many events were written.
    fn consume(&mut self, drain: Drain, reorder_wait: Duration, last: u64) -> usize {
        let end = drain == Drain::End;
        self.choose_packing(drain != Drain::No);
        let ring = &self.session.ring;
        let mut written: usize = 0;
        let seen = self.end_seen;
        self.timer.reset();
        loop {
            if self.next_seq > last {
                return written;
            }
            if end && written % 16 == 15 && seen.is_some_and(|s| self.out_of_time(s)) {
                // Out of time: what is left is lost, and counted.
                self.given_up += last + 1 - self.next_seq;
                self.next_seq = last + 1;
                return written;
            }
            match ring.take(self.next_seq) {
                Take::Ready(c) => {
                    self.timer.lap(Stage::Take);
                    self.next_seq += 1;
                    self.gap_since = None;
                    self.write_event(c);
                    written += 1;
                    if written.is_multiple_of(64) {
                        if written.is_multiple_of(1024) {
                            self.session.set_consumed(self.next_seq);
                        }
                        // The end was asked for: its own pass (bounded) takes over at once.
                        if !end && self.session.control.finish.load(Ordering::Relaxed) != 0 {
                            self.session.set_consumed(self.next_seq);
                            return written;
                        }
                    }
                    if written >= 1 << 16 && drain == Drain::No {
                        self.session.set_consumed(self.next_seq);
                        return written;
                    }
                    continue;
                }
                Take::Unclaimed if self.next_seq <= self.session.last_seq() => {
                    while let Some(s) = self.session.dropped_seqs.pop() {
                        if s >= self.next_seq {
                            self.dropped_seqs.insert(s);
                        }
                    }
                    let reported = self.dropped_seqs.remove(&self.next_seq);
                    let give_up = reported
                        || end
                        || self.gap_since.is_some_and(|t| t.elapsed() >= reorder_wait);
                    if give_up {
                        if ring.skip(self.next_seq) {
                            self.next_seq += 1;
                            self.gap_since = None;
                            self.given_up += u64::from(!reported);
                        }
                        continue;
                    }
                    self.gap_since.get_or_insert_with(Instant::now);
                    return written;
                }
                Take::Writing | Take::Behind if end => {
                    // Exit or a fatal signal: a hook still inside its real call will not be
                    // waited for.
                    if self.next_seq > self.session.last_seq() {
                        return written;
                    }
                    self.next_seq += 1;
                    self.given_up += 1;
                }
                _ => return written,
            }
        }
    }

    /// Whether the end's writing must stop: its budget is spent while the program still makes
    /// calls (numbers taken, or calls refused, since the end was asked for).
    fn out_of_time(&self, seen: EndSeen) -> bool {
        seen.at.elapsed() >= END_BUDGET
            && (self.session.last_seq() != seen.last_seq
                || self.session.after_end.load(Ordering::Relaxed) != seen.after_end)
    }

    /// Compression that keeps up (see [`packing_for`]).
    fn choose_packing(&mut self, drain: bool) {
        let Some(current) = self.sink.writer.as_ref().map(|w| w.packing()) else {
            return;
        };
        let backlog = self.session.last_seq().saturating_sub(self.next_seq);
        let packing = packing_for(current, backlog, self.session.ring.capacity(), drain);
        self.sink.set_packing(packing);
    }

    fn write_stats_if_changed(&mut self) {
        let s = self.stats();
        if s != self.last_stats {
            self.write_record(Record::Stats(s.clone()));
            self.last_stats = s;
        }
    }

    fn run(mut self) {
        let control = &self.session.control;
        let reorder_wait = self.session.config.reorder_wait;
        let flush_every = self.session.config.flush_interval;
        let mut last_flush = Instant::now();
        loop {
            // Never block in the channel: a blocked receiver makes every send wake it (a futex
            // call on the hook's path). Poll, and sleep briefly when there is nothing to do.
            let flush_gen = control.flush_request.load(Ordering::Acquire);
            let flush_now = flush_gen != control.flushed.load(Ordering::Acquire);
            let finish = control.finish.load(Ordering::Acquire);
            if finish != 0 && self.end_seen.is_none() {
                self.end_seen = Some(EndSeen {
                    at: Instant::now(),
                    last_seq: self.session.last_seq(),
                    after_end: self.session.after_end.load(Ordering::Relaxed),
                });
            }
            // A flush or the end takes what was numbered when it was asked for: threads that go
            // on making calls cannot keep it (and the program waiting on it) going.
            let drain = match (finish != 0, flush_now) {
                (true, _) => Drain::End,
                (false, true) => Drain::Flush,
                (false, false) => Drain::No,
            };
            let last = if drain == Drain::No {
                u64::MAX
            } else {
                self.session.last_seq()
            };
            let got = self.consume(drain, reorder_wait, last);
            self.timer.events(got as u64);
            self.session.set_consumed(self.next_seq);
            if finish == 0 {
                self.monitor_tick();
            }
            self.write_lookups();
            self.write_attachments();
            if finish != 0 {
                self.end(finish);
                return;
            }
            if flush_now || last_flush.elapsed() >= flush_every {
                self.write_stats_if_changed();
                self.timer.reset();
                self.sink.flush();
                self.rotate_if_due();
                let written = self.sink.write_ticks();
                self.timer.lap_flush(written);
                self.calibration.refine();
                self.calibration.publish();
                last_flush = Instant::now();
                control.flushed.store(flush_gen, Ordering::Release);
            }
            if got == 0 {
                // Parked rather than slept: the exit path unparks it to finish at once.
                self.timer.reset();
                std::thread::park_timeout(POLL);
                self.timer.lap(Stage::Idle);
            }
        }
    }

    /// A process that made no GPU memory call leaves no trace, even when it marked steps (a
    /// program training on the CPU under the Python hooks): its file, one of marks, still the
    /// one it created and not rotated, is removed. Not when events were lost (they may have
    /// been its GPU calls).
    fn remove_if_marks_only(&mut self) {
        let Some((path, id)) = self.first_file.as_ref().filter(|_| !self.gpu_calls) else {
            return;
        };
        if self.sink.path == path.display().to_string()
            && crate::files::trace_file::remove_if_same(path, *id)
        {
            crate::session::announce::trace_removed(path);
        }
    }

    fn end(&mut self, finish: u32) {
        let reason = Ending::reason(finish);
        let lost_stacks = intern::NATIVE.lost() + intern::PYTHON.lost();
        if lost_stacks > 0 {
            let msg = match lost_stacks {
                1 => "1 stack was not recorded".to_string(),
                n => format!("{n} stacks were not recorded"),
            } + ": more distinct stacks than the tracer's tables hold";
            if !self.session.config.quiet {
                warn(&msg);
            }
            self.sink.write(&Record::Warning(msg));
        }
        let stats = self.stats();
        let lost = stats.dropped;
        if let Some(monitor) = self.monitor.as_mut() {
            let alerts = monitor.finish(clock::monotonic_ns(), &self.trace_name, lost);
            self.write_alerts(alerts);
        }
        self.sink.write(&Record::Stats(stats.clone()));
        if let Some(end) = self.segment_end() {
            self.sink.write(&Record::SegmentEnd(end));
        }
        self.sink.write(&Record::End(End {
            time_ns: clock::monotonic_ns(),
            stats,
            reason,
        }));
        self.timer.reset();
        self.sink.flush();
        let written = self.sink.write_ticks();
        self.timer.lap_flush(written);
        self_profile::print(self.timer.row(), lost);
        // Closed (if still ours): a process whose exec failed goes on with a new trace.
        self.sink.writer = None;
        if lost == 0 {
            self.remove_if_marks_only();
        }
        if lost > 0 && !self.session.config.quiet {
            let events = match lost {
                1 => "1 event was lost".to_string(),
                n => format!("{n} events were lost"),
            };
            warn(&format!(
                "{events} (the buffer was full, or their call had not returned at the end); the \
                 trace {} says so and where",
                self.sink.path
            ));
        }
        let control = &self.session.control;
        control.flushed.store(
            control.flush_request.load(Ordering::Acquire),
            Ordering::Release,
        );
        control.finished.store(1, Ordering::Release);
    }
}

/// The packing of the next chunks, given the current one and the events waiting in a buffer of
/// `capacity`. The default packing costs the writer about three times the CPU of the fastest
/// (`collector/src/format/packing.rs`), so once a quarter of the buffer waits the writer
/// switches to the fastest, and back once the backlog is under a sixteenth — long before hooks
/// would have to wait for room. At exit or on a fatal signal (`drain`) it stays as it is: a first
/// switch to the fastest would allocate its compressor then, in a process that may be crashing
/// from a damaged heap, to save a few milliseconds.
fn packing_for(current: Packing, backlog: u64, capacity: u64, drain: bool) -> Packing {
    if drain {
        return current;
    }
    if backlog > capacity / 4 {
        return Packing::Fast;
    }
    match current {
        Packing::Fast if backlog >= capacity / 16 => Packing::Fast,
        _ => Packing::Small,
    }
}

/// Whether `op` only marks the program's progress (a step, an iteration, a range, a mark): no
/// GPU call of the program. (A reading of device memory is kept: a device was in use.)
fn is_mark(op: &Op) -> bool {
    matches!(
        op,
        Op::MarkStep { .. }
            | Op::MarkIteration { .. }
            | Op::RangePush { .. }
            | Op::RangePop
            | Op::Mark { .. }
    )
}

/// Starts the writer thread for `session`.
pub fn spawn(session: &'static Session, warnings: Vec<String>) -> std::io::Result<()> {
    tracer_thread::spawn("vramtrace", move || writer_thread(session, warnings)).map(|handle| {
        let _ = session.control.writer.set(handle.thread().clone());
    })
}

/// The writer thread's body.
fn writer_thread(session: &'static Session, warnings: Vec<String>) {
    session
        .control
        .writer_tid
        .store(crate::capture::thread::tid(), Ordering::Release);
    let opened = sink::open_first(session);
    // This process's rank, for its alert lines.
    let alerts = AlertSettings {
        rank: opened.header.rank,
        ..session.config.alerts.clone()
    };
    // This process's metrics file: the name's placeholders are the trace's.
    let metrics = session.config.metrics.for_process(&Naming {
        pid: opened.header.pid,
        rank: opened.header.rank,
        host: &opened.header.host,
        start_unix_s: opened.header.start_unix_ns / 1_000_000_000,
    });
    let segments = (opened.file.as_ref())
        .filter(|_| session.config.segments.enabled())
        .map(|(path, id)| {
            Segments::new(session.config.segments.clone(), path, *id, &opened.header)
        });
    let mut c = Writer {
        session,
        trace_name: opened.sink.path.clone(),
        sink: opened.sink,
        header: opened.header,
        segments,
        segment_first_event: 0,
        last_event: (0, 0),
        modules: ModuleTracker::default(),
        stacks: TraceIds::default(),
        py_stacks: TraceIds::default(),
        codes: Codes::default(),
        next_seq: 1,
        gap_since: None,
        dropped_seqs: BTreeSet::new(),
        given_up: 0,
        drop_marks: BTreeMap::new(),
        renumbered: 0,
        end_seen: None,
        last_stats: Stats::default(),
        calibration: Calibration::measure(Duration::from_millis(2)),
        attachments: 0,
        timer: WriterTimer::new(),
        monitor: Monitor::new(
            &alerts,
            &metrics,
            session.config.segments.enabled(),
            session.config.quiet,
        ),
        behind_since: None,
        kept_up_since: None,
        first_file: opened.file.clone(),
        gpu_calls: false,
    };
    c.calibration.publish();
    for w in warnings {
        c.sink.write(&Record::Warning(w));
    }
    c.write_modules();
    c.sink.flush();
    c.run();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_follows_the_backlog_with_hysteresis() {
        use Packing::{Fast, Small};
        let cap = 65536;
        // Keeping up: the default.
        assert_eq!(packing_for(Small, 0, cap, false), Small);
        assert_eq!(packing_for(Small, cap / 4, cap, false), Small);
        // A quarter of the buffer waiting: the fastest, until under a sixteenth.
        assert_eq!(packing_for(Small, cap / 4 + 1, cap, false), Fast);
        assert_eq!(packing_for(Fast, cap / 8, cap, false), Fast);
        assert_eq!(packing_for(Fast, cap / 16, cap, false), Fast);
        assert_eq!(packing_for(Fast, cap / 16 - 1, cap, false), Small);
        // Exit and fatal signals: no switch, whatever waits.
        assert_eq!(packing_for(Small, cap, cap, true), Small);
        assert_eq!(packing_for(Fast, 0, cap, true), Fast);
    }
}
