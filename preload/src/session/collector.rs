//! The collector thread: receives events from the hooks, puts them back in causal (sequence)
//! order, names new modules, interns stacks, and writes the trace in chunks.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::fs::File;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use vramtrace_collector::format::{End, Header, Record, StackDef, Stats, TraceWriter};

use super::lifecycle::{self, warn};
use super::modules::ModuleTracker;
use super::output::{self, Naming};
use super::{Captured, Session, HOOK_PANICS, MISSING_REAL};

/// How often the loop wakes up to look at flush and stop requests.
const POLL: Duration = Duration::from_millis(5);
/// Events held back waiting for a missing sequence number before it is given up on regardless of
/// time (bounds memory when one thread stalls).
const MAX_HELD: usize = 1 << 20;

struct Held(Captured);

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        self.0.event.seq == o.0.event.seq
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.event.seq.cmp(&o.0.event.seq)
    }
}

/// Where records go: the trace file, or nowhere once writing failed (the program runs on).
struct Sink {
    writer: Option<TraceWriter<File>>,
    path: String,
    events: u64,
    lost: u64,
}

impl Sink {
    fn write(&mut self, r: &Record) {
        let is_event = matches!(r, Record::Event(_));
        if let Some(w) = self.writer.as_mut() {
            if let Err(e) = w.write(r) {
                warn(&format!(
                    "writing {} failed ({e}); tracing stops, the program continues",
                    self.path
                ));
                self.writer = None;
            }
        }
        if is_event {
            if self.writer.is_some() {
                self.events += 1;
            } else {
                self.lost += 1;
            }
        }
    }

    fn flush(&mut self) {
        if let Some(w) = self.writer.as_mut() {
            if let Err(e) = w.flush_chunk() {
                warn(&format!(
                    "writing {} failed ({e}); tracing stops, the program continues",
                    self.path
                ));
                self.writer = None;
            }
        }
    }
}

struct Collector {
    session: &'static Session,
    sink: Sink,
    modules: ModuleTracker,
    stacks: HashMap<Box<[u64]>, u32>,
    held: BinaryHeap<Reverse<Held>>,
    next_seq: u64,
    gap_since: Option<Instant>,
    dropped_seqs: BTreeSet<u64>,
    late: u64,
    last_stats: Stats,
}

fn now_mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn env_i32(name: &str) -> Option<i32> {
    std::env::var(name).ok()?.trim().parse().ok()
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes.
    if unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) } != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

fn command_line() -> Vec<String> {
    std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Opens the trace file and writes its header; `None` (with a warning) when it cannot.
fn open_sink(session: &Session) -> Sink {
    let pid = std::process::id();
    let start_unix = SystemTime::now();
    let rank = env_i32("RANK").or_else(|| env_i32("LOCAL_RANK"));
    let host = host_name();
    let naming = Naming {
        pid,
        rank,
        host: &host,
        start_unix_s: start_unix
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    };
    let header = Header {
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        pid,
        // SAFETY: getppid has no preconditions.
        ppid: unsafe { libc::getppid() } as u32,
        forked_from: session.forked_from,
        host: host.clone(),
        rank: env_i32("RANK"),
        local_rank: env_i32("LOCAL_RANK"),
        world_size: env_i32("WORLD_SIZE"),
        command_line: command_line(),
        start_unix_ns: start_unix
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
        start_mono_ns: now_mono_ns(),
        pointer_size: std::mem::size_of::<usize>() as u8,
        settings: session.config.describe(),
    };
    let failed = |path: &str, e: &dyn std::fmt::Display| {
        warn(&format!(
            "cannot write the trace {path}: {e}; the program runs on untraced"
        ));
        Sink {
            writer: None,
            path: path.to_string(),
            events: 0,
            lost: 0,
        }
    };
    let (path, file) =
        match output::create(&session.config.output, &naming, lifecycle::process_start()) {
            Ok(x) => x,
            Err(e) => return failed(&session.config.output, &e),
        };
    match TraceWriter::new(file, &header) {
        Ok(w) => Sink {
            writer: Some(w.with_chunk_bytes(256 * 1024)),
            path,
            events: 0,
            lost: 0,
        },
        Err(e) => failed(&path, &e),
    }
}

impl Collector {
    fn stats(&self) -> Stats {
        Stats {
            dropped: self.session.dropped.load(Ordering::Relaxed),
            late: self.late,
            hook_panics: HOOK_PANICS.load(Ordering::Relaxed),
            missing_real: MISSING_REAL.load(Ordering::Relaxed),
            events: self.sink.events,
        }
    }

    fn write_modules(&mut self) {
        for m in self.modules.refresh() {
            self.sink.write(&Record::Module(m));
        }
    }

    fn write_event(&mut self, c: Captured) {
        let Captured { mut event, frames } = c;
        let unknown = !self.modules.knows(event.caller)
            || frames
                .as_deref()
                .is_some_and(|f| f.iter().any(|&a| !self.modules.knows(a)));
        if unknown {
            self.write_modules();
        }
        if let Some(frames) = frames {
            let next = self.stacks.len() as u32 + 1;
            let id = match self.stacks.get(&frames) {
                Some(&id) => id,
                None => {
                    self.sink.write(&Record::Stack(StackDef {
                        id: next,
                        frames: frames.to_vec(),
                    }));
                    self.stacks.insert(frames, next);
                    next
                }
            };
            event.stack = id;
        }
        while let Some(l) = self.session.lookups.pop() {
            self.sink.write(&Record::Lookup(l));
        }
        self.sink.write(&Record::Event(event));
    }

    /// Writes every held event that is next in sequence; with `drain`, everything held.
    fn release(&mut self, drain: bool, reorder_wait: Duration) {
        while let Some(s) = self.session.dropped_seqs.pop() {
            self.dropped_seqs.insert(s);
        }
        loop {
            let Some(Reverse(top)) = self.held.peek() else {
                self.gap_since = None;
                return;
            };
            let seq = top.0.event.seq;
            if seq <= self.next_seq {
                if seq < self.next_seq {
                    self.late += 1;
                } else {
                    self.next_seq += 1;
                }
                let Reverse(Held(c)) = self.held.pop().expect("peeked");
                self.gap_since = None;
                self.write_event(c);
                continue;
            }
            if self.dropped_seqs.remove(&self.next_seq) {
                self.next_seq += 1;
                continue;
            }
            let give_up = drain
                || self.held.len() > MAX_HELD
                || self.gap_since.is_some_and(|t| t.elapsed() >= reorder_wait);
            if give_up {
                self.next_seq = seq;
                self.dropped_seqs = self.dropped_seqs.split_off(&seq);
                continue;
            }
            if self.gap_since.is_none() {
                self.gap_since = Some(Instant::now());
            }
            return;
        }
    }

    fn write_stats_if_changed(&mut self) {
        let s = self.stats();
        if s != self.last_stats {
            self.sink.write(&Record::Stats(s.clone()));
            self.last_stats = s;
        }
    }

    fn run(mut self, rx: Receiver<Captured>) {
        let control = &self.session.control;
        let reorder_wait = self.session.config.reorder_wait;
        let flush_every = self.session.config.flush_interval;
        let mut last_flush = Instant::now();
        loop {
            match rx.recv_timeout(POLL) {
                Ok(c) => self.held.push(Reverse(Held(c))),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            for c in rx.try_iter().take(1 << 14) {
                self.held.push(Reverse(Held(c)));
            }
            let flush_gen = control.flush_request.load(Ordering::Acquire);
            let flush_now = flush_gen != control.flushed.load(Ordering::Acquire);
            let finish = control.finish.load(Ordering::Acquire);
            if finish != 0 || flush_now {
                for c in rx.try_iter() {
                    self.held.push(Reverse(Held(c)));
                }
            }
            self.release(finish != 0 || flush_now, reorder_wait);
            if finish != 0 {
                self.end(finish);
                return;
            }
            if flush_now || last_flush.elapsed() >= flush_every {
                self.write_stats_if_changed();
                self.sink.flush();
                last_flush = Instant::now();
                control.flushed.store(flush_gen, Ordering::Release);
            }
        }
    }

    fn end(&mut self, finish: u32) {
        let reason = match finish {
            1 => "exit".to_string(),
            n if n >= 1000 => format!("signal {}", n - 1000),
            n => format!("code {n}"),
        };
        let stats = self.stats();
        self.sink.write(&Record::Stats(stats.clone()));
        self.sink.write(&Record::End(End {
            time_ns: now_mono_ns(),
            stats,
            reason,
        }));
        self.sink.flush();
        let dropped = self.session.dropped.load(Ordering::Relaxed);
        if dropped > 0 && !self.session.config.quiet {
            warn(&format!(
                "{dropped} events were dropped (channel full); the trace {} says so",
                self.sink.path
            ));
        }
        let control = &self.session.control;
        control
            .flushed
            .store(control.flush_request.load(Ordering::Acquire), Ordering::Release);
        control.finished.store(1, Ordering::Release);
    }
}

/// Starts the collector thread for `session`.
pub fn spawn(
    session: &'static Session,
    rx: Receiver<Captured>,
    warnings: Vec<String>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("vramtrace".into())
        .spawn(move || {
            // Hooks reached from this thread (none should be) pass through untraced.
            crate::capture::thread::mark_tracer_thread();
            session
                .control
                .collector_tid
                .store(crate::capture::thread::tid(), Ordering::Release);
            let mut c = Collector {
                session,
                sink: open_sink(session),
                modules: ModuleTracker::default(),
                stacks: HashMap::new(),
                held: BinaryHeap::new(),
                next_seq: 1,
                gap_since: None,
                dropped_seqs: BTreeSet::new(),
                late: 0,
                last_stats: Stats::default(),
            };
            for w in warnings {
                c.sink.write(&Record::Warning(w));
            }
            c.write_modules();
            c.sink.flush();
            c.run(rx);
        })
        .map(|_| ())
}
