//! Records with known contents, written and read back.

use vramtrace_collector::event::{Api, CommEnd, Event, MemKind, Op};
use vramtrace_collector::format::{
    End, Header, Module, Record, RecordRef, Segment, StackDef, Stats, TraceReader, TraceWriter,
};

pub fn header() -> Header {
    Header {
        tool_version: "test".into(),
        pid: 42,
        ppid: 1,
        host: "h".into(),
        command_line: vec!["prog".into(), "--x".into()],
        pointer_size: 8,
        ..Header::default()
    }
}

pub fn event(seq: u64) -> Event {
    Event {
        time_ns: 1000 + seq,
        thread: 7,
        inner: Some(Api::CuMemAlloc),
        context: 0xc0,
        caller: 0x401000 + seq,
        ..Event::new(
            seq,
            Api::CudaMalloc,
            Op::Alloc {
                kind: MemKind::Device,
                ptr: 0x7000_0000_0000 + seq * 512,
                size: 512,
                stream: 0,
                pool: 0,
                flags: 0,
                pitch: 0,
            },
        )
    }
}

/// A module, a stack, `n` events and the end record.
pub fn sample_records(n: u64) -> Vec<Record> {
    let mut v = vec![
        Record::Module(Module {
            id: 1,
            path: "/bin/prog".into(),
            base: 0x400000,
            segments: vec![Segment {
                start: 0x400000,
                len: 0x1000,
                executable: true,
            }],
            build_id: vec![1, 2, 3],
        }),
        Record::Stack(StackDef {
            id: 1,
            frames: vec![1, 2, 3],
        }),
    ];
    v.extend((0..n).map(|i| Record::Event(event(i))));
    v.push(Record::End(End {
        time_ns: 5,
        stats: Stats {
            events: n,
            ..Stats::default()
        },
        reason: "exit".into(),
    }));
    v
}

/// A deterministic xorshift generator.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Events of many shapes: allocations and frees between failures, nested calls, other
/// operations, and changes of thread, place, stacks and NCCL scope, so that each kind follows
/// each other kind; now and then a record that is not an event.
pub fn varied_records(n: u64) -> Vec<Record> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut records = sample_records(0);
    records.pop();
    for seq in 1..=n {
        let r = rng.next();
        let mut e = event(seq);
        e.inner = None;
        e.thread = 1 + (r % 3) as u32;
        e.caller = 0x401000 + (r >> 8) % 5 * 0x40;
        e.op = match (r >> 16) % 10 {
            0..=3 => Op::Alloc {
                kind: if r >> 20 & 1 == 0 {
                    MemKind::Device
                } else {
                    MemKind::Async
                },
                ptr: 0x7000_0000_0000 + (r >> 24) % 64 * 0x1000,
                size: 512 << ((r >> 30) % 4),
                stream: (r >> 32) % 2,
                pool: 0,
                flags: 0,
                pitch: 0,
            },
            4..=6 => Op::Free {
                ptr: 0x7000_0000_0000 + (r >> 24) % 64 * 0x1000,
                stream: 0,
            },
            7 => Op::FreeHost {
                ptr: 0x6000_0000_0000 + (r >> 24) % 8 * 0x1000,
            },
            8 => Op::RangePush {
                name: format!("r{}", r % 7),
            },
            _ => Op::MarkStep { step: seq },
        };
        match (r >> 40) % 12 {
            0 => e.result = 2,
            1 => e.inner = Some(Api::CuMemAlloc),
            2 => (e.device, e.context) = (1, 0xc1),
            3 => (e.stack, e.py_stack, e.py_inferred) = (1, 3, r >> 44 & 1 == 1),
            4 => e.nccl_scope = seq,
            5 => e.seq = seq + 2,
            // Every seldom-changing field zero, as a chunk's state starts.
            6 => e.context = 0,
            _ => {}
        }
        records.push(Record::Event(e));
        if r >> 48 & 31 == 0 {
            records.push(Record::Warning("w".repeat(90)));
        }
    }
    records
}

/// One operation of every variant, its fields drawn from `r`: zero, small or any value.
pub fn every_op(rng: &mut Rng) -> Vec<Op> {
    let mut v = || match rng.next() % 3 {
        0 => 0,
        1 => rng.next() % 300,
        _ => rng.next(),
    };
    let kinds = [
        MemKind::Device,
        MemKind::Async,
        MemKind::Managed,
        MemKind::Pitched,
        MemKind::HostPinned,
        MemKind::Array,
    ];
    let ends = [CommEnd::Destroy, CommEnd::Abort, CommEnd::Finalize];
    let mut u = || v();
    let mut ops = vec![
        Op::Alloc {
            kind: kinds[(u() % 6) as usize],
            ptr: u(),
            size: u(),
            stream: u(),
            pool: u(),
            flags: u() as u32,
            pitch: u(),
        },
        Op::Free {
            ptr: u(),
            stream: u(),
        },
        Op::FreeHost { ptr: u() },
        Op::HostRegister {
            ptr: u(),
            size: u(),
            flags: u() as u32,
        },
        Op::HostUnregister { ptr: u() },
        Op::Reserve {
            ptr: u(),
            size: u(),
            alignment: u(),
            hint: u(),
        },
        Op::ReserveFree {
            ptr: u(),
            size: u(),
        },
        Op::Create {
            handle: u(),
            size: u(),
            device: u() as i32,
            handle_types: u() as u32,
        },
        Op::Release { handle: u() },
        Op::Retain {
            handle: u(),
            ptr: u(),
        },
        Op::Import {
            handle: u(),
            shareable: u(),
            handle_type: u() as u32,
        },
        Op::Map {
            ptr: u(),
            size: u(),
            offset: u(),
            handle: u(),
        },
        Op::Unmap {
            ptr: u(),
            size: u(),
        },
        Op::PoolCreate {
            pool: u(),
            device: u() as i32,
        },
        Op::PoolDestroy { pool: u() },
        Op::PoolTrim {
            pool: u(),
            keep: u(),
        },
        Op::IpcOpen {
            ptr: u(),
            flags: u() as u32,
        },
        Op::IpcClose { ptr: u() },
        Op::ArrayCreate {
            array: u(),
            bytes: u(),
            width: u(),
            height: u(),
            depth: u(),
            format: u() as u32,
            channels: u() as u32,
        },
        Op::ArrayDestroy { array: u() },
        Op::CtxCreate {
            ctx: u(),
            device: u() as i32,
            flags: u() as u32,
        },
        Op::CtxDestroy { ctx: u() },
        Op::PrimaryCtxRelease { device: u() as i32 },
        Op::PrimaryCtxReset { device: u() as i32 },
        Op::DeviceReset { device: u() as i32 },
        Op::CommInit {
            comm: u(),
            nranks: u() as i32,
            rank: u() as i32,
            parent: u(),
            color: u() as i32,
            key: u() as i32,
        },
        Op::CommInitAll {
            comms: (0..u() % 4).map(|_| 0x1000).collect(),
            devices: vec![0, -1, i32::MAX],
        },
        Op::CommEnd {
            comm: u(),
            how: ends[(u() % 3) as usize],
        },
        Op::NcclMemAlloc {
            ptr: u(),
            size: u(),
        },
        Op::NcclMemFree { ptr: u() },
        Op::Register {
            comm: u(),
            ptr: u(),
            size: u(),
            handle: u(),
        },
        Op::Deregister {
            comm: u(),
            handle: u(),
        },
        Op::WindowRegister {
            comm: u(),
            ptr: u(),
            size: u(),
            window: u(),
            flags: u() as i32,
        },
        Op::WindowDeregister {
            comm: u(),
            window: u(),
        },
        Op::MarkStep { step: u() },
        Op::RangePush {
            name: "x".repeat((u() % 200) as usize),
        },
        Op::RangePop,
        Op::Mark { name: "ü".into() },
        Op::DeviceMemory {
            free: u(),
            total: u(),
        },
        Op::PrimaryCtxRetain {
            device: u() as i32,
            ctx: u(),
        },
    ];
    // A list longer than a short record, and an empty one.
    ops.push(Op::CommInitAll {
        comms: (0..300).collect(),
        devices: Vec::new(),
    });
    ops
}

/// Writes records with chunks of about `chunk` raw bytes, so that a trace has many chunks.
pub fn write(records: &[Record], chunk: usize) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), &header())
        .unwrap()
        .with_chunk_bytes(chunk);
    for r in records {
        w.write(r).unwrap();
    }
    w.finish().unwrap()
}

/// Every record of `bytes`, read on this thread.
pub fn read(bytes: &[u8]) -> Vec<Record> {
    TraceReader::new(bytes).unwrap().collect()
}

/// Reads every record with `next_event_or_record`, owning the lent events.
pub fn read_lent<R: std::io::Read>(r: &mut TraceReader<R>) -> Vec<Record> {
    let mut got = Vec::new();
    while let Some(next) = r.next_event_or_record() {
        got.push(match next {
            RecordRef::Event(e) => Record::Event(e.clone()),
            RecordRef::Other(record) => record,
        });
    }
    got
}

/// Events of every operation, with fields of every size and changing headers (the records of
/// `tests/fixtures/format/v4-every-op.vtrace`).
pub fn every_op_records() -> Vec<Record> {
    let mut rng = Rng(7);
    let mut records = Vec::new();
    let mut seq = 0;
    for round in 0..20u64 {
        for op in every_op(&mut rng) {
            seq += 1 + rng.next() % 2;
            let mut e = event(seq);
            e.op = op;
            e.time_ns = rng.next() % 1_000_000;
            e.thread = (rng.next() % 4) as u32;
            e.result = if rng.next().is_multiple_of(5) { 2 } else { 0 };
            e.inner = if round % 2 == 0 {
                None
            } else {
                Some(Api::CuMemAlloc)
            };
            e.caller = rng.next() % 0x100000;
            e.stack = (rng.next() % 3) as u32;
            e.nccl_scope = rng.next() % 2;
            records.push(Record::Event(e));
        }
    }
    records
}
