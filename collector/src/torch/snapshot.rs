//! PyTorch's memory history recorder snapshot (payload `torch.memory_snapshot`), typed.
//!
//! The bootstrap writes `torch.cuda.memory._snapshot()` as compact JSON
//! (`tools/python/vramtrace_hooks.py`, `compact_snapshot`): segments and blocks with torch's own
//! keys, trace entries as rows of the columns `trace_columns` names, and every `frames` list
//! replaced by `stack`, a 1-based index into `stacks`, whose entries index `frames`
//! (`[filename, line, name]`). The reader also takes torch's own layout (entries as objects,
//! `frames` inline as `{filename, line, name}` objects), interning the frames itself. Unknown
//! keys are ignored and missing ones take defaults, so torch versions that add or drop fields
//! still read.
//!
//! Times: torch stamps entries with the wall clock (`time_us`, microseconds since the Unix
//! epoch); the snapshot carries a pair of wall-clock and `CLOCK_MONOTONIC` readings taken
//! together ([`ClockAnchor`]), which puts them on the trace's clock.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

/// The compact layout this reader knows (a payload naming another is refused).
pub const FORMAT: &str = "vramtrace-torch-snapshot/1";

/// The columns of a compact trace entry, in the bootstrap's order.
pub(crate) const TRACE_COLUMNS: [&str; 6] =
    ["action", "addr", "size", "stream", "time_us", "stack"];

/// Why a payload could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("not valid JSON: {0}")]
    Json(#[source] serde_json::Error),
    #[error("format {0:?} is not one this reader knows ({FORMAT})")]
    Format(String),
}

/// A wall-clock and a `CLOCK_MONOTONIC` reading taken together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub struct ClockAnchor {
    pub unix_ns: u64,
    pub monotonic_ns: u64,
}

impl ClockAnchor {
    /// A torch time (µs since the Unix epoch) on the trace's clock (`CLOCK_MONOTONIC` ns).
    pub fn trace_ns(&self, time_us: i64) -> u64 {
        let ns =
            i128::from(time_us) * 1000 - i128::from(self.unix_ns) + i128::from(self.monotonic_ns);
        ns.clamp(0, i128::from(u64::MAX)) as u64
    }

    /// A trace time as torch's clock (µs since the Unix epoch).
    pub fn time_us(&self, trace_ns: u64) -> i64 {
        let ns = i128::from(trace_ns) - i128::from(self.monotonic_ns) + i128::from(self.unix_ns);
        ns.div_euclid(1000) as i64
    }
}

/// One Python frame.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SnapshotFrame {
    pub file: String,
    pub line: u32,
    pub function: String,
    /// Only on a line tensors are attributed to ([`AllocatorSnapshot::program_frame`]) that the
    /// program reaches on several paths (a helper called from two lines): the first frame of
    /// this path that the others do not share.
    pub via: Option<Box<SnapshotFrame>>,
}

impl std::fmt::Display for SnapshotFrame {
    /// `train.py:42 in forward`, as the trace's Python frames read (`… via train.py:60 in
    /// <module>` on one of a line's paths).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{} in {}", self.file, self.line, self.function)?;
        match &self.via {
            Some(via) => write!(f, " via {via}"),
            None => Ok(()),
        }
    }
}

/// What the allocator did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A block handed to a tensor.
    Alloc,
    /// The tensor let go of its block (the program's free).
    FreeRequested,
    /// The block is reusable (its streams are done with it).
    FreeCompleted,
    /// A new segment from the driver (`cudaMalloc`).
    SegmentAlloc,
    /// A segment given back to the driver (`cudaFree`).
    SegmentFree,
    /// Expandable segments: memory mapped into a segment.
    SegmentMap,
    /// Expandable segments: memory unmapped from a segment.
    SegmentUnmap,
    /// An out-of-memory error; `size` is the request, `addr` the free bytes the driver reported.
    Oom,
    /// A snapshot was taken.
    Snapshot,
    /// Anything else (an annotation, an action of a newer torch).
    Other,
}

impl Action {
    fn parse(name: &str) -> Action {
        match name {
            "alloc" => Action::Alloc,
            // Torch before 2.0 had one "free".
            "free_requested" | "free" => Action::FreeRequested,
            "free_completed" => Action::FreeCompleted,
            "segment_alloc" => Action::SegmentAlloc,
            "segment_free" => Action::SegmentFree,
            "segment_map" => Action::SegmentMap,
            "segment_unmap" => Action::SegmentUnmap,
            "oom" => Action::Oom,
            "snapshot" => Action::Snapshot,
            _ => Action::Other,
        }
    }
}

/// One action of the recorder's ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEntry {
    pub device: i32,
    pub action: Action,
    pub addr: u64,
    /// Bytes: what the program requested for a tensor action, the segment's size for a segment
    /// action.
    pub size: u64,
    pub stream: u64,
    /// µs since the Unix epoch.
    pub time_us: i64,
    /// 1-based index into [`AllocatorSnapshot::stacks`]; 0 when the entry has no stack.
    pub stack: u32,
}

/// The state of a block at the snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    /// Held by a tensor.
    ActiveAllocated,
    /// Let go of, waiting for a stream to finish with it.
    ActivePendingFree,
    /// Cached, free for reuse.
    Inactive,
    Other,
}

/// A piece of a segment at the snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotBlock {
    pub address: u64,
    /// Bytes the block spans (rounded by the allocator).
    pub size: u64,
    /// Bytes the tensor asked for.
    pub requested_size: u64,
    pub state: BlockState,
    /// The allocation's stack (see [`TraceEntry::stack`]).
    pub stack: u32,
}

/// Memory the allocator holds from the driver at the snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotSegment {
    pub device: i32,
    pub address: u64,
    pub total_size: u64,
    pub allocated_size: u64,
    pub active_size: u64,
    pub stream: u64,
    /// `segment_type` is `large` (blocks over 1 MiB).
    pub large: bool,
    pub expandable: bool,
    pub blocks: Vec<SnapshotBlock>,
}

/// The out-of-memory error a snapshot was taken at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct OomFacts {
    pub device: i64,
    /// The request that failed.
    pub requested: u64,
    pub device_allocated: u64,
    pub device_free: u64,
}

/// A step mark the bootstrap made (`vramtrace_mark_step` from an optimizer step), on torch's
/// clock: the boundary lines up with the allocator's actions to the microsecond, where the
/// trace's own event times (a calibrated cycle counter) may be off by up to a millisecond.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepMark {
    /// The number `vramtrace_mark_step` returned (the trace's `MarkStep { step }`).
    pub step: u64,
    /// µs since the Unix epoch.
    pub time_us: i64,
}

/// A recorder snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocatorSnapshot {
    /// When it was taken: `exit`, `oom`, or empty when the payload does not say.
    pub reason: String,
    pub clock: Option<ClockAnchor>,
    /// The recorder's ring size, when known: a ring holding this many entries has lost older
    /// ones.
    pub max_entries: Option<u64>,
    pub frames: Vec<SnapshotFrame>,
    /// Interned stacks: indexes into `frames`, innermost first.
    pub stacks: Vec<Vec<u32>>,
    /// Per stack (index `id - 1`), the frame its tensors are attributed to
    /// ([`AllocatorSnapshot::program_frame`]); worked out once the stacks are read.
    pub program_lines: Vec<Option<u32>>,
    pub segments: Vec<SnapshotSegment>,
    /// Every device's ring, oldest first within a device.
    pub traces: Vec<TraceEntry>,
    /// The allocator settings torch reported (`allocator_settings.PYTORCH_CUDA_ALLOC_CONF`).
    pub alloc_conf: Option<String>,
    pub expandable_segments: Option<bool>,
    pub oom: Option<OomFacts>,
    /// The step marks the bootstrap made (its last ones), oldest first.
    pub step_marks: Vec<StepMark>,
    /// Entries or blocks that could not be read and were left out.
    pub unreadable: u64,
}

/// `reason` of a payload without reading the rest (a cheap look before a full parse).
pub(super) fn reason_of(data: &[u8]) -> Option<&'static str> {
    // The bootstrap writes `"reason":"…"` near the start; only the two it writes matter.
    let head = &data[..data.len().min(256)];
    let has = |needle: &[u8]| head.windows(needle.len()).any(|w| w == needle);
    if has(br#""reason":"oom""#) {
        Some("oom")
    } else if has(br#""reason":"exit""#) {
        Some("exit")
    } else {
        None
    }
}

#[derive(Deserialize)]
struct RawDoc {
    #[serde(default)]
    format: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    clock: Option<ClockAnchor>,
    #[serde(default)]
    max_entries: Option<u64>,
    #[serde(default)]
    frames: Vec<Value>,
    #[serde(default)]
    stacks: Vec<Vec<u32>>,
    #[serde(default)]
    segments: Vec<Value>,
    #[serde(default)]
    trace_columns: Vec<String>,
    #[serde(default)]
    device_traces: Vec<Vec<Value>>,
    #[serde(default)]
    allocator_settings: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    oom: Option<OomFacts>,
    #[serde(default)]
    step_marks: Vec<(u64, u64)>,
}

fn as_u64(v: Option<&Value>) -> u64 {
    match v {
        Some(Value::Number(n)) => n
            .as_u64()
            .or_else(|| n.as_i64().map(|i| i as u64))
            .or_else(|| n.as_f64().map(|f| f as u64))
            .unwrap_or(0),
        _ => 0,
    }
}

fn as_i64(v: Option<&Value>) -> i64 {
    match v {
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .unwrap_or(0),
        _ => 0,
    }
}

fn as_str(v: Option<&Value>) -> &str {
    v.and_then(Value::as_str).unwrap_or("")
}

/// Frames and stacks interned by content, for payloads that carry them inline.
struct Interner {
    frames: Vec<SnapshotFrame>,
    stacks: Vec<Vec<u32>>,
    frame_ids: HashMap<SnapshotFrame, u32>,
    stack_ids: HashMap<Vec<u32>, u32>,
}

impl Interner {
    fn new(frames: Vec<SnapshotFrame>, stacks: Vec<Vec<u32>>) -> Interner {
        let frame_ids = frames
            .iter()
            .enumerate()
            .map(|(i, f)| (f.clone(), i as u32))
            .collect();
        let stack_ids = stacks
            .iter()
            .enumerate()
            .map(|(i, s)| (s.clone(), i as u32 + 1))
            .collect();
        Interner {
            frames,
            stacks,
            frame_ids,
            stack_ids,
        }
    }

    /// The stack of an object: its `stack` index, or its inline `frames`.
    fn stack_of(&mut self, object: &serde_json::Map<String, Value>) -> u32 {
        if let Some(id) = object.get("stack") {
            let id = as_u64(Some(id));
            return if id as usize <= self.stacks.len() {
                id as u32
            } else {
                0
            };
        }
        match object.get("frames") {
            Some(Value::Array(list)) if !list.is_empty() => self.intern(list),
            _ => 0,
        }
    }

    fn intern(&mut self, list: &[Value]) -> u32 {
        let ids: Vec<u32> = list
            .iter()
            .map(|f| {
                let frame = SnapshotFrame {
                    file: as_str(f.get("filename")).to_string(),
                    line: as_u64(f.get("line")) as u32,
                    function: as_str(f.get("name")).to_string(),
                    via: None,
                };
                let next = self.frames.len() as u32;
                *self.frame_ids.entry(frame.clone()).or_insert_with(|| {
                    self.frames.push(frame);
                    next
                })
            })
            .collect();
        let next = self.stacks.len() as u32 + 1;
        *self.stack_ids.entry(ids.clone()).or_insert_with(|| {
            self.stacks.push(ids);
            next
        })
    }
}

fn frame_row(v: &Value) -> SnapshotFrame {
    match v {
        Value::Array(a) => SnapshotFrame {
            file: as_str(a.first()).to_string(),
            line: as_u64(a.get(1)) as u32,
            function: as_str(a.get(2)).to_string(),
            via: None,
        },
        other => SnapshotFrame {
            file: as_str(other.get("filename")).to_string(),
            line: as_u64(other.get("line")) as u32,
            function: as_str(other.get("name")).to_string(),
            via: None,
        },
    }
}

fn block_state(name: &str) -> BlockState {
    match name {
        "active_allocated" => BlockState::ActiveAllocated,
        // Torch's docstring spells it `active_awaiting_free`; its code writes the other.
        "active_pending_free" | "active_awaiting_free" => BlockState::ActivePendingFree,
        "inactive" => BlockState::Inactive,
        _ => BlockState::Other,
    }
}

impl AllocatorSnapshot {
    /// Reads a payload; `fallback` is the clock anchor when the payload has none.
    pub fn parse(
        data: &[u8],
        fallback: Option<ClockAnchor>,
    ) -> Result<AllocatorSnapshot, SnapshotError> {
        let raw: RawDoc = serde_json::from_slice(data).map_err(SnapshotError::Json)?;
        if let Some(format) = raw.format.as_deref().filter(|f| *f != FORMAT) {
            return Err(SnapshotError::Format(format.to_string()));
        }
        let frames: Vec<SnapshotFrame> = raw.frames.iter().map(frame_row).collect();
        let stacks: Vec<Vec<u32>> = raw
            .stacks
            .into_iter()
            .map(|s| {
                s.into_iter()
                    .filter(|&f| (f as usize) < frames.len())
                    .collect()
            })
            .collect();
        let mut interner = Interner::new(frames, stacks);
        let mut unreadable = 0;

        let mut segments = Vec::with_capacity(raw.segments.len());
        for s in &raw.segments {
            let Some(s) = s.as_object() else {
                unreadable += 1;
                continue;
            };
            let blocks = match s.get("blocks") {
                Some(Value::Array(blocks)) => blocks
                    .iter()
                    .filter_map(|b| {
                        let b = b.as_object()?;
                        Some(SnapshotBlock {
                            address: as_u64(b.get("address")),
                            size: as_u64(b.get("size")),
                            requested_size: as_u64(b.get("requested_size")),
                            state: block_state(as_str(b.get("state"))),
                            stack: interner.stack_of(b),
                        })
                    })
                    .collect(),
                _ => Vec::new(),
            };
            segments.push(SnapshotSegment {
                device: as_i64(s.get("device")) as i32,
                address: as_u64(s.get("address")),
                total_size: as_u64(s.get("total_size")),
                allocated_size: as_u64(s.get("allocated_size")),
                active_size: as_u64(s.get("active_size")),
                stream: as_u64(s.get("stream")),
                large: as_str(s.get("segment_type")) == "large",
                expandable: s
                    .get("is_expandable")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                blocks,
            });
        }

        // Rows without a column list are in the bootstrap's order.
        let names: Vec<&str> = if raw.trace_columns.is_empty() {
            TRACE_COLUMNS.to_vec()
        } else {
            raw.trace_columns.iter().map(String::as_str).collect()
        };
        let column = |name: &str| names.iter().position(|c| *c == name);
        let columns = [
            column("action"),
            column("addr"),
            column("size"),
            column("stream"),
            column("time_us"),
            column("stack"),
        ];
        let mut traces = Vec::new();
        for (device, ring) in raw.device_traces.iter().enumerate() {
            for e in ring {
                let entry = match e {
                    Value::Array(row) => {
                        let at = |i: Option<usize>| i.and_then(|i| row.get(i));
                        let stack = as_u64(at(columns[5]));
                        TraceEntry {
                            device: device as i32,
                            action: Action::parse(as_str(at(columns[0]))),
                            addr: as_u64(at(columns[1])),
                            size: as_u64(at(columns[2])),
                            stream: as_u64(at(columns[3])),
                            time_us: as_i64(at(columns[4])),
                            stack: if stack as usize <= interner.stacks.len() {
                                stack as u32
                            } else {
                                0
                            },
                        }
                    }
                    Value::Object(o) => TraceEntry {
                        device: device as i32,
                        action: Action::parse(as_str(o.get("action"))),
                        addr: as_u64(o.get("addr").or_else(|| o.get("device_free"))),
                        size: as_u64(o.get("size")),
                        stream: as_u64(o.get("stream")),
                        time_us: as_i64(o.get("time_us")),
                        stack: interner.stack_of(o),
                    },
                    _ => {
                        unreadable += 1;
                        continue;
                    }
                };
                traces.push(entry);
            }
        }

        let settings = raw.allocator_settings.as_ref();
        let mut snapshot = AllocatorSnapshot {
            reason: raw.reason.unwrap_or_default(),
            clock: raw.clock.or(fallback),
            max_entries: raw.max_entries,
            program_lines: Vec::new(),
            frames: interner.frames,
            stacks: interner.stacks,
            segments,
            traces,
            alloc_conf: settings
                .and_then(|s| s.get("PYTORCH_CUDA_ALLOC_CONF"))
                .and_then(Value::as_str)
                .map(str::to_string),
            expandable_segments: settings
                .and_then(|s| s.get("expandable_segments"))
                .and_then(Value::as_bool),
            oom: raw.oom,
            step_marks: raw
                .step_marks
                .iter()
                .map(|&(step, unix_ns)| StepMark {
                    step,
                    time_us: (unix_ns / 1000) as i64,
                })
                .collect(),
            unreadable,
        };
        snapshot.program_lines = snapshot.attribute_lines();
        Ok(snapshot)
    }

    /// The frames of stack `id`, innermost first (empty for 0 or an unknown id).
    pub fn stack(&self, id: u32) -> impl Iterator<Item = &SnapshotFrame> {
        let frames = match id {
            0 => &[][..],
            id => self.stacks.get(id as usize - 1).map_or(&[][..], |s| &s[..]),
        };
        frames.iter().filter_map(|&f| self.frames.get(f as usize))
    }

    /// The frame a stack is attributed to: the innermost frame of the program's own Python code,
    /// by the rule of the trace's Python stacks (`crate::python::is_library_file`: frames of
    /// installed packages and the standard library are passed over), among the Python frames
    /// (`.py` files); the innermost Python frame when every one is a library's; the innermost
    /// frame when none is Python. As an index into [`AllocatorSnapshot::frames`]: where the
    /// program reaches that line on several paths, a frame of the same line that names its path
    /// ([`SnapshotFrame::via`]), as the trace's call sites are split ([`crate::live::ProgramLine`]).
    pub fn program_frame(&self, stack: u32) -> Option<u32> {
        match self.program_lines.get((stack as usize).checked_sub(1)?) {
            Some(&line) => line,
            None => self.own_line(stack).map(|(line, _)| line),
        }
    }

    /// The program's frames that called the line tensors attributed to `frame` were made at
    /// ([`AllocatorSnapshot::program_frame`]), innermost first: the path of a line the program
    /// reaches on several paths, the only path of another (the first stack's, where two paths
    /// part at the same frame).
    pub fn program_path(&self, frame: u32) -> Vec<&SnapshotFrame> {
        let stack = (self.program_lines.iter())
            .position(|&l| l == Some(frame))
            .map(|i| i as u32 + 1);
        let callers = stack.and_then(|s| self.own_line(s)).map(|(_, c)| c);
        (callers.unwrap_or_default().iter())
            .filter_map(|&f| self.frames.get(f as usize))
            .collect()
    }

    /// The program's own line of `stack`, and the program's frames that called it, innermost
    /// first (none when the line is a library's).
    fn own_line(&self, stack: u32) -> Option<(u32, Vec<u32>)> {
        let ids = match stack {
            0 => return None,
            id => self.stacks.get(id as usize - 1)?,
        };
        let python = |f: u32| {
            self.frames
                .get(f as usize)
                .is_some_and(|fr| fr.file.ends_with(".py"))
        };
        let own =
            |f: u32| python(f) && !crate::python::is_library_file(&self.frames[f as usize].file);
        if let Some(k) = ids.iter().position(|&f| own(f)) {
            let callers = ids[k + 1..].iter().copied().filter(|&f| own(f)).collect();
            return Some((ids[k], callers));
        }
        let line = ids
            .iter()
            .copied()
            .find(|&f| python(f))
            .or(ids.first().copied())?;
        Some((line, Vec::new()))
    }

    /// [`AllocatorSnapshot::program_lines`]: each stack's line, and where one line is reached on
    /// several paths, a frame of that line naming the path (added to `frames`).
    fn attribute_lines(&mut self) -> Vec<Option<u32>> {
        let own: Vec<Option<(u32, Vec<u32>)>> = (1..=self.stacks.len() as u32)
            .map(|id| self.own_line(id))
            .collect();
        let mut paths: HashMap<u32, Vec<&[u32]>> = HashMap::new();
        for (line, callers) in own.iter().flatten() {
            let seen = paths.entry(*line).or_default();
            if !seen.contains(&&callers[..]) {
                seen.push(callers);
            }
        }
        let mut named: HashMap<SnapshotFrame, u32> = HashMap::new();
        let mut lines = Vec::with_capacity(own.len());
        for entry in &own {
            let Some((line, mine)) = entry else {
                lines.push(None);
                continue;
            };
            let others = &paths[line];
            let parting = (0..mine.len())
                .find(|&d| others.iter().any(|o| o.get(d) != mine.get(d)))
                .filter(|_| others.len() > 1);
            let Some(d) = parting else {
                lines.push(Some(*line));
                continue;
            };
            let frame = SnapshotFrame {
                via: Some(Box::new(self.frames[mine[d] as usize].clone())),
                ..self.frames[*line as usize].clone()
            };
            let next = self.frames.len() as u32;
            let id = *named.entry(frame.clone()).or_insert(next);
            if id == next {
                self.frames.push(frame);
            }
            lines.push(Some(id));
        }
        lines
    }

    /// Whether the recorder's ring was full: actions older than its first entry were lost.
    pub fn ring_full(&self) -> bool {
        self.max_entries.is_some_and(|max| {
            let mut per_device: HashMap<i32, u64> = HashMap::new();
            for e in &self.traces {
                *per_device.entry(e.device).or_default() += 1;
            }
            per_device.values().any(|&n| n >= max)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Torch's own layout (objects, frames inline) reads the same as the compact one.
    #[test]
    fn torch_layout_and_compact_layout_read_alike() {
        let torch = br#"{
          "segments": [{"device": 0, "address": 4096, "total_size": 2097152,
            "allocated_size": 1024, "active_size": 1024, "requested_size": 1000,
            "stream": 0, "segment_type": "large", "segment_pool_id": [0, 0],
            "is_expandable": false, "frames": [],
            "blocks": [
              {"address": 4096, "size": 1024, "requested_size": 1000, "state": "active_allocated",
               "frames": [{"filename": "/v/site-packages/torch/nn/linear.py", "line": 125, "name": "forward"},
                          {"filename": "train.py", "line": 42, "name": "step"}]},
              {"address": 5120, "size": 2096128, "requested_size": 0, "state": "inactive", "frames": []}
            ]}],
          "device_traces": [[
            {"action": "segment_alloc", "addr": 4096, "size": 2097152, "stream": 0, "time_us": 1000,
             "compile_context": "N/A", "user_metadata": "", "pool_id": [0, 0], "frames": []},
            {"action": "alloc", "addr": 4096, "size": 1000, "stream": 0, "time_us": 1001,
             "frames": [{"filename": "/v/site-packages/torch/nn/linear.py", "line": 125, "name": "forward"},
                        {"filename": "train.py", "line": 42, "name": "step"}]},
            {"action": "oom", "device_free": 77, "size": 9, "stream": 0, "time_us": 1002},
            {"action": "annotate", "addr": 4096, "size": 0, "stream": 0, "time_us": 1003}
          ]],
          "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False",
            "expandable_segments": false, "roundup_power2_divisions": {"1": 0}}
        }"#;
        let compact = br#"{"format":"vramtrace-torch-snapshot/1","reason":"exit",
          "clock":{"unix_ns":5000000,"monotonic_ns":200},"max_entries":4,
          "frames":[["/v/site-packages/torch/nn/linear.py",125,"forward"],["train.py",42,"step"]],
          "stacks":[[0,1]],
          "segments":[{"device":0,"address":4096,"total_size":2097152,"allocated_size":1024,
            "active_size":1024,"stream":0,"segment_type":"large","is_expandable":false,"stack":0,
            "blocks":[{"address":4096,"size":1024,"requested_size":1000,"state":"active_allocated","stack":1},
                      {"address":5120,"size":2096128,"requested_size":0,"state":"inactive","stack":0}]}],
          "trace_columns":["action","addr","size","stream","time_us","stack"],
          "device_traces":[[["segment_alloc",4096,2097152,0,1000,0],["alloc",4096,1000,0,1001,1],
            ["oom",77,9,0,1002,0],["annotate",4096,0,0,1003,0]]],
          "allocator_settings":{"PYTORCH_CUDA_ALLOC_CONF":"expandable_segments:False","expandable_segments":false},
          "oom":null,"step_marks":[[1,5000000],[2,5002000]]}"#;
        let a = AllocatorSnapshot::parse(torch, None).unwrap();
        let b = AllocatorSnapshot::parse(compact, None).unwrap();
        assert_eq!(a.frames, b.frames);
        assert_eq!(a.stacks, b.stacks);
        assert_eq!(a.segments, b.segments);
        assert_eq!(a.traces, b.traces);
        assert_eq!(b.traces.len(), 4);
        assert_eq!(
            b.traces.iter().map(|e| e.action).collect::<Vec<_>>(),
            [
                Action::SegmentAlloc,
                Action::Alloc,
                Action::Oom,
                Action::Other
            ]
        );
        assert_eq!((b.traces[2].addr, b.traces[2].size), (77, 9));
        assert_eq!(a.alloc_conf.as_deref(), Some("expandable_segments:False"));
        assert_eq!(b.expandable_segments, Some(false));
        assert_eq!(b.reason, "exit");
        assert_eq!(
            b.step_marks,
            [
                StepMark {
                    step: 1,
                    time_us: 5000
                },
                StepMark {
                    step: 2,
                    time_us: 5002
                }
            ]
        );
        assert!(b.ring_full());
        assert!(!a.ring_full(), "no ring size known");
        // The library frame is passed over.
        let f = b.program_frame(1).unwrap();
        assert_eq!(b.frames[f as usize].to_string(), "train.py:42 in step");
        assert_eq!(b.stack(1).count(), 2);
        // 1001 µs after the epoch is 1001000 - 5000000 + 200 ns on the monotonic clock: before 0.
        let clock = b.clock.unwrap();
        assert_eq!(clock.trace_ns(5001), 200 + 1000);
        assert_eq!(clock.time_us(1200), 5001);
    }

    /// A helper's line reached from two lines of the script is attributed per path, each named
    /// by the line that called the helper; a line reached on one path stays itself.
    #[test]
    fn a_line_reached_on_several_paths_is_attributed_per_path() {
        let compact = br#"{"format":"vramtrace-torch-snapshot/1","reason":"exit",
          "frames":[["/v/site-packages/torch/nn/linear.py",125,"forward"],["train.py",7,"make"],
            ["train.py",14,"<module>"],["train.py",16,"<module>"],["train.py",30,"step"],
            ["train.py",40,"<module>"]],
          "stacks":[[1,2],[0,1,3],[4,5],[1,2,0]],
          "segments":[],"device_traces":[]}"#;
        let s = AllocatorSnapshot::parse(compact, None).unwrap();
        let named = |stack: u32| s.frames[s.program_frame(stack).unwrap() as usize].to_string();
        assert_eq!(named(1), "train.py:7 in make via train.py:14 in <module>");
        assert_eq!(named(2), "train.py:7 in make via train.py:16 in <module>");
        assert_eq!(named(3), "train.py:30 in step");
        // The same path through a library frame is the same attribution.
        assert_eq!(s.program_frame(4), s.program_frame(1));
        // The stacks themselves are as recorded.
        assert_eq!(s.stack(1).map(|f| f.line).collect::<Vec<_>>(), [7, 14]);
        assert_eq!(s.program_lines.len(), 4);
    }

    #[test]
    fn bad_payloads_are_errors_not_panics() {
        assert!(matches!(
            AllocatorSnapshot::parse(b"[1,", None),
            Err(SnapshotError::Json(_))
        ));
        assert!(matches!(
            AllocatorSnapshot::parse(br#"{"format":"other/9"}"#, None),
            Err(SnapshotError::Format(_))
        ));
        // Wrong types inside are left out or read as zero, never a failure.
        let s = AllocatorSnapshot::parse(
            br#"{"segments":[3,{"blocks":"x"}],"device_traces":[[7,["alloc"]]],"stacks":[[9]]}"#,
            None,
        )
        .unwrap();
        assert_eq!(s.unreadable, 2);
        assert_eq!(s.segments.len(), 1);
        assert_eq!(s.traces.len(), 1);
        assert_eq!(s.stacks, [Vec::<u32>::new()]);
    }
}
