//! The event model: one [`Event`] for every intercepted call, whatever path it came through.
//!
//! An event carries what the call did ([`Op`]) plus where and when: the per-process sequence
//! number that orders it causally against every other event, the monotonic time, the thread, the
//! device and context current at the time, the return address of the call (which names the module
//! that asked), an interned native stack, and the NCCL call it ran inside of.

mod api;
pub mod records;
pub(crate) mod snapshot;
pub use snapshot::{SegmentPeak, SnapshotObject, SnapshotThing};

pub use api::{Api, Layer};
use serde::{Deserialize, Serialize};

/// Interned stack id; `0` means "no stack was captured".
pub(crate) type StackId = u32;

/// One intercepted call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Causal order within the process. A call that releases something takes its number before
    /// the real function runs; a call that creates something takes it after, so a free always
    /// sorts before the allocation that reuses its address, on whatever thread.
    pub seq: u64,
    /// `CLOCK_MONOTONIC` nanoseconds when the call returned.
    pub time_ns: u64,
    /// OS thread id of the caller.
    pub thread: u32,
    /// The entry point the program called.
    pub api: Api,
    /// For a runtime call: the driver call it made beneath, merged into this event.
    pub inner: Option<Api>,
    /// For a driver call made inside a runtime call that was not merged: that runtime call.
    pub outer: Option<Api>,
    /// The raw return code (`CUresult`, `cudaError_t` or `ncclResult_t`); 0 is success.
    pub result: i32,
    /// Device ordinal current when the call returned, or -1 when unknown.
    pub device: i32,
    /// Context current when the call returned (`CUcontext`), or 0 when unknown.
    pub context: u64,
    /// Return address of the intercepted call: the first instruction after the call site.
    pub caller: u64,
    /// Interned native stack (see `format::Record::Stack`), 0 when none.
    pub stack: StackId,
    /// Interned Python stack (see `format::Record::PyStack`), 0 when none (no Python in the
    /// process, or a thread with no Python frames and none seen before on any thread).
    pub py_stack: StackId,
    /// The Python stack is not this thread's own (it runs no Python, like PyTorch's autograd
    /// threads) but the last one captured on any thread before this call.
    pub py_inferred: bool,
    /// Nonzero when the call ran inside an NCCL API call on this thread: the id of that call
    /// (matched with the NCCL event carrying the same scope, which names the communicator).
    pub nccl_scope: u64,
    /// What the call did.
    pub op: Op,
}

impl Event {
    /// A successful call `api` that did `op`, numbered `seq`, with nothing else known: time 0,
    /// thread 0, device 0, no context, caller or stacks. Readers and tests build events from it
    /// with struct update syntax (`Event { caller, ..Event::new(seq, api, op) }`); the tracer
    /// fills every field itself.
    pub fn new(seq: u64, api: Api, op: Op) -> Event {
        Event {
            seq,
            time_ns: 0,
            thread: 0,
            api,
            inner: None,
            outer: None,
            result: 0,
            device: 0,
            context: 0,
            caller: 0,
            stack: 0,
            py_stack: 0,
            py_inferred: false,
            nccl_scope: 0,
            op,
        }
    }

    /// Whether the call succeeded.
    pub fn ok(&self) -> bool {
        self.result == 0
    }
}

/// The kind of memory a pointer-returning allocation hands out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum MemKind {
    /// Plain device memory (`cudaMalloc`, `cuMemAlloc`).
    Device,
    /// Stream-ordered memory from a pool (`cudaMallocAsync`, `cuMemAllocFromPoolAsync`).
    Async,
    /// Unified memory (`cudaMallocManaged`).
    Managed,
    /// Pitched 2D/3D device memory (`cudaMallocPitch`, `cudaMalloc3D`).
    Pitched,
    /// Page-locked host memory (`cudaMallocHost`, `cuMemHostAlloc`).
    HostPinned,
    /// CUDA arrays (`cudaMallocArray`, `cuArrayCreate`).
    Array,
}

impl MemKind {
    /// Short lowercase name used in reports.
    pub const fn name(self) -> &'static str {
        match self {
            MemKind::Device => "device",
            MemKind::Async => "async",
            MemKind::Managed => "managed",
            MemKind::Pitched => "pitched",
            MemKind::HostPinned => "host-pinned",
            MemKind::Array => "array",
        }
    }

    /// Whether the memory lives on the device (and so counts against device memory).
    pub const fn on_device(self) -> bool {
        !matches!(self, MemKind::HostPinned)
    }
}

/// How a communicator's life ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CommEnd {
    /// `ncclCommDestroy`.
    Destroy,
    /// `ncclCommAbort`.
    Abort,
    /// `ncclCommFinalize` (the communicator still exists until destroyed).
    Finalize,
}

/// What an intercepted call did. Pointers, handles and sizes are exactly what the program passed
/// or got back; for a failed call the out-values are 0 and the request is kept.
///
/// Variants are serialized by index: new ones are only ever appended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// A pointer-returning allocation (device, async, managed, pitched, pinned host).
    Alloc {
        kind: MemKind,
        ptr: u64,
        /// Bytes: the request, or `pitch * rows` for pitched memory.
        size: u64,
        stream: u64,
        pool: u64,
        flags: u32,
        /// Row pitch of pitched memory, else 0.
        pitch: u64,
    },
    /// Free of a device pointer (`cudaFree`, `cuMemFree`, `cudaFreeAsync`, `cuMemFreeAsync`).
    Free { ptr: u64, stream: u64 },
    /// Free of page-locked host memory.
    FreeHost { ptr: u64 },
    /// Page-locking existing host memory.
    HostRegister { ptr: u64, size: u64, flags: u32 },
    /// Undoing a `HostRegister`.
    HostUnregister { ptr: u64 },
    /// A virtual address range reservation (`cuMemAddressReserve`).
    Reserve {
        ptr: u64,
        size: u64,
        alignment: u64,
        hint: u64,
    },
    /// Freeing a reservation (`cuMemAddressFree`).
    ReserveFree { ptr: u64, size: u64 },
    /// A physical allocation handle (`cuMemCreate`).
    Create {
        handle: u64,
        size: u64,
        device: i32,
        handle_types: u32,
    },
    /// Dropping a reference to a physical handle (`cuMemRelease`).
    Release { handle: u64 },
    /// Taking a new reference to the handle mapped at `ptr` (`cuMemRetainAllocationHandle`).
    Retain { handle: u64, ptr: u64 },
    /// A handle imported from a shareable OS handle (`cuMemImportFromShareableHandle`).
    Import {
        handle: u64,
        shareable: u64,
        handle_type: u32,
    },
    /// Mapping `handle[offset..offset+size]` at `ptr` (`cuMemMap`).
    Map {
        ptr: u64,
        size: u64,
        offset: u64,
        handle: u64,
    },
    /// Unmapping `[ptr, ptr+size)` (`cuMemUnmap`).
    Unmap { ptr: u64, size: u64 },
    /// A memory pool created (`cuMemPoolCreate`); `device` from its location.
    PoolCreate { pool: u64, device: i32 },
    /// A memory pool destroyed.
    PoolDestroy { pool: u64 },
    /// A pool trimmed down to `keep` bytes.
    PoolTrim { pool: u64, keep: u64 },
    /// Another process's memory opened through IPC at `ptr`.
    IpcOpen { ptr: u64, flags: u32 },
    /// Closing an IPC mapping.
    IpcClose { ptr: u64 },
    /// A CUDA array; `bytes` computed from its descriptor.
    ArrayCreate {
        array: u64,
        bytes: u64,
        width: u64,
        height: u64,
        depth: u64,
        format: u32,
        channels: u32,
    },
    /// A CUDA array destroyed.
    ArrayDestroy { array: u64 },
    /// A context created (`cuCtxCreate*`).
    CtxCreate { ctx: u64, device: i32, flags: u32 },
    /// A context destroyed: everything allocated in it is gone.
    CtxDestroy { ctx: u64 },
    /// A reference to a device's primary context released.
    PrimaryCtxRelease { device: i32 },
    /// A device's primary context reset: everything allocated in it is gone.
    PrimaryCtxReset { device: i32 },
    /// `cudaDeviceReset` of the current device.
    DeviceReset { device: i32 },
    /// A communicator created (`ncclCommInitRank*`, `ncclCommSplit`).
    CommInit {
        comm: u64,
        nranks: i32,
        rank: i32,
        /// The communicator it was split from, else 0.
        parent: u64,
        color: i32,
        key: i32,
    },
    /// Several communicators created by one `ncclCommInitAll`.
    CommInitAll { comms: Vec<u64>, devices: Vec<i32> },
    /// A communicator finalized, destroyed or aborted.
    CommEnd { comm: u64, how: CommEnd },
    /// `ncclMemAlloc`: a buffer over memory NCCL maps itself (the handles are separate events).
    NcclMemAlloc { ptr: u64, size: u64 },
    /// `ncclMemFree`.
    NcclMemFree { ptr: u64 },
    /// A buffer registered with a communicator.
    Register {
        comm: u64,
        ptr: u64,
        size: u64,
        handle: u64,
    },
    /// A registration dropped.
    Deregister { comm: u64, handle: u64 },
    /// A symmetric window registered with a communicator.
    WindowRegister {
        comm: u64,
        ptr: u64,
        size: u64,
        window: u64,
        flags: i32,
    },
    /// A window dropped.
    WindowDeregister { comm: u64, window: u64 },
    /// The program marked the start of a training step (`vramtrace_mark_step`, or an NVTX range
    /// named by `VRAMTRACE_STEP_RANGE`).
    MarkStep { step: u64 },
    /// An NVTX range pushed on the calling thread (`nvtxRangePushA`, `torch.cuda.nvtx.range_push`).
    RangePush { name: String },
    /// The innermost NVTX range of the calling thread popped.
    RangePop,
    /// An NVTX mark (`nvtxMarkA`) or an NVTX start/end range (`nvtxRangeStartA`, `nvtxRangeEnd`).
    Mark { name: String },
    /// The driver's own view of the event's device, sampled by the tracer (`cuMemGetInfo`): bytes
    /// free and total on the device, all processes included.
    DeviceMemory { free: u64, total: u64 },
    /// A reference to a device's primary context taken (`cuDevicePrimaryCtxRetain`).
    PrimaryCtxRetain { device: i32, ctx: u64 },
    /// An iteration of the program's outermost loop as a framework sees it (the Python hooks
    /// of `vramtrace run`: each outermost `nn.Module` call of a program with no optimizer):
    /// the step of a loop that never marks one (`vramtrace_mark_iteration`; `n` from 1).
    MarkIteration { n: u64 },
}
