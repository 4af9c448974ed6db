//! The closure rule: every way a process can obtain a driver (or runtime, or NCCL) function
//! pointer hands out the tracer's wrapper — `dlsym`, `dlvsym`, `cuGetProcAddress`,
//! `cuGetProcAddress_v2` (including when asked for itself) and `cudaGetDriverEntryPoint*` —
//! matched to the exact ABI version handed out.
//!
//! The resolvers sit above the other hooks: they look hooks up by exact name ([`hook_for`]);
//! no other hook depends on them.

/// A resolver's handler: the real resolver, once, with the program's arguments; then the pointer
/// it wrote to `*func` replaced by the tracer's wrapper (`proc_address::wrap_out`, which leaves a
/// failed call, a null `func` and an unknown name alone). The caller's address is not needed.
macro_rules! resolver_handler {
    (
        $fn:ident, $via:literal, ($($arg:ident : $ty:ty),*)
            => wrap($symbol:ident, $func:ident, $version:expr, $flags:ident)
    ) => {
        unsafe fn $fn(
            real: unsafe extern "C" fn($($ty),*) -> i32,
            _caller: usize,
            $($arg: $ty),*
        ) -> i32 {
            // SAFETY: the program's own arguments.
            let r = unsafe { real($($arg),*) };
            // SAFETY: `symbol` and `func` are the program's own, as the resolver's contract wants
            // them (null, or a NUL-terminated name and a writable slot).
            unsafe {
                $crate::hooks::closure::proc_address::wrap_out(
                    r, $symbol, $func, $version, $flags, $via,
                )
            };
            r
        }
    };
}

pub mod dlsym;
pub mod entry_point;
pub mod proc_address;
pub mod versions;

use crate::hooks::{self, HookEntry};

/// The hook for an exact exported name: the library's hooks and the resolvers' own.
pub fn hook_for(name: &[u8]) -> Option<&'static HookEntry> {
    if !(name.starts_with(b"cu") || name.starts_with(b"nccl")) {
        return None;
    }
    hooks::all()
        .chain(proc_address::ENTRIES.iter().copied())
        .chain(entry_point::ENTRIES.iter().copied())
        .find(|e| e.name.as_bytes() == name)
}
