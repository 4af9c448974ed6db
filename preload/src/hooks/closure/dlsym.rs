//! `dlsym` and `dlvsym`: the first door every library that loads CUDA by hand goes through.
//!
//! glibc resolves `RTLD_NEXT` (and the scope of `RTLD_DEFAULT`) from the return address of the
//! `dlsym` call. A hook that forwards with a call of its own would move every other library's
//! `RTLD_NEXT` look-up to "after the tracer". So the exported `dlsym` is a few instructions of
//! assembly: anything that is not a look-up of a function the tracer wraps *jumps* to glibc's
//! `dlsym` with the original return address untouched, and `RTLD_NEXT` look-ups always do.

use std::ffi::CStr;

use libc::{c_char, c_void};

use super::hook_for;
use crate::resolve::dl::{self, REAL_DLSYM, REAL_DLVSYM};
use crate::resolve::{elf, loaded};

/// `dladdr1` request for the object's `link_map` (glibc's `<dlfcn.h>`).
const RTLD_DL_LINKMAP: libc::c_int = 2;

/// Whether `name` is a function the tracer hands out wrappers for.
extern "C" fn interesting(name: *const c_char) -> bool {
    if name.is_null() {
        return false;
    }
    // SAFETY: dlsym's contract: a NUL-terminated name.
    let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
    hook_for(bytes).is_some()
}

extern "C" fn init_real() {
    dl::init();
}

/// Looks `name` up in the scope of the object that holds `caller` (what glibc does for
/// `RTLD_DEFAULT` from inside a library loaded with `RTLD_LOCAL`).
fn caller_scope_lookup(caller: usize, name: *const c_char) -> Option<usize> {
    // SAFETY: a zeroed Dl_info and a null link_map pointer are valid out-parameters.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let mut map: *mut c_void = std::ptr::null_mut();
    // SAFETY: dladdr1 with RTLD_DL_LINKMAP writes the link_map of the object holding `caller`.
    let found = unsafe {
        libc::dladdr1(
            caller as *const c_void,
            &mut info,
            &mut map as *mut *mut c_void,
            RTLD_DL_LINKMAP,
        )
    };
    if found == 0 || map.is_null() {
        return None;
    }
    // SAFETY: a glibc link_map is a valid dlsym handle (it searches the object and its
    // dependencies); `name` is the caller's NUL-terminated name.
    unsafe { dl::real_dlsym(map, name) }
}

/// `dlsym(RTLD_DEFAULT, name)` as the program would see it without the tracer. glibc would find
/// the tracer's own exported hook (the preloaded object comes right after the executable); that
/// would tell a program probing for, say, NCCL that it is loaded when it is not. So: the
/// executable's own definition, then the definitions after the tracer in the global scope, then
/// the caller's local scope.
fn default_scope_lookup(caller: usize, name: *const c_char) -> Option<usize> {
    // SAFETY: dlsym's contract: a NUL-terminated name.
    let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
    elf::lookup_executable(bytes)
        // SAFETY: RTLD_NEXT from the tracer: the global scope after it.
        .or_else(|| unsafe { dl::real_dlsym(libc::RTLD_NEXT, name) })
        .filter(|&f| !loaded::is_ours(f))
        .or_else(|| caller_scope_lookup(caller, name))
}

/// Replaces a found driver/runtime/NCCL function by its wrapper.
fn wrap_found(name: *const c_char, found: usize) -> usize {
    if loaded::is_ours(found) {
        return found;
    }
    // SAFETY: dlsym's contract: a NUL-terminated name.
    let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
    if crate::session::config().disabled {
        return found;
    }
    hook_for(bytes).and_then(|e| e.wrap(found)).unwrap_or(found)
}

/// The slow path of `dlsym`: a look-up of a wrapped function (or glibc not found yet).
unsafe extern "C" fn dlsym_slow(
    handle: *mut c_void,
    name: *const c_char,
    caller: usize,
) -> *mut c_void {
    let r = std::panic::catch_unwind(|| {
        let found = if handle.is_null() {
            default_scope_lookup(caller, name)
        } else {
            // SAFETY: the caller's own dlsym arguments.
            unsafe { dl::real_dlsym(handle, name) }
        };
        found.map_or(0, |f| wrap_found(name, f))
    });
    r.unwrap_or(0) as *mut c_void
}

unsafe extern "C" fn dlvsym_slow(
    handle: *mut c_void,
    name: *const c_char,
    version: *const c_char,
    _caller: usize,
) -> *mut c_void {
    let r = std::panic::catch_unwind(|| {
        // SAFETY: the caller's own dlvsym arguments.
        unsafe { dl::real_dlvsym(handle, name, version) }.map_or(0, |f| wrap_found(name, f))
    });
    r.unwrap_or(0) as *mut c_void
}

/// The exported `dlsym`.
///
/// # Safety
/// glibc's `dlsym` contract.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        // RTLD_NEXT ((void *)-1): always glibc, with the caller's own return address.
        "cmp rdi, -1",
        "je 3f",
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "mov rdi, rsi",
        "call {interesting}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test al, al",
        "jnz 4f",
        "3:",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 5f",
        "jmp rax",
        // glibc's dlsym not found yet (a constructor that ran before ours): find it, retry.
        "5:",
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {init}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 4f",
        "jmp rax",
        "4:",
        caller_into_register!(),
        "jmp {slow}",
        caller = const caller_register!(*mut c_void, *const c_char),
        interesting = sym interesting,
        real = sym REAL_DLSYM,
        init = sym init_real,
        slow = sym dlsym_slow,
    )
}

/// The exported `dlvsym`.
///
/// # Safety
/// glibc's `dlvsym` contract.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlvsym(
    handle: *mut c_void,
    name: *const c_char,
    version: *const c_char,
) -> *mut c_void {
    core::arch::naked_asm!(
        "cmp rdi, -1",
        "je 3f",
        "push rdi",
        "push rsi",
        "push rdx",
        "mov rdi, rsi",
        "call {interesting}",
        "pop rdx",
        "pop rsi",
        "pop rdi",
        "test al, al",
        "jnz 4f",
        "3:",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 5f",
        "jmp rax",
        "5:",
        "push rdi",
        "push rsi",
        "push rdx",
        "call {init}",
        "pop rdx",
        "pop rsi",
        "pop rdi",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 4f",
        "jmp rax",
        "4:",
        caller_into_register!(),
        "jmp {slow}",
        caller = const caller_register!(*mut c_void, *const c_char, *const c_char),
        interesting = sym interesting,
        real = sym REAL_DLVSYM,
        init = sym init_real,
        slow = sym dlvsym_slow,
    )
}
