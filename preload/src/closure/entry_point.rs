//! The runtime's resolvers, `cudaGetDriverEntryPoint` and `cudaGetDriverEntryPointByVersion`:
//! how code built on the runtime takes driver functions straight from it. Each returns the wrapper in place of the driver's pointer, by the rules of
//! [`proc_address::wrap_out`](super::proc_address::wrap_out).

use libc::{c_char, c_void};

use super::proc_address::wrap_out;

type Ptr = *mut c_void;

unsafe fn get_driver_entry_point(
    real: unsafe extern "C" fn(*const c_char, *mut Ptr, u64, *mut i32) -> i32,
    _caller: usize,
    symbol: *const c_char,
    func: *mut Ptr,
    flags: u64,
    status: *mut i32,
) -> i32 {
    // SAFETY: the program's own arguments.
    let r = unsafe { real(symbol, func, flags, status) };
    // SAFETY: the real call succeeded and wrote `func`.
    unsafe { wrap_out(r, symbol, func, None, flags, "cudaGetDriverEntryPoint") };
    r
}

unsafe fn get_driver_entry_point_by_version(
    real: unsafe extern "C" fn(*const c_char, *mut Ptr, u32, u64, *mut i32) -> i32,
    _caller: usize,
    symbol: *const c_char,
    func: *mut Ptr,
    version: u32,
    flags: u64,
    status: *mut i32,
) -> i32 {
    // SAFETY: the program's own arguments.
    let r = unsafe { real(symbol, func, version, flags, status) };
    // SAFETY: as above.
    unsafe {
        wrap_out(
            r,
            symbol,
            func,
            Some(version),
            flags,
            "cudaGetDriverEntryPointByVersion",
        )
    };
    r
}

hooks! {
    fn cudaGetDriverEntryPoint(symbol: *const c_char, func: *mut Ptr, flags: u64,
        status: *mut i32) -> i32, missing 3 => get_driver_entry_point;
    fn cudaGetDriverEntryPointByVersion(symbol: *const c_char, func: *mut Ptr,
        version: u32, flags: u64, status: *mut i32) -> i32, missing 3 => get_driver_entry_point_by_version;
}
