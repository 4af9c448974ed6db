//! Where the CUDA driver (`libcuda.so.1`) is, learned from the first real driver function the
//! tracer meets, so it can query the current device and context without going through any hook.

use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::c_void;

use super::dl;

static DRIVER_HANDLE: AtomicUsize = AtomicUsize::new(0);

/// Records the driver library from a real driver function pointer.
pub fn note_function(real: usize) {
    if DRIVER_HANDLE.load(Ordering::Relaxed) != 0 || real == 0 {
        return;
    }
    // SAFETY: dladdr only reads loader data; a zeroed Dl_info is a valid out-parameter.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::dladdr(real as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
        return;
    }
    // SAFETY: dli_fname is a NUL-terminated path owned by the loader.
    let path = unsafe { CStr::from_ptr(info.dli_fname) };
    let bytes = path.to_bytes();
    let file = bytes.rsplit(|&c| c == b'/').next().unwrap_or(bytes);
    if !file.starts_with(b"libcuda.so") {
        return;
    }
    // SAFETY: the object is loaded (it holds `real`); NOLOAD takes a reference we keep for the
    // life of the process so the handle stays valid.
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    if !h.is_null()
        && DRIVER_HANDLE
            .compare_exchange(0, h as usize, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
    {
        // SAFETY: another thread stored its handle first; drop our extra reference.
        unsafe { libc::dlclose(h) };
    }
}

/// An exported driver function by exact name, if the driver is known.
pub fn export(name: &CStr) -> Option<usize> {
    let h = DRIVER_HANDLE.load(Ordering::Acquire);
    if h == 0 {
        return None;
    }
    // SAFETY: a handle we keep open for the life of the process and a NUL-terminated name.
    unsafe { dl::real_dlsym(h as *mut c_void, name.as_ptr()) }
}

/// Whether the driver library has been located.
pub fn known() -> bool {
    DRIVER_HANDLE.load(Ordering::Relaxed) != 0
}
