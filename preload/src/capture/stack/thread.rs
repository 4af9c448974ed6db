//! Per-thread unwinding state: the bounds of this thread's stack (the only memory the unwinder
//! may read) and the rule caches (framehop's and ours), which are mutable and so not shared.
//!
//! The state is allocated on a thread's first capture and reached through a word of the hooks'
//! initial-exec thread state (`capture::thread`: one `%fs`-relative load, where a `thread_local!`
//! in a shared object is a call to `__tls_get_addr`), which has no destructor, so it can be asked
//! for at any point of a thread's life, even while its thread-locals are being destroyed. A
//! thread-local whose destructor frees the state is registered on first use; after it ran,
//! captures on that thread fall back (see [`with`]).

use std::cell::Cell;
use std::ptr;

use framehop::x86_64::CacheX86_64;

use super::memo::Memos;
use super::rules::RuleCache;

/// The unwinding state of one thread.
pub struct ThreadUnwind {
    /// Lowest and one-past-highest address of this thread's stack; (0, 0) if unknown.
    pub stack: (u64, u64),
    pub cache: CacheX86_64,
    pub rules: RuleCache,
    /// Walks remembered, to be proven again rather than repeated.
    pub memos: Memos,
    /// Captures so far (wrapping), to pace the checks of the loaded objects.
    pub captures: u32,
}

/// Sentinels of [`STATE`] besides null (not yet allocated) and a live state.
const IN_USE: usize = 1;
const GONE: usize = 2;

thread_local! {
    static RECLAIM: Reclaim = const { Reclaim };
}

/// The calling thread's word for the state: 0 (none yet), [`IN_USE`], [`GONE`], or a pointer
/// from `Box::into_raw`.
#[inline(always)]
fn word() -> &'static Cell<usize> {
    crate::capture::thread::current().unwind()
}

/// Frees the thread's state when the thread exits.
struct Reclaim;

impl Drop for Reclaim {
    fn drop(&mut self) {
        let p = word().replace(GONE);
        if p != 0 && p != IN_USE && p != GONE {
            // SAFETY: a live state pointer came from Box::into_raw in `with` and, having been
            // swapped out, is referenced by nothing else.
            drop(unsafe { Box::from_raw(p as *mut ThreadUnwind) });
        }
    }
}

/// Runs `f` with this thread's unwinding state; `None` when there is none to be had: the thread
/// is exiting (its state is freed), or a capture is already running on it (a signal handler that
/// captures while the interrupted code captured) — the state is taken out while in use, so `f`
/// has it exclusively.
#[inline]
pub fn with<R>(f: impl FnOnce(&mut ThreadUnwind) -> R) -> Option<R> {
    let word = word();
    let mut p = word.replace(IN_USE);
    if p == IN_USE || p == GONE {
        word.set(p);
        return None;
    }
    if p == 0 {
        match first_use() {
            Some(state) => p = state,
            None => {
                word.set(GONE);
                return None;
            }
        }
    }
    // Puts the state back when `f` is done, even by a panic (which the hook's guard catches).
    struct Restore<'w>(&'w Cell<usize>, usize);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            self.0.set(self.1);
        }
    }
    let _restore = Restore(word, p);
    // SAFETY: `p` is this thread's live state from Box::into_raw; the word holds IN_USE
    // meanwhile, so no other call (nested on this thread) can reach it, and no other thread ever
    // does.
    Some(f(unsafe { &mut *(p as *mut ThreadUnwind) }))
}

/// Allocates the thread's state and registers its destructor; `None` once the thread's
/// thread-locals are torn down, when a state allocated now would never be freed.
#[cold]
fn first_use() -> Option<usize> {
    RECLAIM.try_with(|_| ()).ok()?;
    Some(Box::into_raw(Box::new(ThreadUnwind {
        stack: stack_bounds().unwrap_or((0, 0)),
        cache: CacheX86_64::new(),
        rules: RuleCache::new(),
        memos: Memos::new(),
        captures: 0,
    })) as usize)
}

/// The calling thread's stack, as the threads library knows it (for the main thread glibc reads
/// it from /proc/self/maps, once).
fn stack_bounds() -> Option<(u64, u64)> {
    // SAFETY: pthread_attr_t is plain data that pthread_getattr_np fills in; it is destroyed
    // only after a successful getattr, and getstack only writes our locals.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = ptr::null_mut();
        let mut size: libc::size_t = 0;
        let rc = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        if rc != 0 || addr.is_null() || size == 0 {
            return None;
        }
        let lo = addr as u64;
        Some((lo, lo.checked_add(size as u64)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stack_bounds_hold_the_current_frame() {
        let local = 0u64;
        let here = &local as *const u64 as u64;
        for bounds in [
            with(|t| t.stack).unwrap(),
            std::thread::spawn(|| {
                let local = 0u64;
                let here = &local as *const u64 as u64;
                let b = with(|t| t.stack).unwrap();
                assert!(b.0 <= here && here < b.1, "{b:x?} {here:x}");
                b
            })
            .join()
            .unwrap(),
        ] {
            assert!(bounds.1 > bounds.0);
        }
        let b = with(|t| t.stack).unwrap();
        assert!(b.0 <= here && here < b.1, "{b:x?} {here:x}");
    }

    #[test]
    fn a_nested_use_is_refused() {
        let nested = with(|_| with(|_| ()).is_none()).unwrap();
        assert!(nested);
        assert!(with(|_| ()).is_some(), "the state is back after use");
    }
}
