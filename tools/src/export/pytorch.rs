//! `export --format pytorch`: a PyTorch memory snapshot pickle, the format of
//! `torch.cuda.memory._snapshot()` that `torch.cuda._memory_viz` (`trace_plot`, `segment_plot`,
//! `stats`, `memory`) and pytorch.org/memory_viz read, holding vramtrace's driver-level view: every
//! device allocation by any library — PyTorch's caching allocator, NCCL, cuBLAS, extensions.
//!
//! Each pointer allocation (`cudaMalloc`, `cudaMallocAsync`, `cuMemAlloc`, managed and pitched
//! memory) is a segment holding one active block. `segments` is what is live at the end;
//! `device_traces` keeps the latest `--max-entries` entries, as PyTorch's recorder keeps a ring:
//! an allocation is `segment_alloc` then `alloc`, a free `free_requested`, `free_completed`,
//! `segment_free`. Both come from one replay of the allocations and frees in the trace (memory
//! a context teardown or device reset took away is freed there too), so the viewers can replay
//! the entries back from the segments, which they do. Memory mapped through the virtual memory
//! API (`cuMemCreate` + `cuMemMap`) is not in the snapshot.
//!
//! Integers are written as signed 64-bit values: PyTorch's JavaScript viewer reads wider pickle
//! integers as `BigInt`, which its arithmetic on addresses cannot mix with numbers.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Write;

use anyhow::{Context, Result};
use serde::Serialize;
use vramtrace_collector::event::{Event, Op};
use vramtrace_collector::live::{LiveState, StepSource};
use vramtrace_collector::symbols::{Attribution, CallRef, Symbolizer};

use super::frames::{Frame, Stacks};
use super::ExportArgs;
use crate::load::{read, Flow, Progress};

/// Frames kept per entry: PyTorch's pickles share one list between entries, serde-pickle
/// writes each out, so long stacks would multiply the file's size. The program's Python frames
/// say the most; native frames fill the rest, innermost first.
const MAX_FRAMES: usize = 24;
/// Native frames kept above the Python frames of a call that has both.
const NATIVE_WITH_PYTHON: usize = 6;

#[derive(Serialize)]
struct Snapshot {
    segments: Vec<Segment>,
    device_traces: Vec<Vec<TraceEntry>>,
    /// Not read by the viewers; says where the snapshot came from.
    vramtrace: Provenance,
}

#[derive(Serialize)]
struct Provenance {
    version: String,
    trace: String,
    view: &'static str,
    entries_omitted: i64,
}

#[derive(Serialize)]
struct PyFrame {
    name: String,
    filename: String,
    line: i64,
}

#[derive(Serialize)]
struct Segment {
    device: i64,
    address: i64,
    total_size: i64,
    allocated_size: i64,
    active_size: i64,
    requested_size: i64,
    stream: i64,
    segment_type: &'static str,
    segment_pool_id: (i64, i64),
    is_expandable: bool,
    frames: Vec<PyFrame>,
    blocks: Vec<Block>,
}

#[derive(Serialize)]
struct Block {
    address: i64,
    size: i64,
    requested_size: i64,
    state: &'static str,
    frames: Vec<PyFrame>,
}

#[derive(Serialize)]
struct TraceEntry {
    action: &'static str,
    addr: i64,
    size: i64,
    stream: i64,
    time_us: i64,
    compile_context: &'static str,
    user_metadata: &'static str,
    frames: Vec<PyFrame>,
}

/// A live pointer allocation, as the replay of allocations and frees has it.
#[derive(Clone, Copy)]
struct Live {
    size: u64,
    device: i32,
    context: u64,
    stream: u64,
    call: CallRef,
}

/// One action of the recorded ring, its frames looked up at the end.
struct Action {
    device: i32,
    action: &'static str,
    addr: u64,
    size: u64,
    stream: u64,
    time_ns: u64,
    call: CallRef,
}

/// The replay of pointer allocations and frees, with the latest entries.
struct Recorder {
    live: HashMap<u64, Live>,
    ring: VecDeque<Action>,
    max_entries: usize,
    omitted: u64,
}

impl Recorder {
    fn push(&mut self, a: Action) {
        if self.max_entries == 0 {
            self.omitted += 1;
            return;
        }
        if self.ring.len() == self.max_entries {
            self.ring.pop_front();
            self.omitted += 1;
        }
        self.ring.push_back(a);
    }

    fn free(&mut self, addr: u64, l: Live, time_ns: u64, call: CallRef) {
        for action in ["free_requested", "free_completed", "segment_free"] {
            self.push(Action {
                device: l.device,
                action,
                addr,
                size: l.size,
                stream: l.stream,
                time_ns,
                call,
            });
        }
    }

    /// Frees everything that matches `gone` (a context destroyed, a device reset).
    fn free_all(&mut self, e: &Event, gone: impl Fn(&Live) -> bool) {
        let mut addrs: Vec<u64> = self
            .live
            .iter()
            .filter(|(_, l)| gone(l))
            .map(|(&a, _)| a)
            .collect();
        addrs.sort_unstable();
        for addr in addrs {
            if let Some(l) = self.live.remove(&addr) {
                self.free(addr, l, e.time_ns, CallRef::from(e));
            }
        }
    }

    fn event(&mut self, e: &Event) {
        if !e.ok() {
            return;
        }
        match e.op {
            Op::Alloc {
                kind,
                ptr,
                size,
                stream,
                ..
            } if kind.on_device() && ptr != 0 => {
                let l = Live {
                    size,
                    device: e.device,
                    context: e.context,
                    stream,
                    call: CallRef::from(e),
                };
                // An address handed out again without a free seen: the old one is gone.
                if let Some(old) = self.live.insert(ptr, l) {
                    self.free(ptr, old, e.time_ns, CallRef::from(e));
                }
                for action in ["segment_alloc", "alloc"] {
                    self.push(Action {
                        device: l.device,
                        action,
                        addr: ptr,
                        size,
                        stream,
                        time_ns: e.time_ns,
                        call: l.call,
                    });
                }
            }
            Op::Free { ptr, .. } => {
                if let Some(l) = self.live.remove(&ptr) {
                    self.free(ptr, l, e.time_ns, CallRef::from(e));
                }
            }
            Op::CtxDestroy { ctx } => self.free_all(e, |l| l.context == ctx),
            Op::PrimaryCtxReset { device } | Op::DeviceReset { device } => {
                self.free_all(e, |l| l.device == device)
            }
            _ => {}
        }
    }
}

/// A device's index in `device_traces` (allocations on no known device go to 0).
fn slot(device: i32) -> usize {
    device.max(0) as usize
}

/// The frames of `call`, innermost first as PyTorch lists them: the innermost native frames
/// (the library that asked), then the Python frames.
fn frames(stacks: &mut Stacks<'_, '_>, call: CallRef) -> Vec<PyFrame> {
    let f = stacks.of(call);
    let natives = if f.python.is_empty() {
        MAX_FRAMES
    } else {
        NATIVE_WITH_PYTHON
    };
    let native = f.native.iter().rev().take(natives);
    let python = f.python.iter().rev();
    native
        .chain(python)
        .take(MAX_FRAMES)
        .map(|f: &Frame| PyFrame {
            name: f.name.clone(),
            filename: f.filename.clone(),
            line: i64::from(f.line),
        })
        .collect()
}

fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Writes the snapshot; returns what it holds.
pub fn write(args: &ExportArgs, out: &mut dyn Write) -> Result<String> {
    let progress = Progress::new(&args.trace, "reading");
    let mut recorder = Recorder {
        live: HashMap::new(),
        ring: VecDeque::new(),
        max_entries: args.max_entries,
        omitted: 0,
    };
    let trace = read(&args.trace, StepSource::Marks, &progress, |_, e| {
        recorder.event(e);
        Flow::Apply
    })?;
    drop(progress);
    let state: &LiveState = &trace.state;
    let mut symbols = Symbolizer::from_env();
    let mut naming = Attribution::of_state(state, &mut symbols);
    let mut stacks = Stacks::new(&mut naming);

    let live: BTreeMap<u64, Live> = recorder.live.iter().map(|(&a, &l)| (a, l)).collect();
    let mut devices = live
        .values()
        .map(|l| slot(l.device))
        .max()
        .map_or(0, |d| d + 1);
    devices = devices.max(
        recorder
            .ring
            .iter()
            .map(|a| slot(a.device) + 1)
            .max()
            .unwrap_or(0),
    );
    let segments: Vec<Segment> = live
        .iter()
        .map(|(&addr, l)| {
            let f = frames(&mut stacks, l.call);
            Segment {
                device: slot(l.device) as i64,
                address: int(addr),
                total_size: int(l.size),
                allocated_size: int(l.size),
                active_size: int(l.size),
                requested_size: int(l.size),
                stream: int(l.stream),
                segment_type: "large",
                segment_pool_id: (0, 0),
                is_expandable: false,
                blocks: vec![Block {
                    address: int(addr),
                    size: int(l.size),
                    requested_size: int(l.size),
                    state: "active_allocated",
                    frames: frames(&mut stacks, l.call),
                }],
                frames: f,
            }
        })
        .collect();
    let mut device_traces: Vec<Vec<TraceEntry>> = (0..devices).map(|_| Vec::new()).collect();
    let entries = recorder.ring.len();
    for a in &recorder.ring {
        device_traces[slot(a.device)].push(TraceEntry {
            action: a.action,
            addr: int(a.addr),
            size: int(a.size),
            stream: int(a.stream),
            time_us: int(a.time_ns / 1000),
            compile_context: "N/A",
            user_metadata: "",
            frames: frames(&mut stacks, a.call),
        });
    }
    let snapshot = Snapshot {
        segments,
        device_traces,
        vramtrace: Provenance {
            version: trace.header.tool_version.clone(),
            trace: trace.path.display().to_string(),
            view: "driver-level allocations: one segment, one block per allocation",
            entries_omitted: int(recorder.omitted),
        },
    };
    serde_pickle::to_writer(&mut &mut *out, &snapshot, serde_pickle::SerOptions::new())
        .context("writing the snapshot")?;
    Ok(format!(
        "{} segments live at the end, {entries} trace entries on {devices} devices{}",
        snapshot.segments.len(),
        if recorder.omitted > 0 {
            format!(", {} older entries left out", recorder.omitted)
        } else {
            String::new()
        }
    ))
}
