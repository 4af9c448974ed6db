//! The frames framehop finds, checked against libgcc's for the same call chains: plain Rust
//! chains, other threads, a library without frame pointers loaded (and unloaded) after the first
//! capture, and walks cut short by the stack bounds. The ignored `capture_cost_by_depth` prints
//! the cost per capture (`cargo test --release -p vramtrace-preload capture_cost -- --ignored
//! --nocapture`).

use std::ffi::{c_void, CString};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::*;

/// libgcc's walk of at most `depth` frames from `caller`.
fn libgcc(depth: usize, caller: u64) -> Box<[u64]> {
    let mut out = [MaybeUninit::uninit(); MAX_DEPTH];
    let n = capture_with_libgcc(caller, &mut out[..depth]);
    // SAFETY: the first `n` were written.
    Box::from(unsafe { std::slice::from_raw_parts(out.as_ptr() as *const u64, n) })
}

/// What one call of [`hook`] saw.
#[derive(Debug)]
struct Seen {
    /// The return address of the call to `hook`, as the trampolines hand `caller` to a hook.
    caller: u64,
    captured: Box<[u64]>,
    /// The frames libgcc walks from `caller` outward.
    reference: Vec<u64>,
}

/// Plays an intercepted call: finds its own return address with libgcc, then captures.
#[inline(never)]
fn hook(depth: usize) -> Seen {
    let (caller, reference) = from_own_caller(hook as *const () as u64);
    let captured = capture(depth, caller).expect("a stack");
    black_box(Seen {
        caller,
        captured,
        reference,
    })
}

/// libgcc's frames from the return address of the function starting at `function` outward.
fn from_own_caller(function: u64) -> (u64, Vec<u64>) {
    let mut all = Vec::new();
    backtrace::trace(|f| {
        all.push((f.ip() as u64, f.symbol_address() as u64));
        true
    });
    let own = all
        .iter()
        .position(|&(_, start)| start == function)
        .expect("the function's own frame");
    // libgcc reports the end of the stack as a frame at 0.
    let reference: Vec<u64> = all[own + 1..]
        .iter()
        .map(|&(ip, _)| ip)
        .take_while(|&ip| ip != 0)
        .collect();
    (reference[0], reference)
}

/// `n` frames of its own, then `hook`.
#[inline(never)]
fn chain(n: usize, depth: usize) -> Seen {
    if n == 0 {
        return hook(depth);
    }
    // Not a tail call: the frame stays on the stack.
    black_box(chain(n - 1, depth))
}

fn assert_matches_libgcc(seen: &Seen, depth: usize) {
    assert_eq!(seen.captured.first(), Some(&seen.caller));
    let want = &seen.reference[..seen.reference.len().min(depth)];
    assert_eq!(
        &seen.captured[..],
        want,
        "framehop (left) against libgcc (right)"
    );
}

#[test]
fn frames_match_libgcc_through_a_call_chain() {
    for (n, depth) in [(0, 32), (5, 32), (40, 32), (5, 3), (5, 1), (70, 256)] {
        let seen = chain(n, depth);
        assert_matches_libgcc(&seen, depth);
        assert!(
            seen.captured.len() > n.min(depth - 1),
            "{n} {depth}: {seen:x?}"
        );
    }
}

/// What one remembering capture from [`remembering_hook`] saw: the frames, whether the walk
/// ran (else a remembered one proved them), and libgcc's frames.
#[derive(Debug)]
struct Remembered {
    frames: Vec<u64>,
    walked: bool,
    reference: Vec<u64>,
}

/// Plays an intercepted call that captures as the hooks do: remembering walks, interning into a
/// table of its own.
#[inline(never)]
fn remembering_hook(table: &'static super::super::intern::StackTable) -> Remembered {
    let (caller, reference) = from_own_caller(remembering_hook as *const () as u64);
    let mut walked = false;
    let id = capture_id(32, caller, StopAt::NEVER, true, |f| {
        walked = true;
        table.intern(f)
    });
    let frames = table.frames(id).expect("an interned stack").to_vec();
    black_box(Remembered {
        frames,
        walked,
        reference,
    })
}

/// `n` frames of its own, then [`remembering_hook`].
#[inline(never)]
fn remembering_chain(n: usize, table: &'static super::super::intern::StackTable) -> Remembered {
    if n == 0 {
        return remembering_hook(table);
    }
    black_box(remembering_chain(n - 1, table))
}

#[test]
fn a_remembered_walk_gives_the_stack_a_walk_would() {
    let table = Box::leak(Box::new(super::super::intern::StackTable::new()));
    // The same call chain from the same place, five times: the first captures walk, the rest
    // are proven from the remembered walk; the frames are libgcc's every time. (A walk is
    // remembered from the second time at worst: one that needed framehop, which may use the
    // frame pointer, depends on more words, some of which change from call to call.)
    for n in [3, 5] {
        let runs: Vec<Remembered> = (0..5).map(|_| remembering_chain(n, table)).collect();
        for r in &runs {
            assert_eq!(r.frames, r.reference[..r.reference.len().min(32)]);
        }
        let walked: Vec<bool> = runs.iter().map(|r| r.walked).collect();
        assert!(walked[0], "{n}: {walked:?}");
        assert_eq!(walked[2..], [false, false, false], "{n}: {walked:?}");
    }
}

#[test]
fn frames_match_libgcc_on_other_threads_at_once() {
    let threads: Vec<_> = (0..4)
        .map(|i| {
            std::thread::spawn(move || {
                for round in 0..200 {
                    let seen = chain((i + round) % 9, 32);
                    assert_matches_libgcc(&seen, 32);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn a_forked_child_captures_with_what_it_inherited() {
    // The parent's module list and this thread's caches are in place before the fork.
    assert_matches_libgcc(&chain(3, 32), 32);
    // SAFETY: the child only captures (glibc's malloc and loader locks are fork-safe) and leaves
    // through _exit, never returning into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let ok = std::panic::catch_unwind(|| {
            for n in [3, 7] {
                assert_matches_libgcc(&chain(n, 32), 32);
            }
        })
        .is_ok();
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{status}"
    );
}

#[test]
fn an_unknown_caller_gives_the_caller_alone() {
    assert_eq!(&capture(32, 0x1000).unwrap()[..], &[0x1000]);
    assert_eq!(capture(0, 0x1000), None);
}

#[test]
fn the_libgcc_fallback_finds_the_same_frames() {
    #[inline(never)]
    fn fallback_hook() -> (Box<[u64]>, Vec<u64>) {
        let (caller, reference) = from_own_caller(fallback_hook as *const () as u64);
        black_box((libgcc(32, caller), reference))
    }
    let (captured, reference) = fallback_hook();
    assert_eq!(&captured[..], &reference[..reference.len().min(32)]);
    assert_eq!(&libgcc(8, 0x1000)[..], &[0x1000]);
}

/// Walks from here with stack bounds made from this frame's stack pointer and the thread's
/// stack; the caller is this function's return address. Returns the walk, its frames and
/// libgcc's.
#[inline(never)]
fn walk_hook(bounds: fn(u64, (u64, u64)) -> (u64, u64)) -> (Walk, Vec<u64>, Vec<u64>) {
    let (caller, reference) = from_own_caller(walk_hook as *const () as u64);
    let start = Registers::here();
    let stack = thread::with(|t| t.stack).unwrap();
    let mut t = ThreadUnwind {
        stack: bounds(start.sp, stack),
        cache: framehop::x86_64::CacheX86_64::new(),
        rules: rules::RuleCache::new(),
        memos: memo::Memos::new(),
        captures: 0,
    };
    // Twice: the first walk finds every rule through framehop, the second applies cached ones.
    let [(w, frames), (w2, frames2)] = [(); 2].map(|_| {
        let mut out = [MaybeUninit::uninit(); 64];
        let w = walk(
            &mut t,
            start,
            caller,
            StopAt::NEVER,
            &mut out,
            &mut memo::Forget,
        );
        let n = match w {
            Walk::Reached(n) => n,
            _ => 0,
        };
        // SAFETY: `walk` initialised the first `n`.
        let frames = unsafe { std::slice::from_raw_parts(out.as_ptr() as *const u64, n) };
        (w, frames.to_vec())
    });
    assert_eq!(
        frames, frames2,
        "cached rules (right) against framehop's (left)"
    );
    // Every frame of this Rust and libc code has a rule of the simple shape.
    for &f in &frames[..frames.len().saturating_sub(1)] {
        let rule = t.rules.get(f - 1).map(rules::Packed::rule);
        assert!(matches!(rule, Some(Rule::Step { .. })), "{f:x}: {rule:?}");
    }
    assert_eq!(
        std::mem::discriminant(&w),
        std::mem::discriminant(&w2),
        "{w:?} {w2:?}"
    );
    black_box((w, frames, reference))
}

#[test]
fn framehop_alone_reaches_the_caller() {
    let (w, frames, reference) = walk_hook(|_, stack| stack);
    assert!(matches!(w, Walk::Reached(_)));
    assert_eq!(frames, reference[..reference.len().min(64)]);
}

#[test]
fn reads_outside_the_stack_bounds_end_the_walk() {
    let (w, _, _) = walk_hook(|_, _| (0, 0));
    assert!(matches!(w, Walk::NoFirstStep), "no bounds, no first step");
    // Room for a few words only: the walk stops cleanly, short of the caller.
    let (w, _, _) = walk_hook(|sp, _| (sp, sp + 64));
    assert!(matches!(w, Walk::NotReached | Walk::NoFirstStep));
    // Bounds that end at this function's locals: the caller (this function) is found, its own
    // return address lies beyond the bounds, and the walk stops there.
    static CUT: AtomicU64 = AtomicU64::new(0);
    let local = 0u64;
    CUT.store(black_box(&local) as *const u64 as u64, Ordering::Relaxed);
    let (w, frames, reference) = walk_hook(|sp, _| (sp, CUT.load(Ordering::Relaxed)));
    assert!(matches!(w, Walk::Reached(_)));
    assert_eq!(frames, reference[..frames.len()]);
    assert!(frames.len() < reference.len(), "{frames:x?}");
}

/// A library built without frame pointers whose inner function also zeroes rbp before calling
/// back, so that only its CFI leads out of it.
const NO_FRAME_POINTER_LIB: &str = r#"
typedef void (*callback)(void *);
__attribute__((noinline)) int vt_inner(callback f, void *arg, int n) {
    volatile int pad[16];
    pad[n & 15] = n;
    __asm__ volatile("xor %%ebp, %%ebp" ::: "rbp");
    f(arg);
    return pad[n & 15];
}
int vt_outer(callback f, void *arg, int n) {
    volatile int pad[8];
    pad[n & 7] = n;
    return vt_inner(f, arg, n + 1) + pad[n & 7];
}
"#;

extern "C" fn from_library(arg: *mut c_void) {
    // SAFETY: `arg` is the `Option<Seen>` that `through_library` passes.
    let out = unsafe { &mut *(arg as *mut Option<Seen>) };
    *out = Some(hook(32));
}

#[test]
fn a_library_loaded_later_without_frame_pointers_unwinds_through_its_cfi() {
    type Outer = unsafe extern "C" fn(extern "C" fn(*mut c_void), *mut c_void, i32) -> i32;
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("nofp.c");
    let lib = dir.path().join("libvt_nofp.so");
    std::fs::write(&src, NO_FRAME_POINTER_LIB).unwrap();
    let status = std::process::Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args([
            "-O2",
            "-fomit-frame-pointer",
            "-fasynchronous-unwind-tables",
        ])
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .expect("a C compiler");
    assert!(status.success());

    chain(1, 8);
    let before = unwind_modules::current().unwrap() as *const ModuleList;
    let path = CString::new(lib.to_str().unwrap()).unwrap();
    // SAFETY: a library of our own making, without constructors.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null());
    // SAFETY: the handle is live; the symbol is `vt_outer`, of type `Outer`.
    let outer: Outer = unsafe {
        let sym = libc::dlsym(handle, c"vt_outer".as_ptr());
        assert!(!sym.is_null());
        std::mem::transmute::<*mut c_void, Outer>(sym)
    };
    let mut seen: Option<Seen> = None;
    // SAFETY: `from_library` writes the `Option<Seen>` it is handed.
    unsafe {
        outer(
            from_library,
            &mut seen as *mut Option<Seen> as *mut c_void,
            3,
        )
    };
    let seen = seen.unwrap();
    let loaded = unwind_modules::current().unwrap() as *const ModuleList;
    assert_ne!(before, loaded, "the dlopen made a new module list");
    assert_matches_libgcc(&seen, 32);

    let base = object_base(outer as *const () as u64).unwrap();
    let in_lib = |&a: &u64| object_base(a) == Some(base);
    let lib_frames = seen.captured.iter().filter(|a| in_lib(a)).count();
    assert_eq!(lib_frames, 2, "vt_outer and vt_inner: {seen:x?}");
    let last_in_lib = seen.captured.iter().rposition(in_lib).unwrap();
    assert!(
        seen.captured.len() > last_in_lib + 3,
        "the walk went on past the library: {seen:x?}"
    );

    // SAFETY: nothing of the library is used after this.
    assert_eq!(unsafe { libc::dlclose(handle) }, 0);
    let seen = chain(2, 32);
    assert_matches_libgcc(&seen, 32);
    let unloaded = unwind_modules::current().unwrap() as *const ModuleList;
    assert_ne!(unloaded, loaded, "the dlclose made a new module list");
}

/// The load address of the object holding `addr`.
fn object_base(addr: u64) -> Option<u64> {
    // SAFETY: Dl_info is plain data that dladdr fills in.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables and writes `info`.
    (unsafe { libc::dladdr(addr as *const c_void, &mut info) } != 0)
        .then_some(info.dli_fbase as u64)
}

/// Times captures of `depth` frames from `depth` frames of recursion.
#[inline(never)]
fn recurse_then_time(n: usize, depth: usize) -> (f64, f64, usize) {
    if n == 0 {
        return time_here(depth);
    }
    black_box(recurse_then_time(n - 1, depth))
}

#[inline(never)]
fn time_here(depth: usize) -> (f64, f64, usize) {
    let (caller, _) = from_own_caller(time_here as *const () as u64);
    let frames = capture(depth, caller).unwrap().len();
    let median_ns = |f: &dyn Fn() -> Box<[u64]>| {
        const ROUNDS: usize = 9;
        const CALLS: u32 = 20_000;
        let mut per = Vec::with_capacity(ROUNDS);
        for _ in 0..ROUNDS {
            let t = Instant::now();
            for _ in 0..CALLS {
                black_box(f());
            }
            per.push(t.elapsed().as_nanos() as f64 / f64::from(CALLS));
        }
        per.sort_by(f64::total_cmp);
        per[ROUNDS / 2]
    };
    let framehop = median_ns(&|| capture(depth, caller).unwrap());
    let libgcc = median_ns(&|| libgcc(depth, caller));
    (framehop, libgcc, frames)
}

#[test]
#[ignore = "timing: run with --release -- --ignored --nocapture"]
fn capture_cost_by_depth() {
    let mut rows = Vec::new();
    for n in [8, 32] {
        let (framehop, libgcc, frames) = recurse_then_time(n, n);
        assert_eq!(frames, n);
        println!(
            "{n:>2} frames: framehop {framehop:7.1} ns/capture, libgcc {libgcc:7.1} ns/capture"
        );
        rows.push((n, framehop, libgcc));
    }
    let (a, b) = (rows[0], rows[1]);
    let per = |x: f64, y: f64| (y - x) / (b.0 - a.0) as f64;
    println!(
        "per extra frame: framehop {:.1} ns, libgcc {:.1} ns",
        per(a.1, b.1),
        per(a.2, b.2)
    );
}
