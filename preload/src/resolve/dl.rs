//! glibc's own `dlsym` and `dlvsym`, found without calling either (the tracer exports both names,
//! so calling them by name would call the tracer's hooks).

use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_char, c_void};

use super::elf;

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
type DlvsymFn = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char) -> *mut c_void;

/// glibc's `dlsym`; read by the assembly fast path of the `dlsym` hook, hence `#[no_mangle]`-free
/// but `pub`.
pub static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);
/// glibc's `dlvsym`.
pub static REAL_DLVSYM: AtomicUsize = AtomicUsize::new(0);

fn find(name: &str) -> usize {
    // glibc >= 2.34 defines both in libc.so.6; older ones only in libdl.so.2.
    elf::lookup("libc.so", name)
        .or_else(|| elf::lookup("libdl.so", name))
        .unwrap_or(0)
}

/// Finds the real functions; idempotent and cheap after the first call.
pub fn init() {
    if REAL_DLSYM.load(Ordering::Acquire) == 0 {
        REAL_DLSYM.store(find("dlsym"), Ordering::Release);
    }
    if REAL_DLVSYM.load(Ordering::Acquire) == 0 {
        REAL_DLVSYM.store(find("dlvsym"), Ordering::Release);
    }
}

/// glibc's `dlsym`, called from the tracer: `RTLD_NEXT` means "after the tracer".
///
/// # Safety
/// `handle` must be a handle `dlsym` accepts and `name` a NUL-terminated string.
pub unsafe fn real_dlsym(handle: *mut c_void, name: *const c_char) -> Option<usize> {
    init();
    let f = REAL_DLSYM.load(Ordering::Acquire);
    if f == 0 {
        return None;
    }
    // SAFETY: `f` is glibc's dlsym, found in libc's symbol table.
    let f: DlsymFn = unsafe { std::mem::transmute::<usize, DlsymFn>(f) };
    // SAFETY: the caller passes a handle and a NUL-terminated name, as dlsym requires.
    let r = unsafe { f(handle, name) } as usize;
    (r != 0).then_some(r)
}

/// glibc's `dlvsym`.
///
/// # Safety
/// `handle` must be a handle `dlvsym` accepts, `name` and `version` NUL-terminated strings.
pub unsafe fn real_dlvsym(
    handle: *mut c_void,
    name: *const c_char,
    version: *const c_char,
) -> Option<usize> {
    init();
    let f = REAL_DLVSYM.load(Ordering::Acquire);
    if f == 0 {
        return None;
    }
    // SAFETY: `f` is glibc's dlvsym, found in libc's symbol table.
    let f: DlvsymFn = unsafe { std::mem::transmute::<usize, DlvsymFn>(f) };
    // SAFETY: the caller passes valid arguments, as dlvsym requires.
    let r = unsafe { f(handle, name, version) } as usize;
    (r != 0).then_some(r)
}
