//! The driver's own resolvers, `cuGetProcAddress` and `cuGetProcAddress_v2`, and the shared
//! logic by which every resolver (these, `cudaGetDriverEntryPoint*`) hands out wrappers.
//!
//! NCCL, the CUDA runtime and CuPy first `dlsym` `cuGetProcAddress_v2`, then ask it for
//! `"cuGetProcAddress"` and take every other driver function from the answer. So the resolver's
//! answer for its own name must be the wrapper too, or everything fetched through it is unseen.

use std::ffi::CStr;

use libc::{c_char, c_void};
use vramtrace_collector::format::Lookup;

use super::{hook_for, versions};
use crate::resolve::{driver, loaded};
use crate::session;

type Ptr = *mut c_void;

/// Identifies the exact exported function `ptr` is, for a look-up of `base`: by comparing it
/// with the driver's exports first, by the documented version rules when the driver hands out
/// internal addresses.
fn identify(base: &str, ptr: usize, version: Option<u32>, flags: u64) -> &str {
    driver::note_function(ptr);
    let variants = versions::variants(base);
    if variants.is_empty() {
        return base;
    }
    for v in &variants {
        let Ok(name) = std::ffi::CString::new(*v) else {
            continue;
        };
        if driver::export(&name) == Some(ptr) {
            return v;
        }
    }
    versions::by_rule(base, version, flags).unwrap_or(base)
}

fn record_lookup(via: &str, symbol: &str, version: Option<u32>, flags: u64, reason: String) {
    if let Some(s) = crate::hooks::session() {
        s.lookups.push(Lookup {
            via: via.to_string(),
            symbol: symbol.to_string(),
            cuda_version: version.unwrap_or(0),
            flags,
            reason,
        });
    }
}

/// The wrapper to hand out for driver entry point `ptr`, found by base name `base`; `None` to
/// hand out `ptr` itself.
pub fn wrap_proc(
    base: &str,
    ptr: usize,
    version: Option<u32>,
    flags: u64,
    via: &str,
) -> Option<usize> {
    if ptr == 0 || loaded::is_ours(ptr) || session::config().disabled {
        return None;
    }
    let exact = identify(base, ptr, version, flags);
    if let Some(entry) = hook_for(exact.as_bytes()) {
        let w = entry.wrap(ptr);
        if w.is_none() {
            record_lookup(
                via,
                exact,
                version,
                flags,
                "every wrapper copy already forwards to another function".into(),
            );
        }
        return w;
    }
    // A function the tracer watches, but in an ABI version it has no wrapper for.
    if versions::variants(base)
        .iter()
        .any(|v| hook_for(v.as_bytes()).is_some())
    {
        record_lookup(
            via,
            exact,
            version,
            flags,
            format!("no wrapper for the {exact} ABI; calls through it are not traced"),
        );
    }
    None
}

/// After a resolver call: replaces the returned pointer in `*func` by its wrapper.
///
/// # Safety
/// `symbol` must be null or NUL-terminated; `func` null or writable.
pub unsafe fn wrap_out(
    result: i32,
    symbol: *const c_char,
    func: *mut Ptr,
    version: Option<u32>,
    flags: u64,
    via: &str,
) {
    if result != 0 || symbol.is_null() || func.is_null() {
        return;
    }
    // SAFETY: the real resolver succeeded, so `func` holds the pointer it wrote.
    let ptr = unsafe { *func } as usize;
    // SAFETY: the caller's NUL-terminated name.
    let Ok(base) = unsafe { CStr::from_ptr(symbol) }.to_str() else {
        return;
    };
    let wrapped = std::panic::catch_unwind(|| wrap_proc(base, ptr, version, flags, via));
    if let Ok(Some(w)) = wrapped {
        // SAFETY: as above; the program asked for a function pointer here.
        unsafe { *func = w as Ptr };
    }
}

resolver_handler!(get_proc_address, "cuGetProcAddress",
    (symbol: *const c_char, func: *mut Ptr, version: i32, flags: u64)
    => wrap(symbol, func, Some(version.max(0) as u32), flags));
resolver_handler!(get_proc_address_v2, "cuGetProcAddress_v2",
    (symbol: *const c_char, func: *mut Ptr, version: i32, flags: u64, status: *mut i32)
    => wrap(symbol, func, Some(version.max(0) as u32), flags));

hooks! {
    fn cuGetProcAddress(symbol: *const c_char, func: *mut Ptr, version: i32, flags: u64) -> i32, missing 3 => get_proc_address;
    fn cuGetProcAddress_v2(symbol: *const c_char, func: *mut Ptr, version: i32, flags: u64,
        status: *mut i32) -> i32, missing 3 => get_proc_address_v2;
}
