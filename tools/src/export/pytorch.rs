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
//! the entries back from the segments, which they do; read from a segment's snapshot, the
//! segments live since before it come from the state it restored. Memory mapped through the
//! virtual memory API (`cuMemCreate` + `cuMemMap`) and arrays are not in the snapshot: their
//! bytes live at the end are said.
//!
//! Each stack's frame list is written once and shared by every entry made there, as in
//! PyTorch's own snapshots (see [`super::pickle`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Write;
use std::rc::Rc;

use anyhow::{Context, Result};
use vramtrace_collector::event::{Event, Op};
use vramtrace_collector::live::{Accounting, Category, LiveState, Origin, StepSource};
use vramtrace_collector::symbols::{Attribution, CallRef, Symbolizer};

use super::frames::{NamedFrame, Stacks};
use super::pickle::{self, Value};
use super::{ExportArgs, Written};

/// Entries kept in the snapshot's trace without `--max-entries`: PyTorch's recorder's own
/// default ring.
const DEFAULT_MAX_ENTRIES: usize = 100_000;
use crate::load::{read, Flow, Progress};

/// Frames kept per stack. The program's Python frames say the most; native frames fill the
/// rest, innermost first.
const MAX_FRAMES: usize = 32;
/// Native frames kept above the Python frames of a call that has both.
const NATIVE_WITH_PYTHON: usize = 8;

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

/// The frame lists of calls, each built once and shared in the pickle.
struct FrameLists<'s, 'n, 'a> {
    stacks: &'s mut Stacks<'n, 'a>,
    ids: HashMap<CallRef, Value>,
}

impl FrameLists<'_, '_, '_> {
    /// The frames of `call`, innermost first as PyTorch lists them: the innermost native frames
    /// (the library that asked), then the Python frames.
    fn of(&mut self, call: CallRef) -> Value {
        let next = self.ids.len() as u32;
        let stacks = &mut *self.stacks;
        self.ids
            .entry(call)
            .or_insert_with(|| {
                let f = stacks.of(call);
                let natives = if f.python.is_empty() {
                    MAX_FRAMES
                } else {
                    NATIVE_WITH_PYTHON
                };
                let frames = f
                    .native
                    .iter()
                    .rev()
                    .take(natives)
                    .chain(f.python.iter().rev())
                    .take(MAX_FRAMES)
                    .map(|f: &NamedFrame| {
                        Value::Dict(vec![
                            ("name", Value::Str(f.name.clone())),
                            ("filename", Value::Str(f.filename.clone())),
                            ("line", Value::Int(i64::from(f.line))),
                        ])
                    })
                    .collect();
                Value::Shared(next, Rc::new(Value::List(frames)))
            })
            .clone()
    }
}

/// Writes the snapshot; returns what it holds.
pub fn write(args: &ExportArgs, out: &mut dyn Write) -> Result<Written> {
    let progress = Progress::new(args.trace(), "reading");
    let mut recorder = Recorder {
        live: HashMap::new(),
        ring: VecDeque::new(),
        max_entries: args.max_entries.unwrap_or(DEFAULT_MAX_ENTRIES),
        omitted: 0,
    };
    let trace = read(
        args.trace(),
        args.window.read_from(),
        StepSource::Marks,
        &progress,
        |_, e| {
            recorder.event(e);
            Flow::Apply
        },
    )?;
    drop(progress);
    let state: &LiveState = &trace.state;
    let mut symbols = Symbolizer::from_env();
    let mut naming = Attribution::of_state(state, &mut symbols);
    let mut stacks = Stacks::new(&mut naming);

    let mut frames = FrameLists {
        stacks: &mut stacks,
        ids: HashMap::new(),
    };

    let mut live: BTreeMap<u64, Live> = recorder.live.iter().map(|(&a, &l)| (a, l)).collect();
    // Device memory the snapshot has no segment for (virtual-memory handles, arrays): said.
    let mut left_out = 0;
    // Read from a segment's snapshot (rotation, `--last`, `--since`): what was allocated before
    // it and is still live is in the state the snapshot restored, not among the events read.
    for o in state.live_objects() {
        let pointer = matches!(
            o.category,
            Category::Device | Category::Async | Category::Managed | Category::Pitched
        );
        if !pointer && o.category.accounting() == Accounting::Device {
            left_out += o.bytes;
        }
        if pointer && o.address != 0 && !live.contains_key(&o.address) {
            let origin: &Origin = &o.origin;
            live.insert(
                o.address,
                Live {
                    size: o.bytes,
                    device: o.device,
                    context: origin.context,
                    stream: 0,
                    call: CallRef::from(origin),
                },
            );
        }
    }
    let devices = live
        .values()
        .map(|l| slot(l.device) + 1)
        .chain(recorder.ring.iter().map(|a| slot(a.device) + 1))
        .max()
        .unwrap_or(0);
    let segments: Vec<Value> = live
        .iter()
        .map(|(&addr, l)| {
            let f = frames.of(l.call);
            let size = Value::uint(l.size);
            let block = Value::Dict(vec![
                ("address", Value::uint(addr)),
                ("size", size.clone()),
                ("requested_size", size.clone()),
                ("state", Value::Str("active_allocated".into())),
                ("frames", f.clone()),
            ]);
            Value::Dict(vec![
                ("device", Value::Int(slot(l.device) as i64)),
                ("address", Value::uint(addr)),
                ("total_size", size.clone()),
                ("allocated_size", size.clone()),
                ("active_size", size.clone()),
                ("requested_size", size),
                ("stream", Value::uint(l.stream)),
                ("segment_type", Value::Str("large".into())),
                (
                    "segment_pool_id",
                    Value::Pair(Box::new(Value::Int(0)), Box::new(Value::Int(0))),
                ),
                ("is_expandable", Value::Bool(false)),
                ("frames", f),
                ("blocks", Value::List(vec![block])),
            ])
        })
        .collect();
    let mut device_traces: Vec<Vec<Value>> = (0..devices).map(|_| Vec::new()).collect();
    let entries = recorder.ring.len();
    for a in &recorder.ring {
        device_traces[slot(a.device)].push(Value::Dict(vec![
            ("action", Value::Str(a.action.into())),
            ("addr", Value::uint(a.addr)),
            ("size", Value::uint(a.size)),
            ("stream", Value::uint(a.stream)),
            ("time_us", Value::uint(a.time_ns / 1000)),
            ("compile_context", Value::Str("N/A".into())),
            ("user_metadata", Value::Str(String::new())),
            ("frames", frames.of(a.call)),
        ]));
    }
    let segment_count = segments.len();
    let snapshot = Value::Dict(vec![
        ("segments", Value::List(segments)),
        (
            "device_traces",
            Value::List(device_traces.into_iter().map(Value::List).collect()),
        ),
        // Not read by the viewers: where the snapshot came from.
        (
            "vramtrace",
            Value::Dict(vec![
                ("version", Value::Str(trace.header.tool_version.clone())),
                ("trace", Value::Str(trace.path.display().to_string())),
                (
                    "view",
                    Value::Str(
                        "driver-level allocations: one segment, one block per allocation".into(),
                    ),
                ),
                ("entries_omitted", Value::uint(recorder.omitted)),
                ("device_bytes_left_out", Value::uint(left_out)),
            ]),
        ),
    ]);
    pickle::write(out, &snapshot).context("writing the snapshot")?;
    let not_held = match left_out {
        0 => String::new(),
        n => format!(
            "; {} live in virtual-memory handles and arrays is not in it (`report` counts it)",
            crate::render::units::bytes(n)
        ),
    };
    let what = format!(
        "{} live at the end, {} on {}{}{not_held}",
        crate::render::units::count(segment_count as u64, "segment"),
        crate::render::units::count(entries as u64, "trace entry"),
        crate::render::units::count(devices as u64, "device"),
        if recorder.omitted > 0 {
            format!(", {} older entries left out", recorder.omitted)
        } else {
            String::new()
        }
    );
    Ok(Written::of(&trace, what))
}
