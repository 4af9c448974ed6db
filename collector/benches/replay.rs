//! Replay throughput and memory on a generated trace: `cargo bench -p vramtrace-collector --bench
//! replay`. Writes a trace of `VRAMTRACE_BENCH_EVENTS` events (default 100 million) to the
//! temporary directory (kept, and reused when `VRAMTRACE_BENCH_REUSE=1`), then times: decoding
//! alone (with the chunks decompressed ahead on a second thread, as `TraceReader::open` reads, and
//! all on one thread), applying alone (events decoded beforehand, a slice in memory), the full
//! replay on one thread, and the full replay as the tools run it (chunks decompressed ahead) with
//! every analysis at the end, and reports the peak resident memory of that last replay.
//! `VRAMTRACE_BENCH_PHASES` picks some of the phases (`decode,apply,one-thread,replay`), to
//! profile one alone.
//!
//! The generated mix: 1000-event steps marked with `vramtrace_mark_step`; in each, temporaries
//! from 32 call sites of 8 sizes allocated and freed (addresses reused from a free list), async
//! allocations through the default pool, and a leak of 10 allocations per step that are never
//! freed (so the live set grows to a million objects by the end). `VRAMTRACE_BENCH_MIX=nested`
//! makes the same mix as the runtime API over the driver, with stacks, records it: each call with
//! the driver call it made inside (`inner`) and a native stack per call site, so that the events
//! take the general reader (trace `vramtrace-bench-N-nested.vtrace`). `VRAMTRACE_BENCH_MIX=
//! unmarked` puts `cudaFree(0)` in place of each step mark (a trace without marks and without a
//! period; `vramtrace-bench-N-unmarked.vtrace`). `VRAMTRACE_BENCH_MIX=
//! recorded:DIR` takes the events of the traces under DIR (a GPU run's real programs) over and
//! over (`replay/recorded.rs`; trace `vramtrace-bench-N-recorded.vtrace`). With
//! `VRAMTRACE_BENCH_FORMAT=4` the generated trace is rewritten in format 4's framing (the same
//! chunks), for builds that read only that (`validation/bench-ab.sh`).

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Instant;

use vramtrace_collector::analysis::{analyze, GrowthConfig};
use vramtrace_collector::event::{Api, Event, MemKind, Op};
use vramtrace_collector::format::{
    Header, Module, Record, RecordRef, Segment, TraceReader, TraceWriter,
};
use vramtrace_collector::live::LiveState;

#[path = "replay/recorded.rs"]
mod recorded;

const APP: u64 = 0x40_0000;
const STEP_EVENTS: u64 = 1000;
const LEAKS_PER_STEP: u64 = 10;

/// A deterministic xorshift generator: the same trace every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

struct Generator {
    /// `VRAMTRACE_BENCH_MIX=nested`: inner driver calls and a stack per call site.
    nested: bool,
    /// `VRAMTRACE_BENCH_MIX=unmarked`: no step marks.
    unmarked: bool,
    seq: u64,
    rng: Rng,
    free_ptrs: Vec<u64>,
    next_ptr: u64,
    temporaries: Vec<(u64, bool)>,
    leak_ptr: u64,
}

impl Generator {
    fn event(&mut self, api: Api, caller: u64, op: Op) -> Event {
        self.seq += 1;
        let (inner, stack) = if self.nested {
            let inner = match api {
                Api::CudaMalloc => Some(Api::CuMemAlloc),
                Api::CudaMallocAsync => Some(Api::CuMemAllocAsync),
                Api::CudaFree => Some(Api::CuMemFree),
                Api::CudaFreeAsync => Some(Api::CuMemFreeAsync),
                _ => None,
            };
            (inner, ((caller - APP) / 0x40) as u32 + 1)
        } else {
            (None, 0)
        };
        Event {
            time_ns: self.seq * 250,
            thread: 1 + (self.seq % 4) as u32,
            inner,
            context: 0xc0,
            caller,
            stack,
            ..Event::new(self.seq, api, op)
        }
    }

    fn ptr(&mut self) -> u64 {
        self.free_ptrs.pop().unwrap_or_else(|| {
            self.next_ptr += 0x20_0000;
            self.next_ptr
        })
    }

    /// The next event of the mix.
    fn next(&mut self) -> Event {
        let in_step = self.seq % STEP_EVENTS;
        if in_step == 0 && self.unmarked {
            // cudaFree(0): no allocation, no token of the pattern.
            return self.event(Api::CudaFree, APP + 0x10, Op::Free { ptr: 0, stream: 0 });
        }
        if in_step == 0 {
            return self.event(Api::TracerMarkStep, APP + 0x10, Op::MarkStep { step: 0 });
        }
        if in_step <= LEAKS_PER_STEP {
            self.leak_ptr += 0x1000;
            let op = alloc(MemKind::Device, self.leak_ptr, 4096);
            return self.event(Api::CudaMalloc, APP + 0x20, op);
        }
        let r = self.rng.next();
        // Free when many are live or by chance; the step's last events free everything.
        let closing = in_step > STEP_EVENTS - 200;
        let free = !self.temporaries.is_empty()
            && (closing || self.temporaries.len() > 150 || r.is_multiple_of(2));
        if free {
            let i = (r >> 8) as usize % self.temporaries.len();
            let (ptr, asynchronous) = self.temporaries.swap_remove(i);
            self.free_ptrs.push(ptr);
            let api = if asynchronous {
                Api::CudaFreeAsync
            } else {
                Api::CudaFree
            };
            return self.event(api, APP + 0x30, Op::Free { ptr, stream: 0 });
        }
        let site = APP + 0x1000 + (r >> 16) % 32 * 0x40;
        let size = 512 << ((r >> 24) % 8);
        let asynchronous = (r >> 32).is_multiple_of(10);
        let ptr = self.ptr();
        self.temporaries.push((ptr, asynchronous));
        let (api, kind) = if asynchronous {
            (Api::CudaMallocAsync, MemKind::Async)
        } else {
            (Api::CudaMalloc, MemKind::Device)
        };
        self.event(api, site, alloc(kind, ptr, size))
    }
}

fn alloc(kind: MemKind, ptr: u64, size: u64) -> Op {
    Op::Alloc {
        kind,
        ptr,
        size,
        stream: 0,
        pool: 0,
        flags: 0,
        pitch: 0,
    }
}

/// The events a trace is made of.
enum Mix {
    Plain,
    Nested,
    /// The plain mix with `cudaFree(0)` in place of each step mark: a trace without marks and
    /// without a period, the costly case for finding steps as it is read.
    Unmarked,
    /// The events of the traces under a directory.
    Recorded(PathBuf),
}

/// Writes a trace of `events` events of the mix to `path`.
fn generate(path: &Path, events: u64, mix: &Mix) {
    let file = BufWriter::with_capacity(1 << 20, File::create(path).expect("create the trace"));
    let mut w = TraceWriter::new(file, &Header::default()).expect("header");
    let nested = match mix {
        Mix::Plain | Mix::Unmarked => false,
        Mix::Nested => true,
        Mix::Recorded(dir) => {
            recorded::generate(&mut w, dir, events);
            w.finish().expect("finish");
            return;
        }
    };
    w.write(&Record::Module(Module {
        id: 1,
        path: "/opt/bench/train".into(),
        base: APP,
        segments: vec![Segment {
            start: APP,
            len: 0x10_0000,
            executable: true,
        }],
        build_id: vec![],
    }))
    .expect("write");
    let mut g = Generator {
        nested,
        unmarked: matches!(mix, Mix::Unmarked),
        seq: 0,
        rng: Rng(0x9e37_79b9_7f4a_7c15),
        free_ptrs: Vec::new(),
        next_ptr: 0x7f00_0000_0000,
        temporaries: Vec::new(),
        leak_ptr: 0x5000_0000_0000,
    };
    for _ in 0..events {
        let e = g.next();
        w.write_event(&e).expect("write");
    }
    w.finish().expect("finish");
}

/// The format version of the trace at `path` and the decompressed bytes of its chunks (from the
/// chunks' fixed parts, `docs/trace-format.md`).
fn raw_bytes(path: &Path) -> (u32, u64) {
    let reader = TraceReader::new(BufReader::new(File::open(path).expect("open"))).expect("header");
    let (version, mut at) = (reader.version(), reader.offset());
    drop(reader);
    // Version 5: sync marker, packed length, raw length, ... (40 bytes); version 4: packed
    // length, raw length, ... (16 bytes).
    let (head, lengths) = if version >= 5 { (40, 8) } else { (16, 0) };
    let mut file = File::open(path).expect("open");
    let mut raw = 0u64;
    let mut fixed = vec![0u8; head];
    while file.seek(SeekFrom::Start(at)).is_ok() && file.read_exact(&mut fixed).is_ok() {
        let word = |i: usize| u64::from(u32::from_le_bytes(fixed[i..i + 4].try_into().unwrap()));
        raw += word(lengths + 4);
        at += head as u64 + word(lengths);
    }
    (version, raw)
}

/// Rewrites the format 5 trace at `path` in format 4's framing (`docs/trace-format.md`): the
/// header block once, its checksum over the header alone, and each chunk's packed bytes behind
/// format 4's fixed part.
fn to_format_4(path: &Path) {
    let bytes = std::fs::read(path).expect("read the trace");
    let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let n = word(12) as usize;
    let body = &bytes[16..16 + n];
    let mut out = bytes[..8].to_vec();
    out.extend_from_slice(&4u32.to_le_bytes());
    out.extend_from_slice(&(n as u32).to_le_bytes());
    out.extend_from_slice(body);
    out.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
    let mut at = 2 * (20 + n);
    while at < bytes.len() {
        let packed = word(at + 8) as usize;
        let chunk = &bytes[at + 40..at + 40 + packed];
        for v in [
            packed as u32,
            word(at + 12),
            word(at + 16),
            crc32fast::hash(chunk),
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(chunk);
        at += 40 + packed;
    }
    std::fs::write(path, out).expect("write the trace");
}

/// Peak resident memory of this process so far (VmHWM), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn rate(events: u64, seconds: f64) -> String {
    format!("{:.2} M events/s", events as f64 / seconds / 1e6)
}

/// CPU time of the calling thread so far, in seconds (from the scheduler's accounting, so time
/// other processes take on a shared machine does not count).
fn thread_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let ns: u64 = stat
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    ns as f64 / 1e9
}

/// CPU time of the whole process so far (every thread, finished ones included), in seconds, to
/// 10 ms.
fn process_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which is in parentheses): utime and stime are the
    // 12th and 13th, in clock ticks of 10 ms.
    let after = stat.rsplit(')').next().unwrap_or("");
    let field = |i: usize| -> f64 {
        after
            .split_whitespace()
            .nth(i)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    (field(11) + field(12)) / 100.0
}

/// Wall-clock and CPU time of one phase.
struct Timer {
    wall: Instant,
    cpu: f64,
    all: f64,
}

impl Timer {
    fn start() -> Self {
        Timer {
            wall: Instant::now(),
            cpu: thread_cpu(),
            all: process_cpu(),
        }
    }

    /// `events` in `N s (R M events/s); CPU: C s on this thread (R' M events per CPU second), A s
    /// in all threads`.
    fn report(&self, events: u64) -> String {
        let wall = self.wall.elapsed().as_secs_f64();
        let cpu = thread_cpu() - self.cpu;
        let all = process_cpu() - self.all;
        format!(
            "{events} events in {wall:.2} s ({}); CPU {cpu:.2} s on this thread ({} per CPU second), {all:.2} s in all threads",
            rate(events, wall),
            rate(events, cpu)
        )
    }
}

/// Applies the first million events, decoded into memory beforehand.
fn apply_alone(path: &Path, events: u64) {
    let mut reader = TraceReader::open(path).expect("open");
    let mut slice: Vec<Record> = Vec::new();
    while slice.len() < events.min(1_000_000) as usize {
        match reader.next_record() {
            Some(r) => slice.push(r),
            None => break,
        }
    }
    drop(reader);
    let t = Timer::start();
    let mut state = LiveState::new();
    for r in &slice {
        state.apply(r);
    }
    println!("apply only: {}", t.report(slice.len() as u64));
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this too: keep that short.
    let testing =
        std::env::args().any(|a| a == "--test") || !std::env::args().any(|a| a == "--bench");
    let events: u64 = std::env::var("VRAMTRACE_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if testing { 20_000 } else { 100_000_000 });
    let setting = std::env::var("VRAMTRACE_BENCH_MIX").unwrap_or_default();
    let mix = match setting.as_str() {
        "nested" => Mix::Nested,
        "unmarked" => Mix::Unmarked,
        "" | "plain" => Mix::Plain,
        other => match other.strip_prefix("recorded:") {
            Some(dir) => Mix::Recorded(PathBuf::from(dir)),
            None => {
                eprintln!("replay bench: VRAMTRACE_BENCH_MIX={other:?}: expected `plain`, `nested`, `unmarked` or `recorded:DIR`");
                std::process::exit(2);
            }
        },
    };
    let name = match mix {
        Mix::Plain => format!("vramtrace-bench-{events}.vtrace"),
        Mix::Nested => format!("vramtrace-bench-{events}-nested.vtrace"),
        Mix::Unmarked => format!("vramtrace-bench-{events}-unmarked.vtrace"),
        Mix::Recorded(_) => format!("vramtrace-bench-{events}-recorded.vtrace"),
    };
    let path: PathBuf = std::env::temp_dir().join(name);
    let reuse = std::env::var("VRAMTRACE_BENCH_REUSE").is_ok_and(|v| v == "1") && path.exists();
    if !reuse {
        let t = Instant::now();
        generate(&path, events, &mix);
        if std::env::var("VRAMTRACE_BENCH_FORMAT").is_ok_and(|v| v == "4") {
            to_format_4(&path);
        }
        let s = t.elapsed().as_secs_f64();
        println!(
            "generate: {events} events in {s:.1} s ({})",
            rate(events, s)
        );
    }
    let size = std::fs::metadata(&path).map_or(0, |m| m.len());
    let (version, raw) = raw_bytes(&path);
    println!(
        "trace: {} (format version {version}; {size} bytes, {:.2} bytes/event; {:.2} bytes/event decompressed)",
        path.display(),
        size as f64 / events as f64,
        raw as f64 / events as f64
    );

    let one_thread = || {
        let file = File::open(&path).expect("open");
        TraceReader::new(BufReader::with_capacity(1 << 20, file)).expect("header")
    };
    let decode = |mut reader: TraceReader<BufReader<File>>, how: &str| {
        let t = Timer::start();
        let mut n = 0u64;
        while let Some(r) = reader.next_event_or_record() {
            if let RecordRef::Event(e) = r {
                // Read a field so the decoding cannot be skipped.
                n += u64::from(e.seq != 0);
            }
        }
        println!("decode only ({how}): {}", t.report(n));
    };
    let phases = std::env::var("VRAMTRACE_BENCH_PHASES").unwrap_or_default();
    let phase = |name: &str| phases.is_empty() || phases.split(',').any(|p| p == name);
    if phase("decode") {
        decode(TraceReader::open(&path).expect("open"), "read ahead");
        decode(one_thread(), "one thread");
    }
    if phase("apply") {
        apply_alone(&path, events);
    }
    if phase("one-thread") {
        let t = Timer::start();
        let mut state = LiveState::new();
        state.replay(&mut one_thread());
        println!(
            "full replay (one thread, no analyses): {}",
            t.report(state.events())
        );
    }
    if !phase("replay") {
        return;
    }

    // Resets the peak resident memory (VmHWM) so the next reading is the full replay's own.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let rss_before = peak_rss();
    let t = Instant::now();
    let timer = Timer::start();
    let mut state = LiveState::new();
    state.replay(&mut TraceReader::open(&path).expect("open"));
    let applied = t.elapsed().as_secs_f64();
    let replayed = timer.report(state.events());
    let peak_replay = peak_rss();
    let analysis = analyze(&state, &GrowthConfig::default());
    let s = t.elapsed().as_secs_f64();
    let live = analysis.leaks.device.count + analysis.leaks.host.count;
    let peak = peak_rss();
    println!("full replay (read ahead): {replayed}");
    println!(
        "full replay (read ahead) and analyses: {} events in {s:.2} s ({}; analyses {:.2} s)",
        state.events(),
        rate(state.events(), s),
        s - applied
    );
    let mib = |b: u64| b as f64 / 1048576.0;
    println!(
        "live at end: {live} objects, {} call sites, {} steps; peak RSS {:.1} MiB, {:.1} MiB before the analyses (before the replay {:.1} MiB)",
        state.site_count(),
        state.steps(),
        mib(peak),
        mib(peak_replay),
        mib(rss_before)
    );
    if live > 0 {
        println!(
            "peak RSS per live object: {:.0} bytes (all of it), {:.0} bytes above what it was before the replay, {:.0} bytes above 256 MiB",
            peak as f64 / live as f64,
            peak.saturating_sub(rss_before) as f64 / live as f64,
            (peak as f64 - 256.0 * 1048576.0).max(0.0) / live as f64
        );
    }
    println!(
        "growth: {} steady sites, slope of the first {:.0} bytes/step",
        analysis.growth.steady.len(),
        analysis
            .growth
            .steady
            .first()
            .map_or(0.0, |s| s.course.slope())
    );
    if testing {
        let _ = std::fs::remove_file(&path);
    }
}
