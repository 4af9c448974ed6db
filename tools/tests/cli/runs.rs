//! Synthetic runs of one small Python training program, written with the collector's
//! `TraceWriter`, for the comparisons: each run can load its libraries elsewhere (ASLR), have
//! its Python lines moved by lines inserted above them, and carry one more leak.

use std::path::{Path, PathBuf};

use vramtrace_collector::event::{Api, Event, MemKind, Op};
use vramtrace_collector::format::{
    End, Header, Module, PyCode, PyFrame, PyStackDef, Record, Segment, StackDef, Stats, TraceWriter,
};

use crate::support::MIB;

/// What differs between runs.
#[derive(Clone, Copy, Debug, Default)]
pub struct Variant {
    /// Added to every module's load address.
    pub aslr: u64,
    /// Lines inserted above `Model.step` (its first line and every line in it move down).
    pub inserted_lines: u32,
    /// A 4 MiB tensor kept every step, at its own line of `Model.step`.
    pub extra_leak: bool,
    pub pid: u32,
    pub rank: Option<i32>,
}

/// Steps of each run.
pub const STEPS: u64 = 10;

const APP: u64 = 0x5500_0000_0000;
const TORCH: u64 = 0x7f00_0000_0000;
const CUDART: u64 = 0x7f10_0000_0000;

fn module(id: u32, path: &str, start: u64) -> Record {
    Record::Module(Module {
        id,
        path: path.into(),
        base: start,
        segments: vec![Segment {
            start,
            len: 0x10_0000,
            executable: true,
        }],
        build_id: vec![0x5a, id as u8],
    })
}

/// The records of one run: per step, a 512 KiB activation made and freed (never at a peak), a 1 MiB history tensor
/// kept (`train.py:12` in `Model.step`), and with `extra_leak` a 4 MiB tensor kept
/// (`train.py:13`); lines as in the unedited program.
pub fn records(v: Variant) -> Vec<Record> {
    let (app, torch, cudart) = (APP + v.aslr, TORCH + v.aslr, CUDART + v.aslr);
    let shift = v.inserted_lines;
    let mut r = vec![
        module(1, "/usr/bin/python3.12", app),
        module(2, "/opt/venv/lib/libtorch_cuda.so", torch),
        module(3, "/usr/local/cuda/lib64/libcudart.so.13", cudart),
    ];
    for (id, at) in [(1, 0x1234), (2, 0x2000), (3, 0x3000)] {
        r.push(Record::Stack(StackDef {
            id,
            frames: vec![cudart + 0x100, torch + at, app + 0x10],
        }));
    }
    for (id, function, first_line) in [(1, "<module>", 1), (2, "Model.step", 10 + shift)] {
        r.push(Record::PyCode(PyCode {
            id,
            file: "/srv/job/train.py".into(),
            function: function.into(),
            first_line,
        }));
    }
    for (id, line) in [(1, 12), (2, 14), (3, 13)] {
        r.push(Record::PyStack(PyStackDef {
            id,
            frames: vec![
                PyFrame {
                    code: 2,
                    line: line + shift,
                },
                PyFrame {
                    code: 1,
                    line: 30 + shift,
                },
            ],
        }));
    }
    let mut seq = 0;
    let mut event = |api: Api, op: Op, stack: u32, py_stack: u32| {
        seq += 1;
        Record::Event(Event {
            time_ns: seq * 1_000_000,
            thread: 1,
            context: 0xc7,
            caller: cudart + 0x100,
            stack,
            py_stack,
            ..Event::new(seq, api, op)
        })
    };
    let alloc = |ptr: u64, size: u64| Op::Alloc {
        kind: MemKind::Device,
        ptr,
        size,
        stream: 0,
        pool: 0,
        flags: 0,
        pitch: 0,
    };
    for step in 0..STEPS {
        r.push(event(Api::TracerMarkStep, Op::MarkStep { step }, 0, 0));
        let activation = 0x7000_0000_0000;
        r.push(event(Api::CudaMalloc, alloc(activation, MIB / 2), 3, 2));
        r.push(event(
            Api::CudaFree,
            Op::Free {
                ptr: activation,
                stream: 0,
            },
            3,
            2,
        ));
        let kept = 0x7100_0000_0000 + step * 16 * MIB;
        r.push(event(Api::CudaMalloc, alloc(kept, MIB), 1, 1));
        if v.extra_leak {
            r.push(event(Api::CudaMalloc, alloc(kept + 8 * MIB, 4 * MIB), 2, 3));
        }
    }
    let stats = Stats {
        events: seq,
        ..Stats::default()
    };
    r.push(Record::Stats(stats.clone()));
    r.push(Record::End(End {
        time_ns: (seq + 1) * 1_000_000,
        stats,
        reason: "exit".into(),
    }));
    r
}

/// Writes run `v` to `dir/name`: a process of its own, started after every run written before
/// (`diff` refuses two traces of one process).
pub fn write_run(dir: &Path, name: &str, v: Variant) -> PathBuf {
    static STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let started = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.join(name);
    let header = Header {
        tool_version: "0.1.0".into(),
        pid: v.pid,
        ppid: 1,
        host: "node-1".into(),
        rank: v.rank,
        command_line: vec!["python".into(), "train.py".into()],
        pointer_size: 8,
        start_unix_ns: 1_700_000_000_000_000_000 + started,
        ..Header::default()
    };
    let mut w = TraceWriter::new(std::fs::File::create(&path).unwrap(), &header).unwrap();
    for record in records(v) {
        w.write(&record).unwrap();
    }
    w.finish().unwrap();
    path
}
