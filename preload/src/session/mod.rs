//! One tracing session per process: its settings, the channel from hooks to the writer
//! thread, the sequence counter, and the lifecycle (lazy start on the first event, restart in a
//! forked child, flush at exit and on fatal signals).
//!
//! A session starts only when the first event arrives, so processes that never touch CUDA (the
//! shell and tools a training script starts) leave no trace file behind.
//!
//! The session is below the writer thread (`writer/`) and the live analysis (`monitor/`): both
//! read it, and it names neither's code. Its settings hold theirs (`monitor::AlertSettings`,
//! `files::segments::SegmentSettings`, folders that import nothing of the session), and
//! the writer thread it starts is handed to [`current`] by whoever asks for the session
//! (`hooks::session`), so that `session/` and `writer/` do not import each other.

pub mod announce;
pub mod cmdline;
pub mod config;
pub mod lifecycle;
pub mod ring;

use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;

use crossbeam_queue::SegQueue;
use vramtrace_collector::event::Event;
use vramtrace_collector::format::Lookup;

pub use config::Config;

/// A payload the program handed to the tracer (`vramtrace_attach`), waiting for the writer
/// thread to write it.
pub struct Attached {
    pub kind: String,
    pub data: Vec<u8>,
    /// `CLOCK_MONOTONIC` nanoseconds when it was handed over.
    pub time_ns: u64,
    /// The last sequence number handed out then.
    pub after_seq: u64,
}

/// Payloads waiting for the writer thread, in the order they were numbered.
#[derive(Default)]
pub struct AttachQueue {
    pub waiting: Vec<Attached>,
    /// Payloads queued so far: the last one's number.
    pub queued: u64,
}

const IDLE: u8 = 0;
const STARTING: u8 = 1;
const RUNNING: u8 = 2;
const ENDED: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(IDLE);
static SESSION: AtomicPtr<Session> = AtomicPtr::new(std::ptr::null_mut());
static CONFIG: OnceLock<Config> = OnceLock::new();
/// Warnings found while reading the settings, written into the first trace.
static CONFIG_WARNINGS: OnceLock<Vec<String>> = OnceLock::new();
/// Set in a forked child: the pid it was forked from.
static FORKED_FROM: AtomicU32 = AtomicU32::new(0);

/// Process-wide counters that exist before any session does.
pub static HOOK_PANICS: AtomicU64 = AtomicU64::new(0);
pub static MISSING_REAL: AtomicU64 = AtomicU64::new(0);

/// The settings, read once (first from the library constructor, while the process has one
/// thread, so a fork can never catch the read half done).
pub fn config() -> &'static Config {
    CONFIG.get_or_init(|| {
        let (c, warnings) = Config::from_env();
        if c.self_profile {
            crate::self_profile::enable();
        }
        if !c.quiet {
            for w in warnings.iter().filter(|w| announce::first_to_warn(w)) {
                crate::warn::warn(w);
            }
        }
        let _ = CONFIG_WARNINGS.set(warnings);
        c
    })
}

/// Control flags between the process and its writer thread.
#[derive(Default)]
pub struct Control {
    /// Bumped to ask the writer to write out everything it holds now.
    pub flush_request: AtomicU64,
    /// The last flush request the writer completed.
    pub flushed: AtomicU64,
    /// Nonzero: finish the trace with this reason ([`lifecycle::Ending::code`]).
    pub finish: AtomicU32,
    /// The writer has written its end record and exited.
    pub finished: AtomicU8,
    /// Kernel thread id of the writer (hooks called on it are never traced).
    pub writer_tid: AtomicU32,
    /// The writer thread, to wake it when a flush or the end is asked for.
    pub writer: OnceLock<std::thread::Thread>,
}

/// A value alone on its cache line (a counter one side writes often must not share a line with
/// what the other side reads).
#[repr(align(64))]
pub struct Padded<T>(pub T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

/// The live session of this process.
pub struct Session {
    pub config: &'static Config,
    /// The bounded lock-free ring from hooks to the writer, indexed by sequence number. Its
    /// events name their stacks by the ids of `capture::intern`'s tables.
    pub ring: ring::Ring<Event>,
    /// Written by every traced call (its own cache line).
    seq: Padded<AtomicU64>,
    /// The next number the writer will read: numbers below it have left the ring (written by
    /// the writer; its own cache line).
    consumed: Padded<AtomicU64>,
    scope: AtomicU64,
    pub dropped: AtomicU64,
    /// Set when hooks stopped waiting for a writer that made no progress: the value of
    /// `consumed` then, plus one (0: not stalled). While `consumed` stays there, hooks drop
    /// their events at once instead of each waiting out `full_wait` again.
    stalled: AtomicU64,
    /// Events whose hook finished after the writer had given up waiting for them.
    pub late: AtomicU64,
    pub after_end: AtomicU64,
    /// Sequence numbers of dropped events, so the writer does not wait for them.
    pub dropped_seqs: SegQueue<u64>,
    /// For each event dropped before it had a number, the last number handed out then: the
    /// writer leaves a gap after that event.
    pub drop_marks: SegQueue<u64>,
    /// Driver entry points handed out unwrapped, to be written as `Lookup` records.
    pub lookups: SegQueue<Lookup>,
    /// Payloads handed over by the program, to be written as `Attachment` records.
    pub attachments: std::sync::Mutex<AttachQueue>,
    /// Payloads written and flushed so far (they are numbered from 1 as they are queued).
    pub attachments_written: AtomicU64,
    pub control: Control,
    pub forked_from: Option<u32>,
    /// The process the session belongs to (a `vfork` child shares its memory, not its trace).
    pub pid: u32,
}

impl Session {
    /// The next sequence number (starts at 1), when the ring has room for it. A full ring is
    /// waited on for as long as the writer makes progress (see [`Patience`]); an event that
    /// still finds no room is dropped (counted) *without* taking a number, so the writer never
    /// waits for it and later events still flow — a number is only handed out with a slot free
    /// for it.
    #[inline]
    pub fn reserve(&self) -> Option<u64> {
        if self.seq.load(Ordering::Relaxed) + 1
            < self.consumed.load(Ordering::Relaxed) + self.ring.capacity()
        {
            return Some(self.seq.fetch_add(1, Ordering::Relaxed) + 1);
        }
        self.reserve_slow()
    }

    /// A full ring: wait up to `full_wait`, then drop the event. The drop is marked with the
    /// last number handed out, so the writer leaves a gap in the trace's numbers right after
    /// that event: the reader knows where each event was lost, and so which findings it could
    /// explain. (A number of its own would cost the writer a skip per drop, and in a storm the
    /// numbers would run away from it.) Once the end was asked for, nothing is waited for: the
    /// trace ends at the numbers already given.
    #[cold]
    fn reserve_slow(&self) -> Option<u64> {
        let mut patience = Patience::new(self);
        loop {
            if self.control.finish.load(Ordering::Acquire) != 0 {
                self.after_end.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            if self.seq.load(Ordering::Relaxed) + 1
                < self.consumed.load(Ordering::Acquire) + self.ring.capacity()
            {
                return Some(self.seq.fetch_add(1, Ordering::Relaxed) + 1);
            }
            if !patience.wait() {
                if self.control.finished.load(Ordering::Acquire) != 0 {
                    self.after_end.fetch_add(1, Ordering::Relaxed);
                } else {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    self.drop_marks.push(self.seq.load(Ordering::Acquire));
                }
                return None;
            }
        }
    }

    /// The writer has consumed every number below `next` (it publishes this as it goes).
    pub fn set_consumed(&self, next: u64) {
        self.consumed.store(next, Ordering::Release);
    }

    /// A fresh NCCL call scope id (starts at 1).
    #[inline]
    pub fn next_scope(&self) -> u64 {
        self.scope.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The sequence number handed out last.
    pub fn last_seq(&self) -> u64 {
        self.seq.load(Ordering::Acquire)
    }

    /// Claims the ring slot of `seq` ahead of the event (a release, numbered before its real
    /// call). `false` when it could not (counted).
    #[inline]
    pub fn claim(&self, seq: u64) -> bool {
        match self.ring.try_claim(seq) {
            Ok(()) => true,
            Err(r) => self.claim_slow(seq, r),
        }
    }

    /// [`Session::claim`] when the slot was not free at once: waits as [`Session::reserve`]
    /// does.
    #[cold]
    fn claim_slow(&self, seq: u64, mut refused: ring::Refused) -> bool {
        let mut patience = Patience::new(self);
        while refused == ring::Refused::Full && patience.wait() {
            match self.ring.try_claim(seq) {
                Ok(()) => return true,
                Err(r) => refused = r,
            }
        }
        self.refused(seq, refused);
        false
    }

    /// Builds the event of a claimed `seq` into its slot and hands it to the writer.
    #[inline]
    pub fn fill_with(&self, seq: u64, build: impl FnOnce() -> Event) {
        self.ring.fill_with(seq, build);
    }

    /// Gives a claimed `seq` back without an event.
    pub fn abandon(&self, seq: u64) {
        self.ring.abandon(seq);
        self.refused(seq, ring::Refused::Full);
    }

    #[cold]
    fn refused(&self, seq: u64, r: ring::Refused) {
        match r {
            ring::Refused::Full => {
                if self.control.finished.load(Ordering::Acquire) != 0 {
                    self.after_end.fetch_add(1, Ordering::Relaxed);
                } else {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                }
                self.dropped_seqs.push(seq);
            }
            ring::Refused::Late => {
                self.late.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// How a hook waits for room in a full ring: as long as the writer makes progress, however
/// long that takes (the program then runs at the writer's pace rather than losing events), and
/// at most `full_wait` without any progress (the writer is stuck: a stalled disk, a stopped
/// thread). Once a hook gave up, others give up at once until the writer moves again. Waiting
/// spins briefly, then yields the CPU in short sleeps (the writer may need it: on a machine
/// with few cores the waiting threads would otherwise starve the one they wait for).
struct Patience<'s> {
    session: &'s Session,
    progress: u64,
    since: std::time::Instant,
    spins: u32,
}

impl<'s> Patience<'s> {
    fn new(session: &'s Session) -> Patience<'s> {
        Patience {
            session,
            progress: session.consumed.load(Ordering::Acquire),
            since: std::time::Instant::now(),
            spins: 0,
        }
    }

    /// Waits a moment; `false` when it is time to give up.
    fn wait(&mut self) -> bool {
        let s = self.session;
        let consumed = s.consumed.load(Ordering::Acquire);
        if consumed != self.progress {
            self.progress = consumed;
            self.since = std::time::Instant::now();
        } else if s.stalled.load(Ordering::Relaxed) == consumed + 1
            || self.since.elapsed() >= s.config.full_wait
        {
            s.stalled.store(consumed + 1, Ordering::Relaxed);
            return false;
        }
        self.spins += 1;
        if self.spins < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
        true
    }
}

/// Starts the writer thread of a session that is starting (`writer::spawn`).
pub type StartWriter = fn(&'static Session, Vec<String>) -> std::io::Result<()>;

/// The running session, starting it on first use (its writer thread with `start_writer`);
/// `None` when tracing is off or over.
#[inline]
pub fn current(start_writer: StartWriter) -> Option<&'static Session> {
    if STATE.load(Ordering::Acquire) == RUNNING {
        // SAFETY: SESSION is set before STATE becomes RUNNING and sessions are never freed.
        return unsafe { SESSION.load(Ordering::Acquire).as_ref() };
    }
    start_slow(start_writer)
}

#[cold]
fn start_slow(start_writer: StartWriter) -> Option<&'static Session> {
    let config = config();
    if config.disabled {
        return None;
    }
    loop {
        match STATE.compare_exchange(IDLE, STARTING, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => break,
            Err(RUNNING) => {
                // SAFETY: as in `current`.
                return unsafe { SESSION.load(Ordering::Acquire).as_ref() };
            }
            Err(ENDED) => return None,
            Err(_) => std::thread::yield_now(),
        }
    }
    let forked_from = match FORKED_FROM.load(Ordering::Relaxed) {
        0 => None,
        p => Some(p),
    };
    let session: &'static Session = Box::leak(Box::new(Session {
        config,
        ring: ring::Ring::new(config.buffer_events),
        seq: Padded(AtomicU64::new(0)),
        consumed: Padded(AtomicU64::new(1)),
        scope: AtomicU64::new(0),
        dropped: AtomicU64::new(0),
        stalled: AtomicU64::new(0),
        late: AtomicU64::new(0),
        after_end: AtomicU64::new(0),
        dropped_seqs: SegQueue::new(),
        drop_marks: SegQueue::new(),
        lookups: SegQueue::new(),
        attachments: std::sync::Mutex::new(AttachQueue::default()),
        attachments_written: AtomicU64::new(0),
        control: Control::default(),
        forked_from,
        pid: std::process::id(),
    }));
    // The stack tables are mapped here, before any hook interns: threads that meet an unmapped
    // table wait at most a few milliseconds for the one mapping it (a forked child must not
    // wait for a thread it does not have), and lose their stack when that thread is slower.
    crate::capture::intern::NATIVE.prepare();
    crate::capture::intern::PYTHON.prepare();
    let warnings = CONFIG_WARNINGS.get().cloned().unwrap_or_default();
    lifecycle::on_session_start();
    match start_writer(session, warnings) {
        Ok(()) => {
            SESSION.store(session as *const Session as *mut Session, Ordering::Release);
            STATE.store(RUNNING, Ordering::Release);
            Some(session)
        }
        Err(e) => {
            crate::warn::warn(&format!(
                "could not start the writer thread ({e}); tracing is off for this process"
            ));
            STATE.store(ENDED, Ordering::Release);
            None
        }
    }
}

/// The running session without starting one.
pub fn running() -> Option<&'static Session> {
    if STATE.load(Ordering::Acquire) == RUNNING {
        // SAFETY: as in `current`.
        unsafe { SESSION.load(Ordering::Acquire).as_ref() }
    } else {
        None
    }
}

/// Marks the session over: later events pass through untraced.
pub(crate) fn mark_ended() {
    STATE.store(ENDED, Ordering::Release);
}

/// After a failed `exec` ended the trace: the next event starts a new session.
pub(crate) fn resume_after_exec() {
    let _ = STATE.compare_exchange(ENDED, IDLE, Ordering::AcqRel, Ordering::Relaxed);
}

/// In a forked child: forget the parent's session (its writer thread does not exist here) so
/// the child's first event starts its own trace.
pub(crate) fn reset_after_fork(parent: u32) {
    FORKED_FROM.store(parent, Ordering::Relaxed);
    SESSION.store(std::ptr::null_mut(), Ordering::Release);
    STATE.store(IDLE, Ordering::Release);
}
