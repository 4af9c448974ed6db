//! What a trace records besides events: the loaded modules and interned stacks that name an
//! event's addresses, Python code and stacks, and the tracer's notes about itself.

use serde::{Deserialize, Serialize};

/// A loaded shared object (or the executable), so addresses can be named after the fact.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Module {
    /// Small id, unique within the trace.
    pub id: u32,
    /// Path as the dynamic loader reports it (the executable's resolved path).
    pub path: String,
    /// Load bias: file virtual address + `base` = runtime address.
    pub base: u64,
    /// The loaded segments, in runtime addresses.
    pub segments: Vec<Segment>,
    /// GNU build id (from `.note.gnu.build-id`), empty when absent.
    pub build_id: Vec<u8>,
}

impl Module {
    /// Whether the runtime address lies in one of the module's segments.
    pub fn contains(&self, addr: u64) -> bool {
        self.segments
            .iter()
            .any(|s| addr >= s.start && addr - s.start < s.len)
    }

    /// The file name without directories (`libnccl.so.2`).
    pub fn file_name(&self) -> &str {
        crate::units::base_name(&self.path)
    }
}

/// One loaded segment of a module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    pub start: u64,
    pub len: u64,
    pub executable: bool,
}

/// An interned native stack: return addresses, innermost first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackDef {
    pub id: u32,
    pub frames: Vec<u64>,
}

/// A Python code object (a function), named once: Python stacks refer to it by id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PyCode {
    pub id: u32,
    /// `co_filename`.
    pub file: String,
    /// `co_qualname` where the interpreter has it (3.11+), else `co_name`.
    pub function: String,
    /// `co_firstlineno`.
    pub first_line: u32,
}

/// One Python frame: a code object and the line executing in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PyFrame {
    pub code: u32,
    pub line: u32,
}

/// An interned Python stack, innermost frame first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PyStackDef {
    pub id: u32,
    pub frames: Vec<PyFrame>,
}

/// Counters the tracer keeps about itself, written periodically and at the end. Each is a running
/// total, so the last one read is the one that counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Events that could not be handed to the writer thread (channel full) and are lost.
    pub dropped: u64,
    /// Events that reached the writer thread after later events were already written.
    pub late: u64,
    /// Panics caught inside hooks (the program carried on).
    pub hook_panics: u64,
    /// Hooks whose real function could not be found (the call returned an error code).
    pub missing_real: u64,
    /// Events written so far.
    pub events: u64,
}

/// A driver function pointer that was handed out without a wrapper, so calls through it are not
/// traced (an ABI version the tracer does not wrap, or a resolver table that was full).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lookup {
    /// How it was obtained: `dlsym`, `cuGetProcAddress_v2`, `cudaGetDriverEntryPoint`, ...
    pub via: String,
    pub symbol: String,
    pub cuda_version: u32,
    pub flags: u64,
    pub reason: String,
}

/// The clean end of a trace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct End {
    pub time_ns: u64,
    pub stats: Stats,
    /// Why the trace ended: `exit`, `signal 11`, `exec`, ...
    pub reason: String,
}

/// A piece of a payload the traced program handed to the tracer (`vramtrace_attach`): a framework's
/// own view of its memory, such as PyTorch's allocator history (`crate::torch`). Payloads are
/// written in pieces of at most [`Attachment::PIECE_BYTES`], in order, so no record outgrows a
/// chunk; a reader puts the pieces of one `id` back together (`crate::attached`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// What the payload is, named by whoever attached it (`torch.allocator`, ...).
    pub kind: String,
    /// Numbered from 1 within the trace; every piece of one payload carries its number.
    pub id: u32,
    /// Where this piece starts in the payload.
    pub offset: u64,
    /// The whole payload's length.
    pub total: u64,
    /// `CLOCK_MONOTONIC` nanoseconds when the tracer received the payload.
    pub time_ns: u64,
    /// The last event sequence number handed out when it was received: the payload follows every
    /// event up to it.
    pub after_seq: u64,
    pub data: Vec<u8>,
}

impl Alert {
    /// The unit of a rate judged per step of the program's marks.
    pub const STEP: &'static str = "step";
    /// The unit of a rate judged per step of the allocation pattern.
    pub const GUESSED_STEP: &'static str = "guessed step";

    /// Whether its rate is per step, marked or guessed (else per time window).
    pub fn per_step(&self) -> bool {
        self.unit == Self::STEP || self.unit == Self::GUESSED_STEP
    }

    /// What the steps of its projection are called: `guessed step` where its rate is per
    /// guessed step, else `step`.
    pub fn step_name(&self) -> &'static str {
        match self.unit == Self::GUESSED_STEP {
            true => Self::GUESSED_STEP,
            false => Self::STEP,
        }
    }

    /// When it was raised, in steps: `step 11`; `None` for a rate per time window in a run
    /// that had marked no step (its step count, 0, says nothing).
    pub fn at_step(&self) -> Option<String> {
        (self.per_step() || self.step > 0).then(|| format!("step {}", self.step))
    }

    /// What its rate is per, in words: `step`, `guessed step`, `128 ms window`.
    pub fn unit_name(&self) -> String {
        if self.per_step() {
            self.unit.clone()
        } else {
            crate::units::rate_unit(false, self.unit_ns)
        }
    }
}

impl Attachment {
    /// The largest piece written in one record.
    pub const PIECE_BYTES: usize = 1 << 20;
}

/// An alert the tracer raised while the program ran (`VRAMTRACE_ALERT_*`): its live analysis saw
/// a device's steady growth pass the threshold, or the device due to be full within the horizon.
/// The numbers are those of the judgement that raised it ([`crate::analysis::watch`]), rounded
/// to whole bytes, steps and seconds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alert {
    /// `CLOCK_MONOTONIC` nanoseconds when it was raised.
    pub time_ns: u64,
    /// The last event written before it: the alert follows every event up to it.
    pub after_seq: u64,
    /// Steps begun by then.
    pub step: u64,
    pub device: i32,
    /// `growth` (steady growth above the threshold) or `horizon` (full within the horizon).
    pub reason: String,
    /// The device's steady growth in bytes per sample unit, and the unit: `step`, `guessed step`
    /// (steps the live analysis found in the allocation pattern of a run without step marks: one
    /// may be several of the program's, or part of one), or a time window of `unit_ns`
    /// nanoseconds.
    pub rate: u64,
    pub unit: String,
    pub unit_ns: u64,
    /// The threshold the growth was judged against, bytes per unit.
    pub threshold: u64,
    /// Bytes live on the device, and its memory, when known.
    pub live_bytes: u64,
    pub device_memory: u64,
    pub steps_to_full: Option<u64>,
    pub seconds_to_full: Option<u64>,
    /// The place that grows fastest there, in words (`train.py:88 in step`, or a native
    /// `function (module+0x1a2b)`), its own rate, and the call site that names it (native
    /// stack, caller address and Python stack, for a reader to symbolize).
    pub place: String,
    pub place_rate: u64,
    pub stack: u32,
    pub caller: u64,
    pub py_stack: u32,
    /// The signal sent to the process (0: none).
    pub signal: i32,
    /// The live-set snapshot written beside the trace (empty: none).
    pub snapshot: String,
}
