//! Where a hook's trampoline puts the return address of the original call: the first integer
//! argument register the hook's own arguments leave free (x86-64 System V: rdi, rsi, rdx, rcx,
//! r8, r9), derived from the hook's signature at compile time, never written by hand.
//!
//! The trampoline jumps to a handler that takes the hook's arguments plus the caller's address
//! as one more integer argument; putting the address in any other register would silently
//! overwrite one of the program's arguments. So each argument type says how many integer
//! registers it takes ([`SysvArg`]; a type without an impl does not compile), the register's index
//! is their sum ([`caller_register`], which refuses a signature that leaves none free), and
//! `caller_into_register!` (in `macros.rs`, with the `hooks!` macro that uses it) turns the index
//! into the one `mov` the trampoline needs.

use crate::ffi::{Extent, IpcMemHandle, NcclUniqueId};

/// The integer argument registers, in the order the ABI fills them.
pub const REGISTERS: [&str; 6] = ["rdi", "rsi", "rdx", "rcx", "r8", "r9"];

/// How an argument of this type is passed to an `extern "C"` function on x86-64 System V.
pub trait SysvArg {
    /// Integer argument registers it takes: 1 for an integer or a pointer, one per eightbyte for
    /// a struct of integers up to 16 bytes, 0 for a larger struct (passed in memory).
    const INT_REGISTERS: usize;
}

macro_rules! one_register {
    ($($ty:ty),*) => {
        $(impl SysvArg for $ty {
            const INT_REGISTERS: usize = 1;
        })*
    };
}
one_register!(i8, u8, i16, u16, i32, u32, i64, u64, isize, usize);

impl<T> SysvArg for *mut T {
    const INT_REGISTERS: usize = 1;
}

impl<T> SysvArg for *const T {
    const INT_REGISTERS: usize = 1;
}

/// A struct of integers passed by value: in memory when larger than 16 bytes, else in one
/// register per eightbyte.
pub const fn by_value<T>() -> usize {
    let size = std::mem::size_of::<T>();
    if size > 16 {
        0
    } else {
        size.div_ceil(8)
    }
}

impl SysvArg for Extent {
    const INT_REGISTERS: usize = by_value::<Self>();
}

impl SysvArg for IpcMemHandle {
    const INT_REGISTERS: usize = by_value::<Self>();
}

impl SysvArg for NcclUniqueId {
    const INT_REGISTERS: usize = by_value::<Self>();
}

/// The index in [`REGISTERS`] of the register for the caller's address, after arguments that
/// take `arguments[i]` integer registers each. Evaluated at compile time: a signature that leaves
/// no register free fails to compile.
pub const fn caller_register(arguments: &[usize]) -> usize {
    let mut used = 0;
    let mut i = 0;
    while i < arguments.len() {
        used += arguments[i];
        i += 1;
    }
    assert!(
        used < REGISTERS.len(),
        "the hook's arguments leave no integer register for the caller's address"
    );
    used
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the handler behind a test trampoline received.
    static SEEN: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

    fn seen() -> Vec<u64> {
        std::mem::take(&mut *SEEN.lock().unwrap())
    }

    extern "C" fn handler0(caller: usize) -> u64 {
        SEEN.lock().unwrap().push(caller as u64);
        7
    }
    extern "C" fn handler2(a: u64, b: *const u8, caller: usize) -> u64 {
        SEEN.lock().unwrap().extend([a, b as u64, caller as u64]);
        7
    }
    extern "C" fn handler5(a: u64, b: u32, c: i32, d: usize, e: *mut u8, caller: usize) -> u64 {
        SEEN.lock()
            .unwrap()
            .extend([a, b as u64, c as u64, d as u64, e as u64, caller as u64]);
        7
    }
    /// A struct larger than 16 bytes travels on the stack and takes no register.
    extern "C" fn handler_extent(a: u64, extent: Extent, b: u32, caller: usize) -> u64 {
        SEEN.lock().unwrap().extend([
            a,
            extent.width as u64,
            extent.height as u64,
            extent.depth as u64,
            b as u64,
            caller as u64,
        ]);
        7
    }

    caller_trampoline!(unsafe fn hook0() -> u64 => handler0);
    caller_trampoline!(unsafe fn hook2(a: u64, b: *const u8) -> u64 => handler2);
    caller_trampoline!(
        unsafe fn hook5(a: u64, b: u32, c: i32, d: usize, e: *mut u8) -> u64 => handler5
    );
    caller_trampoline!(unsafe fn hook_extent(a: u64, extent: Extent, b: u32) -> u64 => handler_extent);

    /// Where a call made from `f` returns to: inside `f`'s code, past its first instruction.
    fn returns_into(f: usize, caller: u64) -> bool {
        (f as u64) < caller && caller < f as u64 + 4096
    }

    #[inline(never)]
    extern "C" fn call_hooks() {
        // SAFETY: the trampolines forward to the handlers above, which take these arguments.
        unsafe {
            assert_eq!(hook0(), 7);
            assert_eq!(hook2(11, 22 as *const u8), 7);
            assert_eq!(hook5(1, 2, -3, 4, 5 as *mut u8), 7);
            let extent = Extent {
                width: 100,
                height: 200,
                depth: 300,
            };
            assert_eq!(hook_extent(9, extent, 8), 7);
        }
    }

    /// Every argument arrives unchanged and the extra one is the return address into the
    /// calling function: a trampoline that wrote the address into a register an argument uses
    /// would change that argument, and the handler would read garbage for the address.
    #[test]
    fn the_caller_lands_in_the_first_free_register() {
        let _ = seen();
        call_hooks();
        let got = seen();
        let f = call_hooks as *const () as usize;
        let (callers, args): (Vec<_>, Vec<_>) = [1, 3, 6, 6]
            .iter()
            .scan(0, |at, &n| {
                let one = &got[*at..*at + n];
                *at += n;
                Some((one[n - 1], one[..n - 1].to_vec()))
            })
            .unzip();
        assert_eq!(
            args,
            [
                vec![],
                vec![11, 22],
                vec![1, 2, (-3i32) as u64, 4, 5],
                vec![9, 100, 200, 300, 8]
            ]
        );
        for c in callers {
            assert!(
                returns_into(f, c),
                "{c:#x} is not a return address in {f:#x}"
            );
        }
    }

    #[test]
    fn registers_follow_the_arguments() {
        assert_eq!(caller_register!(), 0);
        assert_eq!(REGISTERS[caller_register!(*mut u64, usize)], "rdx");
        // cudaMalloc3D(cudaPitchedPtr *, cudaExtent): the extent goes on the stack.
        assert_eq!(REGISTERS[caller_register!(*mut u8, Extent)], "rsi");
        // ncclCommInitRank(ncclComm_t *, int, ncclUniqueId, int).
        assert_eq!(
            REGISTERS[caller_register!(*mut u8, i32, NcclUniqueId, i32)],
            "rcx"
        );
        assert_eq!(REGISTERS[caller_register!(u64, u64, u64, u64, u64)], "r9");
        assert_eq!(by_value::<[u64; 2]>(), 2);
        assert_eq!(by_value::<[u8; 17]>(), 0);
    }
}
