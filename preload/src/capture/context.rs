//! The device and context current on the calling thread, asked of the real driver directly
//! (`cuCtxGetDevice`, `cuCtxGetCurrent`; neither is hooked, neither allocates).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::thread;
use crate::resolve::driver;

type GetDevice = unsafe extern "C" fn(*mut i32) -> i32;
type GetCurrent = unsafe extern "C" fn(*mut u64) -> i32;

static GET_DEVICE: AtomicUsize = AtomicUsize::new(0);
static GET_CURRENT: AtomicUsize = AtomicUsize::new(0);

#[inline]
fn resolve() -> (usize, usize) {
    let d = GET_DEVICE.load(Ordering::Acquire);
    let c = GET_CURRENT.load(Ordering::Acquire);
    if d != 0 && c != 0 {
        return (d, c);
    }
    resolve_slow()
}

#[cold]
fn resolve_slow() -> (usize, usize) {
    if !driver::known() {
        return (0, 0);
    }
    let d = driver::export(c"cuCtxGetDevice").unwrap_or(0);
    let c = driver::export(c"cuCtxGetCurrent").unwrap_or(0);
    GET_DEVICE.store(d, Ordering::Release);
    GET_CURRENT.store(c, Ordering::Release);
    (d, c)
}

/// Bumped whenever a context is created, destroyed or reset anywhere: a cached (context, device)
/// pair is trusted only within one generation, since a destroyed context's handle can come back
/// naming a context on another device.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// A context was created, destroyed or reset: forget every thread's cached device.
pub fn invalidate() {
    GENERATION.fetch_add(1, Ordering::Release);
}

/// `(device, context)` current on this thread; `(-1, 0)` when unknown.
pub fn current() -> (i32, u64) {
    current_on(thread::current())
}

/// [`current`], with the calling thread's state already at hand (`t` must be the calling
/// thread's own: the hooks look it up once per call).
#[inline]
pub fn current_on(t: &thread::ThreadState) -> (i32, u64) {
    let (d, c) = resolve();
    let mut ctx = 0u64;
    if c != 0 {
        // SAFETY: `c` is the driver's cuCtxGetCurrent(CUcontext*), which writes one pointer.
        let f: GetCurrent = unsafe { std::mem::transmute::<usize, GetCurrent>(c) };
        // SAFETY: as above.
        if unsafe { f(&mut ctx) } != 0 {
            ctx = 0;
        }
    }
    // A context never changes device: while the same one stays current (and none was destroyed
    // anywhere since), one driver call per event is enough.
    let generation = GENERATION.load(Ordering::Acquire);
    if ctx != 0 {
        if let Some(dev) = t.cached_context(ctx, generation) {
            return (dev, ctx);
        }
    }
    let mut dev = -1i32;
    if d != 0 {
        // SAFETY: `d` is the driver's cuCtxGetDevice(CUdevice*), which writes one int.
        let f: GetDevice = unsafe { std::mem::transmute::<usize, GetDevice>(d) };
        // SAFETY: as above.
        if unsafe { f(&mut dev) } != 0 {
            dev = -1;
        }
    }
    if ctx != 0 && dev >= 0 {
        t.cache_context(ctx, dev, generation);
    }
    (dev, ctx)
}
