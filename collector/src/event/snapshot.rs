//! The records that let a segment of a trace be read alone: the live state it starts from
//! ([`Snapshot`]) and what it holds, written at its end ([`SegmentEnd`]).
//!
//! A trace cut into segments (`VRAMTRACE_SEGMENT_BYTES`) begins each segment after the first
//! with a snapshot of the live state as the replay keeps it: every live object with the call
//! that made it, the call sites, the communicators, contexts and pools, the steps so far, and
//! the little a replay remembers to read the next events exactly (allocations waiting for a late
//! free, recent frees, NCCL objects waiting for their communicator). Applied to an empty state,
//! it gives the state a replay of every earlier event gave, as far as what is live and what the
//! next events do to it; the history (failures, anomalies, growth series, peaks) starts again
//! there.
//!
//! These are wire types, apart from the replay's own structures, so that the replay can change
//! without old traces becoming unreadable: fields are only ever appended, enum variants too.
//! Flags are the bits of the live objects' flags in the order `docs/report-json.md` lists them.

use serde::{Deserialize, Serialize};

use super::{Api, MemKind};

/// The live state a segment starts from (`docs/trace-format.md`, "Segments").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// `false` when the writer had no live state to write (its live analysis failed): the live
    /// set before this segment is not known.
    pub complete: bool,
    /// Events applied before it, the last one's sequence number and time, and the time of the
    /// trace's first event.
    pub events: u64,
    pub last_seq: u64,
    pub time_ns: u64,
    pub first_time_ns: u64,
    /// Steps begun, step marks seen, and the times of the first and latest step boundary.
    pub steps: u64,
    pub marks: u64,
    pub step_times: Option<(u64, u64)>,
    pub pool_trims: u64,
    pub primary_releases: u64,
    /// References to each device's primary context taken and not yet released.
    pub primary_refs: Vec<(i32, u32)>,
    /// Sequence numbers missing so far (lost events), as inclusive ranges.
    pub gaps: Vec<(u64, u64)>,
    /// Every call site seen, in the order the replay numbered them.
    pub sites: Vec<SnapshotSite>,
    /// The calls the objects below name.
    pub calls: Vec<SnapshotCall>,
    /// The device of each context seen with one.
    pub context_devices: Vec<(u64, i32)>,
    pub objects: Vec<SnapshotObject>,
    /// Pointer allocations displaced by a newer one at their address, waiting for a late free.
    pub set_aside: Vec<SnapshotObject>,
    /// Pointers recently removed from the pointer tables, oldest first.
    pub removed: Vec<SnapshotRemoval>,
    pub communicators: Vec<SnapshotCommunicator>,
    pub contexts: Vec<SnapshotContext>,
    pub pools: Vec<SnapshotPool>,
    pub devices: Vec<SnapshotDevice>,
    pub nccl: SnapshotNccl,
}

/// A call site: its native stack (or its caller alone) and the program's Python line.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotSite {
    pub stack: u32,
    /// The site's caller when it has no stack, else 0.
    pub caller: u64,
    /// The program's own Python line: code object id (0: none) and line.
    pub code: u32,
    pub line: u32,
    /// The return address of the first call seen there.
    pub first_caller: u64,
    /// The Python stack of its first call that had one (0: none), and whether calls there came
    /// from several Python stacks.
    pub py_stack: u32,
    pub several_py_stacks: bool,
}

/// What the objects of alike calls share: everything of their origin but their sequence number,
/// time and step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotCall {
    /// Index in [`Snapshot::sites`].
    pub site: u32,
    pub api: Api,
    pub thread: u32,
    pub caller: u64,
    pub stack: u32,
    pub py_stack: u32,
    pub device: i32,
    pub context: u64,
    pub module: Option<u32>,
    pub communicator: Option<u64>,
    /// The pool an allocation came from (0: a device's default pool, and other objects).
    pub pool: u64,
}

/// A live object: the call that made it (an index in [`Snapshot::calls`]), when, its flags,
/// and what it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotObject {
    pub call: u32,
    pub seq: u64,
    pub time_ns: u64,
    pub step: u64,
    pub flags: u16,
    pub thing: SnapshotThing,
}

/// What a live object is, with the fields of its own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapshotThing {
    /// A pointer allocation: in the host table (pinned memory) or the device one.
    Allocation {
        host: bool,
        kind: MemKind,
        ptr: u64,
        size: u64,
    },
    HostRegistration {
        ptr: u64,
        size: u64,
        register_flags: u32,
    },
    Array {
        array: u64,
        bytes: u64,
    },
    Ipc {
        ptr: u64,
    },
    Reservation {
        ptr: u64,
        size: u64,
        alignment: u64,
    },
    Handle {
        handle: u64,
        size: u64,
        device: i32,
        refs: u32,
        mappings: u32,
    },
    Mapping {
        ptr: u64,
        size: u64,
        offset: u64,
        handle: u64,
    },
    NcclBuffer {
        ptr: u64,
        size: u64,
    },
    Registration {
        comm: u64,
        ptr: u64,
        size: u64,
        handle: u64,
    },
    Window {
        comm: u64,
        ptr: u64,
        size: u64,
        window: u64,
        window_flags: i32,
    },
}

/// A pointer recently removed from a pointer table (to tell a double free from an invalid one,
/// and a late free from an unknown one), or freed before its allocation arrived (`early`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRemoval {
    pub host: bool,
    pub early: bool,
    pub ptr: u64,
    pub seq: u64,
    /// Removed by a context teardown, not freed.
    pub teardown: bool,
}

/// An NCCL communicator, live or ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotCommunicator {
    pub call: u32,
    pub seq: u64,
    pub time_ns: u64,
    pub step: u64,
    pub comm: u64,
    pub rank: i32,
    pub nranks: i32,
    pub device: i32,
    pub parent: u64,
    /// 0 live, 1 finalized, 2 destroyed, 3 aborted.
    pub state: u8,
    pub ended_seq: Option<u64>,
}

/// A context the program created.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotContext {
    pub call: u32,
    pub seq: u64,
    pub time_ns: u64,
    pub step: u64,
    pub ctx: u64,
    pub device: i32,
}

/// A memory pool the program created.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotPool {
    pub call: u32,
    pub seq: u64,
    pub time_ns: u64,
    pub step: u64,
    pub pool: u64,
    pub device: i32,
    pub trims: u64,
}

/// The driver's view of a device's memory, as sampled so far.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotDevice {
    pub device: i32,
    pub total: u64,
    pub samples: u64,
    pub first_used: u64,
    pub first_traced: u64,
    pub last_used: u64,
    pub last_traced: u64,
    pub last_seq: u64,
    pub last_time_ns: u64,
}

/// An object named by where it is kept, its key and the sequence number that made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRef {
    /// 0 device allocations, 1 host allocations, 2 host registrations, 3 arrays, 4 IPC
    /// mappings, 5 reservations, 6 physical handles, 7 mappings.
    pub store: u8,
    pub key: u64,
    pub seq: u64,
}

/// NCCL objects waiting to be given to a communicator.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotNccl {
    /// Objects made inside NCCL calls whose events have not come yet, by call (scope).
    pub scopes: Vec<(u64, Vec<SnapshotRef>)>,
    /// The calls in the order their first object came (a call may be listed again, and one
    /// whose event came may still be listed: the order as the replay keeps it).
    pub scope_order: Vec<u64>,
    /// The communicator each NCCL thread works for (`None`: several).
    pub affinity: Vec<(u32, Option<u64>)>,
    /// Objects NCCL made outside any call, waiting for a communicator on their device.
    pub unscoped: Vec<SnapshotRef>,
    /// Objects of NCCL helper threads waiting for the open call they appeared during: the
    /// call's scope, the thread, the object.
    pub deferred: Vec<(u64, u32, SnapshotRef)>,
}

/// The last record of a segment: what it held, so a reader can tell where to start without
/// reading it (`docs/trace-format.md`, "Segments").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentEnd {
    pub index: u32,
    /// Events in the segment, and the last one's sequence number and time.
    pub events: u64,
    pub last_seq: u64,
    pub time_ns: u64,
    /// Steps begun by its end.
    pub steps: u64,
    /// Per device, the highest device memory live from the start of the trace to the end of
    /// this segment.
    pub peaks: Vec<SegmentPeak>,
}

/// A device's highest live device memory, and the event it was reached at.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentPeak {
    pub device: i32,
    pub bytes: u64,
    /// The event's ordinal in the trace (1 = the first event).
    pub event: u64,
    pub seq: u64,
    pub time_ns: u64,
}
