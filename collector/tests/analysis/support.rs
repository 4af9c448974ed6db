//! Synthetic traces with planted ground truth: written with `TraceWriter`, read back with
//! `TraceReader` and replayed into a `LiveState`, exactly as the tools do.

use vramtrace_collector::event::{Api, CommEnd, Event, MemKind, Op};
use vramtrace_collector::format::{Header, Module, Record, Segment, TraceReader, TraceWriter};
use vramtrace_collector::live::{LiveState, StepSource};

pub const MIB: u64 = 1 << 20;
pub const KIB: u64 = 1 << 10;
pub const APP: u64 = 0x40_0000;
pub const APP_ID: u32 = 1;

/// A call site: a return address inside the application module.
pub const fn site(n: u64) -> u64 {
    APP + 0x100 * n
}

/// Records of a trace being built; events get increasing sequence numbers and times.
pub struct Builder {
    pub records: Vec<Record>,
    seq: u64,
    /// Nanoseconds per event.
    pub tick_ns: u64,
    pub time_ns: u64,
    pub device: i32,
    pub context: u64,
    pub caller: u64,
    pub scope: u64,
}

impl Builder {
    pub fn new() -> Self {
        let app = Record::Module(Module {
            id: APP_ID,
            path: "/opt/app/train".into(),
            base: APP,
            segments: vec![Segment {
                start: APP,
                len: 0x10_0000,
                executable: true,
            }],
            build_id: vec![],
        });
        Builder {
            records: vec![app],
            seq: 0,
            tick_ns: 1000,
            time_ns: 0,
            device: 0,
            context: 0xc0,
            caller: site(1),
            scope: 0,
        }
    }

    /// Adds an event; returns its sequence number.
    pub fn call(&mut self, api: Api, op: Op, result: i32) -> u64 {
        self.seq += 1;
        self.time_ns += self.tick_ns;
        self.records.push(Record::Event(Event {
            time_ns: self.time_ns,
            thread: 7,
            result,
            device: self.device,
            context: self.context,
            caller: self.caller,
            nccl_scope: self.scope,
            ..Event::new(self.seq, api, op)
        }));
        self.seq
    }

    pub fn ok(&mut self, api: Api, op: Op) -> u64 {
        self.call(api, op, 0)
    }

    /// `cudaMalloc` from call site `at`.
    pub fn malloc(&mut self, at: u64, ptr: u64, size: u64) -> u64 {
        self.caller = at;
        self.ok(Api::CudaMalloc, alloc(MemKind::Device, ptr, size, 0))
    }

    /// `cudaMallocAsync` (default pool) from call site `at`.
    pub fn malloc_async(&mut self, at: u64, ptr: u64, size: u64) -> u64 {
        self.caller = at;
        self.ok(Api::CudaMallocAsync, alloc(MemKind::Async, ptr, size, 0))
    }

    pub fn free(&mut self, ptr: u64) -> u64 {
        self.ok(Api::CudaFree, Op::Free { ptr, stream: 0 })
    }

    pub fn mark(&mut self, step: u64) -> u64 {
        self.ok(Api::TracerMarkStep, Op::MarkStep { step })
    }

    /// The trace as a file's bytes.
    pub fn bytes(&self) -> Vec<u8> {
        let mut w = TraceWriter::new(Vec::new(), &Header::default())
            .unwrap()
            .with_chunk_bytes(4096);
        for r in &self.records {
            w.write(r).unwrap();
        }
        w.finish().unwrap()
    }

    /// Replays the written trace with steps from marks.
    pub fn replay(&self) -> LiveState {
        replay(&self.bytes(), StepSource::Marks)
    }

    /// The same trace without its step marks.
    pub fn without_marks(&self) -> Builder {
        // Numbered as a tracer that saw no marks would number them: a gap would be a lost event.
        let mut seq = 0;
        let records = self
            .records
            .iter()
            .filter(|r| !matches!(r, Record::Event(e) if matches!(e.op, Op::MarkStep { .. })))
            .cloned()
            .map(|mut r| {
                if let Record::Event(e) = &mut r {
                    seq += 1;
                    e.seq = seq;
                }
                r
            })
            .collect();
        Builder {
            records,
            seq,
            tick_ns: self.tick_ns,
            time_ns: self.time_ns,
            device: self.device,
            context: self.context,
            caller: self.caller,
            scope: self.scope,
        }
    }
}

/// Reads a written trace back and applies every record.
pub fn replay(bytes: &[u8], source: StepSource) -> LiveState {
    let mut reader = TraceReader::new(bytes).unwrap();
    let mut state = LiveState::with_step_source(source);
    for r in reader.by_ref() {
        state.apply(&r);
    }
    assert!(reader.ending().is_some());
    state
}

pub fn alloc(kind: MemKind, ptr: u64, size: u64, pool: u64) -> Op {
    Op::Alloc {
        kind,
        ptr,
        size,
        stream: 0,
        pool,
        flags: 0,
        pitch: 0,
    }
}

pub fn comm_init(comm: u64) -> Op {
    Op::CommInit {
        comm,
        nranks: 1,
        rank: 0,
        parent: 0,
        color: 0,
        key: 0,
    }
}

pub fn comm_end(comm: u64, how: CommEnd) -> Op {
    Op::CommEnd { comm, how }
}

/// The call site of return address `caller` as reports name it (`train+0x…`).
pub fn name(caller: u64) -> String {
    format!("train+{:#x}", caller - APP)
}
