//! One intercepted call, from entry to event: decides whether it is traced, merged into the
//! runtime call above it, or passed through; takes its sequence number at the point that keeps
//! causal order; and turns what happened into an [`Event`] for the writer.
//!
//! The real function is always called exactly once by the hook itself, between
//! [`Call::begin`] and [`Call::end`]; nothing here can stop or repeat it, and a panic in the
//! tracing part is caught, counted, and forgotten.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;

use vramtrace_collector::event::{Api, Event, Layer, Op};

use std::mem::MaybeUninit;

use super::meminfo;
use crate::capture::python::{self, PyStack};
use crate::capture::stack::{self, StopAt};
use crate::capture::thread::{self, ThreadState};
use crate::capture::{clock, context, intern};
use crate::self_profile::{self, Stage, Timer};
use crate::session::{Session, HOOK_PANICS};

/// Where a call takes its sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Makes something (allocation, mapping, handle): numbered after the real call returns, so
    /// it sorts after every free that made its address available.
    Create,
    /// Releases something: numbered before the real call, so it sorts before any allocation that
    /// reuses what it released.
    Destroy,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Off,
    Merged,
    Traced,
    /// Traced, but its event could not be queued (counted as dropped).
    Dropped,
}

/// An intercepted call in progress.
pub struct Call {
    session: Option<&'static Session>,
    /// This thread's state, looked up once per call (a thread-local access in a shared object
    /// is a function call).
    thread: *const ThreadState,
    api: Api,
    caller: usize,
    order: Order,
    mode: Mode,
    seq: u64,
    outer: Option<Api>,
    /// The runtime call in progress before this one (`ThreadState::runtime_word`).
    saved_runtime: u32,
    saved_scope: u64,
    scope: u64,
}

/// Entry points as a set: a bit per `Api` index. The hooks classify calls with one load and a
/// bit test instead of walking `match`es on every call.
#[derive(Clone, Copy)]
struct ApiSet([u64; 4]);

const APIS: usize = Api::ALL.len();
const _: () = assert!(APIS <= 256, "ApiSet holds 256 entry points");

impl ApiSet {
    #[inline(always)]
    const fn contains(&self, api: Api) -> bool {
        let i = api as usize;
        self.0[i / 64] >> (i % 64) & 1 != 0
    }

    const fn with(mut self, api: Api) -> ApiSet {
        let i = api as usize;
        self.0[i / 64] |= 1 << (i % 64);
        self
    }
}

/// For each runtime entry point (by index), the driver calls that are its own work.
static MERGES: [ApiSet; APIS] = {
    let mut table = [ApiSet([0; 4]); APIS];
    let mut r = 0;
    while r < APIS {
        let mut d = 0;
        while d < APIS {
            if merges(Api::ALL[r], Api::ALL[d]) {
                table[r] = table[r].with(Api::ALL[d]);
            }
            d += 1;
        }
        r += 1;
    }
    table
};

/// The entry points this process traces (by layer, and host memory, from the settings).
fn traced(session: &Session) -> &'static ApiSet {
    static TRACED: std::sync::OnceLock<ApiSet> = std::sync::OnceLock::new();
    TRACED.get_or_init(|| {
        Api::ALL
            .iter()
            .filter(|&&a| layer_on(a, session) && (session.config.capture.host || !is_host(a)))
            .fold(ApiSet([0; 4]), |set, &a| set.with(a))
    })
}

/// Whether a driver call made inside a runtime call is that runtime call's own work (and so one
/// event, not two).
const fn merges(runtime: Api, driver: Api) -> bool {
    use Api::*;
    matches!(
        (runtime, driver),
        (CudaMalloc, CuMemAlloc)
            | (CudaFree, CuMemFree)
            | (CudaMallocAsync, CuMemAllocAsync | CuMemAllocAsyncPtsz)
            | (CudaFreeAsync, CuMemFreeAsync | CuMemFreeAsyncPtsz)
            | (
                CudaMallocFromPoolAsync,
                CuMemAllocFromPoolAsync | CuMemAllocFromPoolAsyncPtsz
            )
            | (CudaMallocManaged, CuMemAllocManaged)
            | (CudaMallocHost, CuMemAllocHost | CuMemHostAlloc)
            | (CudaHostAlloc, CuMemHostAlloc)
            | (CudaFreeHost, CuMemFreeHost)
            | (CudaHostRegister, CuMemHostRegister | CuMemHostRegisterV1)
            | (CudaHostUnregister, CuMemHostUnregister)
            | (CudaMallocPitch | CudaMalloc3D, CuMemAllocPitch)
            | (CudaMallocArray, CuArrayCreate)
            | (CudaMalloc3DArray, CuArray3DCreate)
            | (CudaFreeArray, CuArrayDestroy)
            | (CudaMemPoolCreate, CuMemPoolCreate)
            | (CudaMemPoolDestroy, CuMemPoolDestroy)
            | (CudaMemPoolTrimTo, CuMemPoolTrimTo)
            | (
                CudaDeviceReset,
                CuDevicePrimaryCtxReset | CuDevicePrimaryCtxResetV1
            )
    )
}

/// Calls after which a context handle may name another device.
const fn changes_contexts_rule(api: Api) -> bool {
    use Api::*;
    matches!(
        api,
        CuCtxCreateV2
            | CuDevicePrimaryCtxRetain
            | CuCtxCreateV3
            | CuCtxCreateV4
            | CuCtxDestroy
            | CuDevicePrimaryCtxRelease
            | CuDevicePrimaryCtxReleaseV1
            | CuDevicePrimaryCtxReset
            | CuDevicePrimaryCtxResetV1
            | CudaDeviceReset
    )
}

/// [`changes_contexts_rule`] as a set: one bit test on every traced call.
static CHANGES_CONTEXTS: ApiSet = {
    let mut set = ApiSet([0; 4]);
    let mut i = 0;
    while i < APIS {
        if changes_contexts_rule(Api::ALL[i]) {
            set = set.with(Api::ALL[i]);
        }
        i += 1;
    }
    set
};

#[inline(always)]
fn changes_contexts(api: Api) -> bool {
    CHANGES_CONTEXTS.contains(api)
}

#[inline]
fn layer_on(api: Api, s: &Session) -> bool {
    let c = &s.config.capture;
    match api.layer() {
        Layer::Runtime => c.runtime,
        Layer::Driver => c.driver,
        Layer::Nccl => c.nccl,
        Layer::Tracer => true,
    }
}

/// Host-memory calls, which `VRAMTRACE_CAPTURE` can switch off separately.
#[inline]
fn is_host(api: Api) -> bool {
    use Api::*;
    matches!(
        api,
        CudaMallocHost
            | CudaHostAlloc
            | CudaFreeHost
            | CudaHostRegister
            | CudaHostUnregister
            | CuMemHostAlloc
            | CuMemAllocHost
            | CuMemFreeHost
            | CuMemHostRegister
            | CuMemHostRegisterV1
            | CuMemHostUnregister
    )
}

#[inline(always)]
fn guarded<T>(f: impl FnOnce() -> T) -> Option<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => Some(v),
        Err(_) => {
            HOOK_PANICS.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

impl Call {
    const OFF: Call = Call {
        session: None,
        thread: std::ptr::null(),
        api: Api::CudaMalloc,
        caller: 0,
        order: Order::Create,
        mode: Mode::Off,
        seq: 0,
        outer: None,
        saved_runtime: 0,
        saved_scope: 0,
        scope: 0,
    };

    /// Starts tracing a call to `api` made from return address `caller`.
    #[inline]
    pub fn begin(api: Api, caller: usize, order: Order) -> Call {
        guarded(|| Call::begin_call(api, caller, order, &mut self_profile::Off))
            .unwrap_or(Call::OFF)
    }

    // Inlined into each hook, as `end_inner` is: as calls, their frames and the `Call` handed
    // between them through memory cost about 6 ns a traced call (measured side by side,
    // docs/performance.md).
    #[inline(always)]
    fn begin_call<W: Timer>(api: Api, caller: usize, order: Order, w: &mut W) -> Call {
        let Some(session) = super::session() else {
            return Call::OFF;
        };
        if !traced(session).contains(api) {
            return Call::OFF;
        }
        let mut call = Call {
            session: Some(session),
            api,
            caller,
            order,
            ..Call::OFF
        };
        let t = thread::current();
        call.thread = t as *const ThreadState;
        call.mode = if t.is_tracer() || t.is_busy() {
            Mode::Off
        } else {
            match api.layer() {
                Layer::Runtime => {
                    call.saved_runtime = t.replace_runtime_word(api as u32 + 1);
                    Mode::Traced
                }
                Layer::Driver => {
                    // The runtime call in progress (its index + 1 in the low half, a merged
                    // driver call's in the high half; see `ThreadState::runtime_word`).
                    // A merged call that failed made nothing: the runtime's next try merges.
                    let word = t.runtime_word();
                    let outer = (word & 0xffff) as usize;
                    let free = word >> 16 == 0 || word & thread::MERGED_FAILED != 0;
                    if outer != 0 && free && MERGES[outer - 1].contains(api) {
                        t.set_runtime_word(word & 0xffff | (api as u32 + 1) << 16);
                        Mode::Merged
                    } else {
                        call.outer = outer.checked_sub(1).map(|i| Api::ALL[i]);
                        Mode::Traced
                    }
                }
                Layer::Nccl => {
                    call.scope = session.next_scope();
                    call.saved_scope = t.replace_nccl_scope(call.scope);
                    // A runtime call inside NCCL (its own static runtime is invisible, but a
                    // dynamic one is not) must not swallow NCCL's driver calls.
                    call.saved_runtime = t.replace_runtime_word(0);
                    Mode::Traced
                }
                Layer::Tracer => Mode::Traced,
            }
        };
        if call.mode == Mode::Traced && order == Order::Destroy {
            w.lap(Stage::Enter);
            // Numbered and claimed before the real call: the writer then waits for this event
            // (the slot is WRITING) however long the real call takes.
            match session.reserve() {
                Some(seq) if session.claim(seq) => call.seq = seq,
                _ => call.mode = Mode::Dropped,
            }
            w.lap(Stage::Claim);
        }
        call
    }

    /// Finishes the call: `result` is what the real function returned, `op` reads the
    /// arguments and out-parameters (only called for traced calls).
    #[inline]
    pub fn end(self, result: i32, op: impl FnOnce() -> Op) {
        if self.mode == Mode::Merged && result != 0 {
            self.unmerge();
        }
        if self.mode != Mode::Traced && self.mode != Mode::Dropped {
            return;
        }
        if changes_contexts(self.api) {
            context::invalidate();
        }
        guarded(|| self.end_inner(result, op, &mut self_profile::Off));
    }

    /// One intercepted call, whole, under a single unwind guard: `real` calls the real function
    /// with the program's arguments and is called exactly once; its result is returned. In
    /// between the call is traced as `api` (`op` reads the arguments, the out-parameters and the
    /// result; only called for traced calls), as [`Call::begin`] and [`Call::end`] would.
    ///
    /// A panic before the real call leaves the call untraced and the real function is called
    /// after the guard; a panic after it loses only the event (counted either way). One guard
    /// instead of one per phase keeps the call's state in the hook's own frame (moving it out of
    /// a guard's buffer stalls on the stores that just wrote it).
    ///
    /// With the self-profile on (`VRAMTRACE_SELF_PROFILE`), the same steps run in a copy that
    /// times each stage; this branch is all the profile costs when off.
    #[inline(always)]
    pub fn run(
        api: Api,
        caller: usize,
        order: Order,
        real: impl Fn() -> i32,
        op: impl FnOnce(i32) -> Op,
    ) -> i32 {
        if self_profile::enabled() {
            Call::run_watched::<self_profile::On>(api, caller, order, real, op)
        } else {
            Call::run_watched::<self_profile::Off>(api, caller, order, real, op)
        }
    }

    /// [`Call::run`], its stages timed by `W`.
    #[inline(always)]
    fn run_watched<W: Timer>(
        api: Api,
        caller: usize,
        order: Order,
        real: impl Fn() -> i32,
        op: impl FnOnce(i32) -> Op,
    ) -> i32 {
        let mut result: Option<i32> = None;
        let traced = catch_unwind(AssertUnwindSafe(|| {
            let mut w = W::start();
            let call = Call::begin_call(api, caller, order, &mut w);
            let traced = call.mode == Mode::Traced || call.mode == Mode::Dropped;
            if call.mode == Mode::Merged {
                w.lap(Stage::Nested);
            } else if traced && order == Order::Create {
                w.lap(Stage::Enter);
            }
            let r = real();
            result = Some(r);
            if call.mode == Mode::Merged && r != 0 {
                call.unmerge();
            }
            if !traced {
                return;
            }
            w.lap(Stage::Real);
            w.traced();
            if changes_contexts(call.api) {
                context::invalidate();
            }
            call.end_inner(r, || op(r), &mut w);
        }));
        if traced.is_err() {
            HOOK_PANICS.fetch_add(1, Ordering::Relaxed);
        }
        match result {
            Some(r) => r,
            // The guard caught a panic before the real call: make it now, untraced.
            None => real(),
        }
    }

    /// A merged driver call that failed made nothing: the runtime call above it keeps its name
    /// (its event's `inner`) but marks it failed, so that the call it may make again merges too.
    /// The CUDA runtime was seen to on the GPU: a PyTorch autograd thread's first
    /// `cudaMallocAsync` asked `cuMemAllocAsync` twice, and the second came as an object of its
    /// own beside the runtime's, at one address.
    #[cold]
    fn unmerge(&self) {
        // SAFETY: set in `begin` from this thread's thread-local (a merged call always has it),
        // which lives as long as the thread; a Call never leaves the thread that made it.
        let t = unsafe { &*self.thread };
        t.set_runtime_word(t.runtime_word() | thread::MERGED_FAILED);
    }

    #[inline(always)]
    fn end_inner<W: Timer>(mut self, result: i32, op: impl FnOnce() -> Op, w: &mut W) {
        let Some(session) = self.session else { return };
        // SAFETY: set in `begin` from this thread's thread-local, which lives as long as the
        // thread; a Call never leaves the thread that made it (it holds a raw pointer: !Send).
        let t = unsafe { &*self.thread };
        let layer = self.api.layer();
        let mut inner = None;
        match layer {
            Layer::Runtime => {
                let word = t.replace_runtime_word(self.saved_runtime) & !thread::MERGED_FAILED;
                inner = (word >> 16).checked_sub(1).map(|i| Api::ALL[i as usize]);
            }
            Layer::Nccl => {
                t.replace_nccl_scope(self.saved_scope);
                t.set_runtime_word(self.saved_runtime);
            }
            _ => {}
        }
        if self.mode == Mode::Dropped {
            return;
        }
        t.set_busy(true);
        // Should building the event panic, the guard's drop gives a claimed slot back (the
        // writer must not wait for it) and clears `busy`; the hook's own guard catches it.
        let unwinding = Unwinding {
            t,
            claimed: (self.order == Order::Destroy).then_some((session, self.seq)),
        };
        let (thread, tls_scope) = (t.tid(), t.nccl_scope());
        'built: {
            let time = clock::now();
            let (device, context) = if self.order == Order::Create {
                context::current_on(t)
            } else {
                (-1, 0)
            };
            w.lap(Stage::Context);
            // Python frames name the line that asked for memory: allocations only.
            let python = session.config.python_depth != 0 && !python::absent();
            let (py_stack, py_inferred) =
                if python && self.order == Order::Create && layer != Layer::Tracer {
                    python_stack(session.config.python_depth, w)
                } else {
                    (0, false)
                };
            // With Python stacks on, the native walk ends at the interpreter's evaluation loop:
            // an allocation's Python frames say where it came from, and beyond the loop a
            // release's native frames are only the interpreter's own.
            let stop = if python {
                python::interpreter()
            } else {
                StopAt::NEVER
            };
            let stack = match session.config.stack_depth {
                0 => 0,
                depth => native_stack(depth, self.caller as u64, stop, w),
            };
            let (api, outer, caller) = (self.api, self.outer, self.caller as u64);
            let nccl_scope = if layer == Layer::Nccl {
                self.scope
            } else {
                tls_scope
            };
            // The event, written straight into its claimed slot (a macro, not a closure: a
            // closure's captures are copied around first).
            macro_rules! event {
                ($seq:expr, $op:expr) => {
                    Event {
                        seq: $seq,
                        time_ns: time,
                        thread,
                        api,
                        inner,
                        outer,
                        result,
                        device,
                        context,
                        caller,
                        stack,
                        py_stack,
                        py_inferred,
                        nccl_scope,
                        op: $op,
                    }
                };
            }
            if self.order == Order::Create {
                // Read before a number is taken (nothing is claimed should it fail).
                let op = op();
                // Numbered now, after the real call, and claimed at once.
                let Some(seq) = session.reserve() else {
                    break 'built;
                };
                self.seq = seq;
                if !session.claim(seq) {
                    break 'built;
                }
                w.lap(Stage::Claim);
                session.fill_with(seq, || event!(seq, op));
            } else {
                // Claimed in `begin`: built straight into the slot, `op` read straight into it (a
                // copy of a value just written stalls).
                let seq = self.seq;
                session.fill_with(seq, || event!(seq, op()));
            }
            w.lap(Stage::Fill);
            if self.order == Order::Create && result == 0 {
                // The event's clock reading serves the interval check (one TSC read less).
                if let Some((free, total)) = meminfo::sample_due(
                    device,
                    session.config.meminfo_interval,
                    api == Api::TracerMarkStep,
                    time,
                ) {
                    register_exit_sample();
                    device_memory_event(session, thread, device, context, caller, free, total);
                }
            }
        }
        std::mem::forget(unwinding);
        t.set_busy(false);
        w.lap(Stage::Leave);
    }
}

/// The calling thread's Python stack, interned: its id, and whether it was inferred (the thread
/// runs no Python). Out of line: its frame buffer is only on the stack meanwhile.
#[inline(never)]
fn python_stack<W: Timer>(depth: usize, w: &mut W) -> (u32, bool) {
    let mut frames = [MaybeUninit::uninit(); 256];
    let found = python::capture(&mut frames[..depth.min(256)]);
    w.lap(Stage::Python);
    match found {
        PyStack::Own(n) => {
            // SAFETY: `capture` initialised the first `n` elements.
            let frames = unsafe { std::slice::from_raw_parts(frames.as_ptr().cast(), n) };
            let id = python::intern(frames);
            w.lap(Stage::Intern);
            (id, false)
        }
        PyStack::Inferred(id) => (id, true),
        PyStack::None => (0, false),
    }
}

/// The calling thread's native stack from `caller` outward, interned (a walk this thread
/// remembers gives its id without walking or interning). Out of line: its frame buffer is only
/// on the stack meanwhile.
#[inline(never)]
fn native_stack<W: Timer>(depth: usize, caller: u64, stop: StopAt, w: &mut W) -> u32 {
    let mut walked = false;
    let id = stack::capture_id(depth, caller, stop, true, |frames| {
        walked = true;
        w.lap(Stage::Native);
        let id = intern::NATIVE.intern(frames);
        w.lap(Stage::Intern);
        id
    });
    // One lap per walk: what follows the interning (remembering the walk) is the same walk's.
    if walked {
        w.extend(Stage::Native);
    } else {
        w.lap(Stage::Remembered);
    }
    id
}

/// Undoes [`Call::end_inner`]'s setup when building the event panics: dropped only while
/// unwinding (forgotten otherwise). Nothing in it can panic.
struct Unwinding<'a> {
    t: &'a ThreadState,
    /// The slot claimed before the real call (a release), which will now get no event.
    claimed: Option<(&'static Session, u64)>,
}

impl Drop for Unwinding<'_> {
    fn drop(&mut self) {
        if let Some((session, seq)) = self.claimed {
            // Tell the writer not to wait for it.
            session.abandon(seq);
        }
        self.t.set_busy(false);
    }
}

/// The tracer event of a device-memory sample, right after the allocation that took it.
#[cold]
#[inline(never)]
fn device_memory_event(
    session: &Session,
    thread: u32,
    device: i32,
    context: u64,
    caller: u64,
    free: u64,
    total: u64,
) {
    if let Some(seq) = session.reserve().filter(|&s| session.claim(s)) {
        let time = clock::now();
        session.fill_with(seq, || Event {
            seq,
            time_ns: time,
            thread,
            api: Api::TracerMemInfo,
            inner: None,
            outer: None,
            result: 0,
            device,
            context,
            caller,
            stack: 0,
            py_stack: 0,
            py_inferred: false,
            nccl_scope: 0,
            op: Op::DeviceMemory { free, total },
        });
    }
}

/// Registers [`sample_at_exit`] with `atexit` once, after the first successful sample. By then
/// the CUDA runtime has registered its own teardown, and `atexit` handlers run in reverse order,
/// so the final sample is taken while the driver still answers. (The library destructor is too
/// late: on the GPU machine the driver is gone by then.)
fn register_exit_sample() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        extern "C" fn at_exit() {
            // A panic must not unwind into libc's exit.
            let _ = std::panic::catch_unwind(sample_at_exit);
        }
        // SAFETY: registers a plain extern "C" function of this never-unloaded library.
        if unsafe { libc::atexit(at_exit) } != 0 {
            crate::warn::warn("could not register the exit sample of device memory");
        }
    });
}

/// A final sample on the exiting thread's current device, recorded as a tracer event.
fn sample_at_exit() {
    if crate::session::running().is_none() {
        return;
    }
    let (device, _) = context::current();
    let interval = crate::session::config().meminfo_interval;
    if interval.is_zero() {
        return;
    }
    if let Some((free, total)) = meminfo::sample_due(device, interval, true, clock::now()) {
        let call = Call::begin(Api::TracerMemInfo, 0, Order::Create);
        call.end(0, || Op::DeviceMemory { free, total });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_merge_table_is_the_merge_rule() {
        for &r in Api::ALL {
            for &d in Api::ALL {
                assert_eq!(MERGES[r as usize].contains(d), merges(r, d), "{r:?} {d:?}");
            }
        }
        assert!(MERGES[Api::CudaMallocAsync as usize].contains(Api::CuMemAllocAsyncPtsz));
        assert!(!MERGES[Api::CudaMallocAsync as usize].contains(Api::CuMemFreeAsync));
    }

    #[test]
    fn the_context_set_is_the_context_rule() {
        for &a in Api::ALL {
            assert_eq!(changes_contexts(a), changes_contexts_rule(a), "{a:?}");
        }
        assert!(changes_contexts(Api::CudaDeviceReset));
        assert!(!changes_contexts(Api::CudaMalloc));
    }
}
