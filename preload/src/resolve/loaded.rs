//! The loaded objects of the process: where the tracer itself lives, which object holds an
//! address, and finding a function in objects that sit in a local scope.
//!
//! `dlsym(RTLD_NEXT, …)` from the preloaded tracer only sees the global scope. Libraries a Python
//! extension pulls in with `RTLD_LOCAL` (libnccl under PyTorch) are invisible to it, yet calls from
//! inside that scope still bind to the tracer's exported hooks. Walking every loaded object and
//! asking each one through its own handle finds the real function there.

use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_int, c_void, dl_phdr_info, size_t};

use super::dl;

/// Start and end of the tracer's own loaded image, found once.
static SELF_START: AtomicUsize = AtomicUsize::new(0);
static SELF_END: AtomicUsize = AtomicUsize::new(0);

struct Collect {
    names: Vec<CString>,
    want_addr: usize,
    range: (usize, usize),
}

fn load_segments(info: &dl_phdr_info) -> impl Iterator<Item = (usize, usize)> + '_ {
    // SAFETY: dlpi_phdr points at dlpi_phnum program headers while the callback runs.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    phdrs
        .iter()
        .filter(|p| p.p_type == libc::PT_LOAD)
        .map(move |p| {
            let start = info.dlpi_addr as usize + p.p_vaddr as usize;
            (start, start + p.p_memsz as usize)
        })
}

unsafe extern "C" fn visit(info: *mut dl_phdr_info, _size: size_t, data: *mut c_void) -> c_int {
    // SAFETY: dl_iterate_phdr passes a valid info and our own Collect.
    let (info, c) = unsafe { (&*info, &mut *(data as *mut Collect)) };
    if c.want_addr != 0 {
        let (mut lo, mut hi, mut hit) = (usize::MAX, 0, false);
        for (s, e) in load_segments(info) {
            lo = lo.min(s);
            hi = hi.max(e);
            hit |= c.want_addr >= s && c.want_addr < e;
        }
        if hit {
            c.range = (lo, hi);
            return 1;
        }
        return 0;
    }
    if !info.dlpi_name.is_null() {
        // SAFETY: dlpi_name is a NUL-terminated string owned by the loader.
        let name = unsafe { CStr::from_ptr(info.dlpi_name) };
        if !name.to_bytes().is_empty() {
            c.names.push(name.to_owned());
        }
    }
    0
}

/// The address range of the loaded object containing `addr`, if any.
pub fn object_range(addr: usize) -> Option<(usize, usize)> {
    let mut c = Collect {
        names: Vec::new(),
        want_addr: addr,
        range: (0, 0),
    };
    // SAFETY: `visit` only reads loader data during the callback.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut c as *mut Collect as *mut c_void) };
    (c.range.1 > 0).then_some(c.range)
}

/// Whether `addr` lies inside the tracer's own image (its hooks and wrappers).
pub fn is_ours(addr: usize) -> bool {
    let mut start = SELF_START.load(Ordering::Relaxed);
    if start == 0 {
        let here = is_ours as *const () as usize;
        if let Some((s, e)) = object_range(here) {
            SELF_END.store(e, Ordering::Relaxed);
            SELF_START.store(s, Ordering::Relaxed);
            start = s;
        } else {
            return false;
        }
    }
    addr >= start && addr < SELF_END.load(Ordering::Relaxed)
}

/// Paths of the loaded shared objects (not the executable), in load order.
fn loaded_object_names() -> Vec<CString> {
    let mut c = Collect {
        names: Vec::new(),
        want_addr: 0,
        range: (0, 0),
    };
    // SAFETY: `visit` only reads loader data during the callback; dlopen is called afterwards,
    // outside dl_iterate_phdr's lock.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut c as *mut Collect as *mut c_void) };
    c.names
}

/// Finds the definition the program would have reached without the tracer: the next one after
/// the tracer in the global scope, else one in any loaded object (local scopes included).
pub fn find_real(name: &CStr) -> Option<usize> {
    // SAFETY: RTLD_NEXT and a NUL-terminated name.
    unsafe { dl::real_dlsym(libc::RTLD_NEXT, name.as_ptr()) }
        .filter(|&p| !is_ours(p))
        .or_else(|| find_in_loaded(name, None))
}

/// Finds `symbol` in an already loaded object other than the tracer, searching each object
/// through its own handle so that objects in local scopes are found too. With `file_prefix`, only
/// objects whose file name starts with it are asked.
pub fn find_in_loaded(symbol: &CStr, file_prefix: Option<&str>) -> Option<usize> {
    for name in loaded_object_names() {
        let bytes = name.to_bytes();
        let file = bytes.rsplit(|&c| c == b'/').next().unwrap_or(bytes);
        if file.starts_with(b"libvramtrace") {
            continue;
        }
        if let Some(p) = file_prefix {
            if !file.starts_with(p.as_bytes()) {
                continue;
            }
        }
        // SAFETY: RTLD_NOLOAD only returns a handle to an object that is already loaded; the
        // reference it takes is dropped right after the lookup.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
        if handle.is_null() {
            continue;
        }
        // SAFETY: a live handle and a NUL-terminated name.
        let found = unsafe { dl::real_dlsym(handle, symbol.as_ptr()) };
        // SAFETY: balances the dlopen above.
        unsafe { libc::dlclose(handle) };
        if let Some(f) = found {
            if !is_ours(f) {
                return Some(f);
            }
        }
    }
    None
}
