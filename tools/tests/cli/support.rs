//! Traces with known contents, written with the collector's `TraceWriter`, and a way to run the
//! `vramtrace` binary on them.

use std::path::{Path, PathBuf};

use vramtrace_collector::event::{Api, CommEnd, Event, MemKind, Op};
use vramtrace_collector::format::{
    Alert, End, Header, Lookup, Module, PyCode, PyFrame, PyStackDef, Record, Segment, StackDef,
    Stats, TraceWriter,
};

pub const TORCH: u64 = 0x7f00_0000_0000;
pub const CUDART: u64 = 0x7f10_0000_0000;
pub const NCCL: u64 = 0x7f20_0000_0000;
pub const APP: u64 = 0x40_0000;

pub const MIB: u64 = 1 << 20;

/// The `vramtrace` binary under test.
pub fn vramtrace() -> assert_cmd::Command {
    assert_cmd::Command::new(env!("CARGO_BIN_EXE_vramtrace"))
}

/// The JSON document `vramtrace ARGS --json PATH` prints; it must succeed.
pub fn json_of(args: &[&str], path: &std::path::Path) -> serde_json::Value {
    let out = vramtrace()
        .args(args)
        .arg("--json")
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

pub fn header() -> Header {
    Header {
        tool_version: "0.1.0".into(),
        pid: 4242,
        ppid: 1,
        host: "gpu-node-7".into(),
        rank: Some(3),
        local_rank: Some(1),
        world_size: Some(8),
        command_line: vec![
            "python".into(),
            "train.py".into(),
            "--epochs".into(),
            "1".into(),
        ],
        pointer_size: 8,
        ..Header::default()
    }
}

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
        build_id: vec![0xab, 0xcd],
    })
}

/// Builds events with increasing sequence numbers.
struct Events {
    seq: u64,
}

impl Events {
    fn event(&mut self, api: Api, op: Op, caller: u64) -> Event {
        self.seq += 1;
        Event {
            time_ns: self.seq * 1_000,
            thread: 11,
            context: 0xc7,
            caller,
            ..Event::new(self.seq, api, op)
        }
    }

    fn malloc(&mut self, ptr: u64, size: u64, caller: u64) -> Event {
        let op = Op::Alloc {
            kind: MemKind::Device,
            ptr,
            size,
            stream: 0,
            pool: 0,
            flags: 0,
            pitch: 0,
        };
        self.event(Api::CudaMalloc, op, caller)
    }

    fn free(&mut self, ptr: u64, caller: u64) -> Event {
        self.event(Api::CudaFree, Op::Free { ptr, stream: 0 }, caller)
    }
}

/// The known workload, as records. The first `FIRST_CHUNK` records are the setup and the three
/// application leaks (one at a stack site, twice, and one at a caller site), plus a freed
/// temporary: 2.5 MiB live. Then an out-of-memory failure, a double free, a communicator whose
/// init made two buffers and whose destroy freed one, an unwrapped lookup, a warning, stats and
/// the end record: 4.5 MiB live in 4 objects at the end.
pub fn workload() -> Vec<Record> {
    let mut e = Events { seq: 0 };
    let mut r = vec![
        module(1, "/usr/bin/python3.12", APP),
        module(2, "/usr/lib/libtorch_cuda.so", TORCH),
        module(3, "/usr/local/cuda/lib64/libcudart.so.13", CUDART),
        module(4, "/usr/lib/libnccl.so.2", NCCL),
        Record::Stack(StackDef {
            id: 1,
            frames: vec![TORCH + 0x1234, APP + 0x10],
        }),
    ];
    for ptr in [0x7000_0000_0000, 0x7000_0010_0000] {
        let mut leak = e.malloc(ptr, MIB, TORCH + 0x1234);
        leak.stack = 1;
        r.push(Record::Event(leak));
    }
    r.push(Record::Event(e.malloc(0x7000_0020_0000, 4096, APP + 0x20)));
    r.push(Record::Event(e.free(0x7000_0020_0000, APP + 0x24)));
    r.push(Record::Event(e.malloc(
        0x7000_0030_0000,
        MIB / 2,
        APP + 0x30,
    )));
    assert_eq!(r.len(), FIRST_CHUNK);

    let mut oom = e.malloc(0, 8 << 30, TORCH + 0x1234);
    oom.result = 2;
    r.push(Record::Event(oom));
    let mut double = e.free(0x7000_0020_0000, APP + 0x40);
    double.result = 1;
    r.push(Record::Event(double));

    for (ptr, size) in [(0x7000_0040_0000, 2 * MIB), (0x7000_0060_0000, MIB)] {
        let mut buffer = e.malloc(ptr, size, NCCL + 0x500);
        buffer.nccl_scope = 77;
        r.push(Record::Event(buffer));
    }
    let init = Op::CommInit {
        comm: 0xc0,
        nranks: 8,
        rank: 3,
        parent: 0,
        color: 0,
        key: 0,
    };
    let mut init = e.event(Api::NcclCommInitRank, init, APP + 0x50);
    init.nccl_scope = 77;
    r.push(Record::Event(init));
    let mut free = e.free(0x7000_0060_0000, NCCL + 0x600);
    free.nccl_scope = 78;
    r.push(Record::Event(free));
    let destroy = Op::CommEnd {
        comm: 0xc0,
        how: CommEnd::Destroy,
    };
    let mut destroy = e.event(Api::NcclCommDestroy, destroy, APP + 0x60);
    destroy.nccl_scope = 78;
    r.push(Record::Event(destroy));

    r.push(Record::Warning(
        "VRAMTRACE_STACK_DEPTH=abc is not a number; using 16".into(),
    ));
    let stats = Stats {
        dropped: 0,
        late: 0,
        hook_panics: 0,
        missing_real: 0,
        events: e.seq,
    };
    r.push(Record::Stats(stats.clone()));
    r.push(Record::End(End {
        time_ns: 99_000,
        stats,
        reason: "exit".into(),
    }));
    r
}

/// Records in the first chunk of [`write_workload`]'s file.
pub const FIRST_CHUNK: usize = 10;

/// Writes the workload with a chunk boundary after [`FIRST_CHUNK`] records; returns the path
/// and the byte offset where the second chunk starts.
pub fn write_workload(dir: &Path, name: &str) -> (PathBuf, u64) {
    let path = dir.join(name);
    let file = std::fs::File::create(&path).unwrap();
    let mut w = TraceWriter::new(file, &header()).unwrap();
    let records = workload();
    let mut boundary = 0;
    for (i, record) in records.iter().enumerate() {
        w.write(record).unwrap();
        if i + 1 == FIRST_CHUNK {
            w.flush_chunk().unwrap();
            boundary = w.bytes_written();
        }
    }
    w.finish().unwrap();
    (path, boundary)
}

/// A training run of six steps, each begun with a step mark: step 1 allocates a 16 MiB
/// workspace that stays (a one-off that bends device 0's own line so it is no steady line),
/// and every later step leaks 1 MiB at one call site (steady growth at that site), as does the
/// end of the run. Nothing is freed: right after step `k > 1` began, `16 + (k - 2)` MiB is live;
/// at the end (the peak, event 13) 22 MiB in 7 objects.
pub fn six_step_training() -> Vec<Record> {
    let mut e = Events { seq: 0 };
    let mut r = vec![
        module(1, "/usr/bin/python3.12", APP),
        module(2, "/usr/lib/libtorch_cuda.so", TORCH),
    ];
    let mut ptr = 0x7000_0000_0000;
    for step in 1..=6 {
        let mark = e.event(Api::TracerMarkStep, Op::MarkStep { step }, APP + 0x70);
        r.push(Record::Event(mark));
        if step == 1 {
            r.push(Record::Event(e.malloc(
                0x7100_0000_0000,
                16 * MIB,
                APP + 0x80,
            )));
        } else {
            r.push(Record::Event(e.malloc(ptr, MIB, TORCH + 0x1234)));
            ptr += MIB;
        }
    }
    r.push(Record::Event(e.malloc(ptr, MIB, TORCH + 0x1234)));
    let stats = Stats {
        dropped: 0,
        late: 0,
        hook_panics: 0,
        missing_real: 0,
        events: e.seq,
    };
    r.push(Record::Stats(stats.clone()));
    r.push(Record::End(End {
        time_ns: e.seq * 1_000 + 1,
        stats,
        reason: "exit".into(),
    }));
    r
}

/// Writes [`six_step_training`] to `dir/name`: another process than the other traces here
/// (one process's two traces are one trace twice to the commands that read a directory).
pub fn write_six_step_training(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let file = std::fs::File::create(&path).unwrap();
    let header = Header {
        pid: header().pid + 1,
        ..header()
    };
    let mut w = TraceWriter::new(file, &header).unwrap();
    for record in six_step_training() {
        w.write(&record).unwrap();
    }
    w.finish().unwrap();
    path
}

/// The training-loop trace's application library (not an interpreter, so its frames show).
pub const TRAINER: u64 = 0x7f30_0000_0000;
/// Steps in [`write_training`]'s trace.
pub const TRAINING_STEPS: u64 = 12;
/// Events in [`write_training`]'s trace.
pub const TRAINING_EVENTS: u64 = 1 + 6 * TRAINING_STEPS + 2;
/// The step at whose mark [`write_training`]'s tracer alerted.
pub const TRAINING_ALERT_STEP: u64 = 10;

/// A training loop with planted truth, written to `dir/name`: an NCCL buffer of 2 MiB live
/// throughout; then 12 steps, each a step mark, an NVTX range "forward" around an 8 MiB
/// temporary (freed within the step; Python line `train.py:30 in forward`) and a 1 MiB leak
/// (never freed; `train.py:42 in step`); a mark "checkpoint" after step 6; and after the last
/// step a `cudaMalloc` of 64 GiB that fails out of memory. Events are 1 ms apart. The tracer
/// raised its live alert at step 10's mark (0.5 ms after it, and sent SIGUSR1): see
/// [`TRAINING_ALERT_STEP`].
///
/// At the end 14 MiB of device memory is live in 13 objects (12 MiB at the leak site); the
/// peak is 22 MiB, in the last step while its temporary is live.
pub fn write_training(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let mut w = TraceWriter::new(std::fs::File::create(&path).unwrap(), &header()).unwrap();
    for record in &training() {
        w.write(record).unwrap();
    }
    w.finish().unwrap();
    path
}

/// The records of [`write_training`].
pub fn training() -> Vec<Record> {
    let mut e = Events { seq: 0 };
    let time = |ev: &mut Event| ev.time_ns = 1_000_000 * ev.seq;
    let mut r = vec![
        module(1, "/opt/app/libtrainer.so", TRAINER),
        module(2, "/usr/lib/libtorch_cuda.so", TORCH),
        module(3, "/usr/local/cuda/lib64/libcudart.so.13", CUDART),
        module(4, "/usr/lib/libnccl.so.2", NCCL),
        Record::Stack(StackDef {
            id: 1,
            frames: vec![TORCH + 0x1234, TRAINER + 0x10],
        }),
        Record::Stack(StackDef {
            id: 2,
            frames: vec![TORCH + 0x2000, TRAINER + 0x110],
        }),
        Record::PyCode(PyCode {
            id: 1,
            file: "/work/app/train.py".into(),
            function: "<module>".into(),
            first_line: 1,
        }),
        Record::PyCode(PyCode {
            id: 2,
            file: "/work/app/train.py".into(),
            function: "step".into(),
            first_line: 40,
        }),
        Record::PyCode(PyCode {
            id: 3,
            file: "/work/app/train.py".into(),
            function: "forward".into(),
            first_line: 28,
        }),
        // Innermost first: the leak at line 42 of step(), called from line 88.
        Record::PyStack(PyStackDef {
            id: 1,
            frames: vec![PyFrame { code: 2, line: 42 }, PyFrame { code: 1, line: 88 }],
        }),
        Record::PyStack(PyStackDef {
            id: 2,
            frames: vec![
                PyFrame { code: 3, line: 30 },
                PyFrame { code: 2, line: 41 },
                PyFrame { code: 1, line: 88 },
            ],
        }),
    ];
    let mut nccl = e.malloc(0x7100_0000_0000, 2 * MIB, NCCL + 0x500);
    time(&mut nccl);
    r.push(Record::Event(nccl));
    for step in 0..TRAINING_STEPS {
        let mut mark = e.event(Api::TracerMarkStep, Op::MarkStep { step }, TRAINER + 0x200);
        time(&mut mark);
        let mut push = e.event(
            Api::NvtxRangePush,
            Op::RangePush {
                name: "forward".into(),
            },
            TRAINER + 0x300,
        );
        time(&mut push);
        let temp_ptr = 0x7200_0000_0000;
        let mut temp = e.malloc(temp_ptr, 8 * MIB, TORCH + 0x2000);
        temp.stack = 2;
        temp.py_stack = 2;
        time(&mut temp);
        let mut leak = e.malloc(0x7300_0000_0000 + step * MIB, MIB, TORCH + 0x1234);
        leak.stack = 1;
        leak.py_stack = 1;
        time(&mut leak);
        let mut free = e.free(temp_ptr, TORCH + 0x2100);
        time(&mut free);
        let mut pop = e.event(Api::NvtxRangePop, Op::RangePop, TRAINER + 0x310);
        time(&mut pop);
        let alert = (step + 1 == TRAINING_ALERT_STEP).then(|| Alert {
            time_ns: mark.time_ns + 500_000,
            after_seq: mark.seq,
            step: TRAINING_ALERT_STEP,
            device: 0,
            reason: "growth".into(),
            rate: MIB,
            unit: "step".into(),
            unit_ns: 6_000_000,
            threshold: MIB / 2,
            live_bytes: 11 * MIB,
            device_memory: 1 << 30,
            steps_to_full: Some(1013),
            seconds_to_full: Some(6),
            place: "/work/app/train.py:42 in step".into(),
            place_rate: MIB,
            stack: 1,
            caller: TORCH + 0x1234,
            py_stack: 1,
            signal: libc::SIGUSR1,
            snapshot: String::new(),
        });
        r.extend([mark, push, temp, leak, free, pop].map(Record::Event));
        r.extend(alert.map(|a| Record::Alert(Box::new(a))));
        if step == 5 {
            let mut m = e.event(
                Api::NvtxMark,
                Op::Mark {
                    name: "checkpoint".into(),
                },
                TRAINER + 0x400,
            );
            time(&mut m);
            r.push(Record::Event(m));
        }
    }
    let mut oom = e.malloc(0, 64 << 30, TORCH + 0x1234);
    oom.stack = 1;
    oom.py_stack = 1;
    oom.result = 2;
    time(&mut oom);
    r.push(Record::Event(oom));
    let stats = Stats {
        events: e.seq,
        ..Stats::default()
    };
    assert_eq!(e.seq, TRAINING_EVENTS);
    r.push(Record::End(End {
        time_ns: (e.seq + 1) * 1_000_000,
        stats,
        reason: "exit".into(),
    }));
    r
}

/// [`training`], its leak freed at the exit: the twelve 1 MiB buffers of line 42 freed after
/// the out-of-memory failure, before the end record (nothing of the leak is live at the end).
pub fn training_freed_at_exit() -> Vec<Record> {
    let mut r = training();
    let Some(Record::End(mut end)) = r.pop() else {
        panic!("training() ends with its end record")
    };
    let mut e = Events {
        seq: TRAINING_EVENTS,
    };
    for step in 0..TRAINING_STEPS {
        let mut free = e.free(0x7300_0000_0000 + step * MIB, TORCH + 0x1300);
        free.time_ns = 1_000_000 * free.seq;
        r.push(Record::Event(free));
    }
    end.stats.events = e.seq;
    end.time_ns = (e.seq + 1) * 1_000_000;
    r.push(Record::End(end));
    r
}

/// A healthy loop that keeps a ring of `slots` 1 MiB buffers: each of `steps` steps (marked)
/// frees the oldest and makes a new one at one call site, so the device holds `slots` MiB from
/// step `slots` on and never grows; the buffers live at the end are the last `slots` made, one a
/// step.
pub fn ring(steps: u64, slots: u64) -> Vec<Record> {
    let mut e = Events { seq: 0 };
    let time = |ev: &mut Event| ev.time_ns = 1_000_000 * ev.seq;
    let mut r = vec![
        module(1, "/opt/app/libtrainer.so", TRAINER),
        module(2, "/usr/lib/libtorch_cuda.so", TORCH),
    ];
    let slot = |step: u64| 0x7400_0000_0000 + (step % slots) * MIB;
    for step in 0..steps {
        let mut mark = e.event(Api::TracerMarkStep, Op::MarkStep { step }, TRAINER + 0x200);
        time(&mut mark);
        r.push(Record::Event(mark));
        if step >= slots {
            let mut free = e.free(slot(step), TORCH + 0x3100);
            time(&mut free);
            r.push(Record::Event(free));
        }
        let mut made = e.malloc(slot(step), MIB, TORCH + 0x3000);
        time(&mut made);
        r.push(Record::Event(made));
    }
    let stats = Stats {
        events: e.seq,
        ..Stats::default()
    };
    r.push(Record::End(End {
        time_ns: (e.seq + 1) * 1_000_000,
        stats,
        reason: "exit".into(),
    }));
    r
}

/// `records` written as the tracer writes a trace cut into segments: `name` and then
/// `NAME.segN.vtrace` beside it, a segment cut after every `every` events, each after the first
/// beginning with the snapshot of the live state the events before it give, each ending with
/// its `SegmentEnd`. Returns the files in order.
pub fn write_segments(dir: &Path, name: &str, records: &[Record], every: u64) -> Vec<PathBuf> {
    use vramtrace_collector::event::SegmentPeak;
    use vramtrace_collector::format::{SegmentEnd, SegmentInfo};
    use vramtrace_collector::live::{Holder, LiveState};
    let stem = name.strip_suffix(".vtrace").unwrap();
    let mut state = LiveState::without_step_detection();
    let segment_end = |state: &LiveState, index: u32, events: u64| SegmentEnd {
        index,
        events,
        last_seq: state.last_seq(),
        time_ns: state.last_time_ns(),
        steps: state.steps(),
        peaks: (state.holders().into_iter())
            .filter_map(|h| match h.holder {
                Holder::Device { device } => Some(SegmentPeak {
                    device,
                    bytes: h.peak.bytes,
                    event: h.peak.event,
                    seq: h.peak.seq,
                    time_ns: h.peak.time_ns,
                }),
                Holder::Host => None,
            })
            .collect(),
    };
    let open = |index: u32, info: SegmentInfo| {
        let file = match index {
            1 => name.to_string(),
            n => format!("{stem}.seg{n}.vtrace"),
        };
        let h = Header {
            segment: Some(info),
            ..header()
        };
        let path = dir.join(file);
        let w = TraceWriter::new(std::fs::File::create(&path).unwrap(), &h)
            .unwrap()
            .with_chunk_bytes(4096);
        (w, path)
    };
    let first = SegmentInfo {
        index: 1,
        ..SegmentInfo::default()
    };
    let (mut w, path) = open(1, first);
    let (mut paths, mut index, mut in_segment) = (vec![path], 1, 0);
    for r in records {
        if matches!(r, Record::End(_)) {
            w.write(&Record::SegmentEnd(segment_end(&state, index, in_segment)))
                .unwrap();
        }
        state.apply(r);
        w.write(r).unwrap();
        if !matches!(r, Record::Event(_)) {
            continue;
        }
        in_segment += 1;
        if in_segment == every {
            w.write(&Record::SegmentEnd(segment_end(&state, index, in_segment)))
                .unwrap();
            w.finish().unwrap();
            let bytes_before: u64 = (paths.iter())
                .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
                .sum();
            index += 1;
            let info = SegmentInfo {
                index,
                events_before: state.events(),
                last_seq: state.last_seq(),
                time_ns: state.last_time_ns(),
                steps: state.steps(),
                bytes_before,
            };
            let (next, path) = open(index, info);
            w = next;
            paths.push(path);
            for p in state.snapshot_records(state.snapshot()) {
                w.write(&p).unwrap();
            }
            in_segment = 0;
        }
    }
    w.finish().unwrap();
    paths
}

/// `pairs` allocations of 1 MiB, each freed by the next event, but the one in the middle is of
/// 5 MiB: a trace long enough to be downsampled whose peak, 5 MiB, lasts one event.
pub fn write_pairs(dir: &Path, name: &str, pairs: u64) -> PathBuf {
    let mut e = Events { seq: 0 };
    let mut r = vec![module(2, "/usr/lib/libtorch_cuda.so", TORCH)];
    for i in 0..pairs {
        let size = if i == pairs / 2 { 5 * MIB } else { MIB };
        r.push(Record::Event(e.malloc(
            0x7400_0000_0000,
            size,
            TORCH + 0x10,
        )));
        r.push(Record::Event(e.free(0x7400_0000_0000, TORCH + 0x20)));
    }
    let path = dir.join(name);
    let mut w = TraceWriter::new(std::fs::File::create(&path).unwrap(), &header()).unwrap();
    for record in &r {
        w.write(record).unwrap();
    }
    w.finish().unwrap();
    path
}

/// Writes `records` as a trace at `dir/name`.
pub fn write_records(dir: &Path, name: &str, records: &[Record]) -> PathBuf {
    let path = dir.join(name);
    let mut w = TraceWriter::new(std::fs::File::create(&path).unwrap(), &header()).unwrap();
    for record in records {
        w.write(record).unwrap();
    }
    w.finish().unwrap();
    path
}

/// 12 marked steps around a 4 MiB buffer kept throughout, and a temporary of 32 MiB made in
/// step 4 and freed in step 7: a one-off peak of the device and of its place.
pub fn write_one_off_peak(dir: &Path, name: &str) -> PathBuf {
    let mut e = Events { seq: 0 };
    let mut r = vec![module(2, "/usr/lib/libtorch_cuda.so", TORCH)];
    r.push(Record::Event(e.malloc(
        0x7100_0000_0000,
        4 * MIB,
        TORCH + 0x10,
    )));
    for step in 0..12 {
        r.push(Record::Event(e.event(
            Api::TracerMarkStep,
            Op::MarkStep { step },
            TORCH + 0x200,
        )));
        match step {
            4 => r.push(Record::Event(e.malloc(
                0x7200_0000_0000,
                32 * MIB,
                TORCH + 0x40,
            ))),
            7 => r.push(Record::Event(e.free(0x7200_0000_0000, TORCH + 0x44))),
            _ => {}
        }
    }
    write_records(dir, name, &r)
}

/// A driver function handed out without its wrapper (calls through it are not in the trace).
pub fn lookup() -> Record {
    Record::Lookup(Lookup {
        via: "cuGetProcAddress_v2".into(),
        symbol: "cuMemAlloc".into(),
        cuda_version: 11020,
        flags: 0,
        reason: "ABI version not wrapped".into(),
    })
}

/// Makes a FIFO at `path`.
pub fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(made.success());
}
