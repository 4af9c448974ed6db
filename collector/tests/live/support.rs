//! A small trace builder: events with increasing sequence numbers, applied to a `LiveState`, from
//! a fixed set of modules (an application, the CUDA runtime and driver, NCCL, cuBLAS).

use vramtrace_collector::event::{Api, CommEnd, Event, MemKind, Op};
use vramtrace_collector::format::{Module, Record, Segment, StackDef};
use vramtrace_collector::live::LiveState;

pub const APP: u64 = 0x40_0000;
pub const CUDART: u64 = 0x1_0000;
pub const LIBCUDA: u64 = 0x2_0000;
pub const NCCL: u64 = 0x3_0000;
pub const CUBLAS: u64 = 0x5_0000;

pub const APP_ID: u32 = 1;
pub const NCCL_ID: u32 = 4;
pub const CUBLAS_ID: u32 = 5;

fn module(id: u32, name: &str, start: u64) -> Record {
    Record::Module(Module {
        id,
        path: format!("/opt/lib/{name}"),
        base: start,
        segments: vec![Segment {
            start,
            len: 0x1_0000,
            executable: true,
        }],
        build_id: vec![],
    })
}

/// A `LiveState` fed by a builder that numbers events.
pub struct Trace {
    pub state: LiveState,
    seq: u64,
    /// Defaults for the next events.
    pub thread: u32,
    pub device: i32,
    pub context: u64,
    pub caller: u64,
    pub stack: u32,
    pub scope: u64,
    /// The stacks (native and Python) and code objects defined so far.
    stacks: Vec<Record>,
}

/// The modules every trace of the builder has.
fn modules() -> [Record; 5] {
    [
        module(APP_ID, "app", APP),
        module(2, "libcudart.so.13", CUDART),
        module(3, "libcuda.so.1", LIBCUDA),
        module(NCCL_ID, "libnccl.so.2", NCCL),
        module(CUBLAS_ID, "libcublas.so.13", CUBLAS),
    ]
}

impl Trace {
    pub fn new() -> Self {
        let mut state = LiveState::new();
        for r in modules() {
            state.apply(&r);
        }
        Trace {
            state,
            stacks: Vec::new(),
            seq: 0,
            thread: 100,
            device: 0,
            context: 0xc0,
            caller: APP + 0x100,
            stack: 0,
            scope: 0,
        }
    }

    pub fn stack(&mut self, id: u32, frames: &[u64]) {
        let def = Record::Stack(StackDef {
            id,
            frames: frames.to_vec(),
        });
        self.state.apply(&def);
        self.stacks.push(def);
    }

    /// Applies a definition (a Python code object or stack) and keeps it among
    /// [`Trace::definitions`].
    pub fn define(&mut self, def: Record) {
        self.state.apply(&def);
        self.stacks.push(def);
    }

    /// The records the builder's events need before them: its modules and stacks.
    pub fn definitions(&self) -> Vec<Record> {
        modules()
            .into_iter()
            .chain(self.stacks.iter().cloned())
            .collect()
    }

    /// An event with the next sequence number and the current defaults, not yet applied.
    pub fn make(&mut self, api: Api, op: Op) -> Event {
        self.seq += 1;
        Event {
            time_ns: self.seq * 1000,
            thread: self.thread,
            device: self.device,
            context: self.context,
            caller: self.caller,
            stack: self.stack,
            nccl_scope: self.scope,
            ..Event::new(self.seq, api, op)
        }
    }

    pub fn apply(&mut self, e: Event) -> u64 {
        let seq = e.seq;
        self.state.apply(&Record::Event(e));
        seq
    }

    /// Applies a successful call; returns its sequence number.
    pub fn ok(&mut self, api: Api, op: Op) -> u64 {
        let e = self.make(api, op);
        self.apply(e)
    }

    /// Applies a failed call.
    pub fn fail(&mut self, api: Api, op: Op, result: i32) -> u64 {
        let mut e = self.make(api, op);
        e.result = result;
        self.apply(e)
    }

    /// Applies a successful call with an explicit sequence number (for late events).
    pub fn at(&mut self, seq: u64, api: Api, op: Op) {
        let before = self.seq;
        let mut e = self.make(api, op);
        e.seq = seq;
        // Later events follow the highest number so far: a gap means a lost event.
        self.seq = before.max(seq);
        self.apply(e);
    }

    pub fn malloc(&mut self, ptr: u64, size: u64) -> u64 {
        self.ok(Api::CudaMalloc, alloc(MemKind::Device, ptr, size))
    }

    pub fn free(&mut self, ptr: u64) -> u64 {
        self.ok(Api::CudaFree, Op::Free { ptr, stream: 0 })
    }
}

pub fn alloc(kind: MemKind, ptr: u64, size: u64) -> Op {
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

pub fn create(handle: u64, size: u64, device: i32) -> Op {
    Op::Create {
        handle,
        size,
        device,
        handle_types: 0,
    }
}

pub fn map(ptr: u64, size: u64, handle: u64) -> Op {
    Op::Map {
        ptr,
        size,
        offset: 0,
        handle,
    }
}

pub fn reserve(ptr: u64, size: u64) -> Op {
    Op::Reserve {
        ptr,
        size,
        alignment: 0,
        hint: 0,
    }
}

pub fn comm_init(comm: u64, rank: i32, nranks: i32) -> Op {
    Op::CommInit {
        comm,
        nranks,
        rank,
        parent: 0,
        color: 0,
        key: 0,
    }
}

pub fn comm_end(comm: u64, how: CommEnd) -> Op {
    Op::CommEnd { comm, how }
}

/// Category and address of every live object, in listing order.
pub fn listing(state: &LiveState) -> Vec<(&'static str, u64, u64)> {
    state
        .live_objects()
        .map(|o| (o.category.name(), o.address, o.bytes))
        .collect()
}

/// The live object of `category` at `address`.
pub fn find(
    state: &LiveState,
    category: vramtrace_collector::live::Category,
    address: u64,
) -> Option<vramtrace_collector::live::LiveObject<'_>> {
    state
        .live_objects()
        .find(|o| o.category == category && o.address == address)
}
