//! The runtime's resolvers, `cudaGetDriverEntryPoint` and `cudaGetDriverEntryPointByVersion`:
//! how code built on the runtime takes driver functions straight from it. Each returns the
//! wrapper in place of the driver's pointer, by the rules of
//! [`proc_address::wrap_out`](super::proc_address::wrap_out).

use libc::{c_char, c_void};

type Ptr = *mut c_void;

resolver_handler!(get_driver_entry_point, "cudaGetDriverEntryPoint",
    (symbol: *const c_char, func: *mut Ptr, flags: u64, status: *mut i32)
    => wrap(symbol, func, None, flags));
resolver_handler!(get_driver_entry_point_by_version, "cudaGetDriverEntryPointByVersion",
    (symbol: *const c_char, func: *mut Ptr, version: u32, flags: u64, status: *mut i32)
    => wrap(symbol, func, Some(version), flags));

hooks! {
    fn cudaGetDriverEntryPoint(symbol: *const c_char, func: *mut Ptr, flags: u64,
        status: *mut i32) -> i32, missing 3 => get_driver_entry_point;
    fn cudaGetDriverEntryPointByVersion(symbol: *const c_char, func: *mut Ptr,
        version: u32, flags: u64, status: *mut i32) -> i32, missing 3 => get_driver_entry_point_by_version;
}
