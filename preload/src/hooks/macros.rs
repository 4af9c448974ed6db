//! The `hooks!` macro: exported symbol, resolver copies and registry entry for each hook.

/// Defines hooks. For each: `fn name(args) -> ret, missing CODE => handler;`.
///
/// The exported symbol and the resolver copies are trampolines ([`caller_trampoline!`]): they put
/// the return address of the original call in the first integer argument register the arguments
/// leave free — derived from the argument types (`hooks::caller`), never written by hand — and
/// jump to the handler's wrapper, so the original stack is untouched and the handler returns
/// straight to the program. `missing` is what the call returns when the real function cannot be
/// found.
macro_rules! hooks {
    ($(
        $(#[$doc:meta])*
        fn $name:ident($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty,
            missing $missing:expr => $handler:path;
    )*) => {
        $(
            $(#[$doc])*
            #[allow(non_snake_case)]
            pub mod $name {
                #[allow(unused_imports)]
                use super::*;

                /// The real function's type.
                pub type Real = unsafe extern "C" fn($($ty),*) -> $ret;

                pub static SLOTS: $crate::resolve::Slots =
                    $crate::resolve::Slots::new();

                const CNAME: &core::ffi::CStr =
                    match core::ffi::CStr::from_bytes_with_nul(
                        concat!(stringify!($name), "\0").as_bytes(),
                    ) {
                        Ok(c) => c,
                        Err(_) => panic!("hook name"),
                    };

                /// Copy `K` of the hook (`LINK` is the exported symbol).
                ///
                /// # Safety
                /// Called only from the trampolines, with the program's arguments.
                pub unsafe extern "C" fn imp<const K: usize>($($arg: $ty,)* caller: usize) -> $ret {
                    match SLOTS.real::<K>(CNAME) {
                        Some(real) => {
                            // SAFETY: a slot only ever holds a function of this hook's exact
                            // signature (resolved by its exact exported name or ABI version).
                            let real: Real = unsafe { core::mem::transmute::<usize, Real>(real) };
                            // SAFETY: the program's own arguments, passed on unchanged.
                            unsafe { $handler(real, caller, $($arg),*) }
                        }
                        None => $crate::hooks::missing_real(stringify!($name), $missing),
                    }
                }

                caller_trampoline!(
                    /// The exported hook.
                    ///
                    /// # Safety
                    /// Has the real function's contract.
                    #[unsafe(no_mangle)]
                    pub unsafe fn $name($($arg: $ty),*) -> $ret
                        => imp::<{ $crate::resolve::LINK }>
                );

                hooks!(@copy copy0, 0, ($($arg: $ty),*) -> $ret);
                hooks!(@copy copy1, 1, ($($arg: $ty),*) -> $ret);
                hooks!(@copy copy2, 2, ($($arg: $ty),*) -> $ret);
                hooks!(@copy copy3, 3, ($($arg: $ty),*) -> $ret);

                pub static ENTRY: $crate::hooks::HookEntry =
                    $crate::hooks::HookEntry::new(
                        stringify!($name),
                        &SLOTS,
                        $name as *const (),
                        [
                            copy0 as *const (),
                            copy1 as *const (),
                            copy2 as *const (),
                            copy3 as *const (),
                        ],
                    );
            }
        )*

        /// This file's hooks, for the resolvers.
        pub static ENTRIES: &[&$crate::hooks::HookEntry] = &[$(&$name::ENTRY),*];
    };

    (@copy $copy:ident, $k:literal, ($($arg:ident : $ty:ty),*) -> $ret:ty) => {
        caller_trampoline!(
            /// A resolver copy of the hook.
            ///
            /// # Safety
            /// Has the real function's contract.
            unsafe fn $copy($($arg: $ty),*) -> $ret => imp::<$k>
        );
    };
}

/// The register index for the caller's address of a function taking `$ty...` (a constant).
macro_rules! caller_register {
    ($($ty:ty),* $(,)?) => {
        $crate::hooks::caller::caller_register(
            &[$(<$ty as $crate::hooks::caller::SysvArg>::INT_REGISTERS),*]
        )
    };
}

/// Assembly (one template string) that copies the return address at `[rsp]` into the register
/// whose index is the asm operand `caller` (a `const` operand, see [`caller_register!`]). The
/// assembler keeps only the one `mov` that applies.
macro_rules! caller_into_register {
    () => {
        concat!(
            ".if {caller} == 0\n mov rdi, [rsp]\n",
            ".elseif {caller} == 1\n mov rsi, [rsp]\n",
            ".elseif {caller} == 2\n mov rdx, [rsp]\n",
            ".elseif {caller} == 3\n mov rcx, [rsp]\n",
            ".elseif {caller} == 4\n mov r8, [rsp]\n",
            ".elseif {caller} == 5\n mov r9, [rsp]\n",
            ".else\n .error \"no argument register for the caller's address\"\n",
            ".endif",
        )
    };
}

/// A naked function of the given signature that puts the return address of its call in the
/// next free argument register and jumps to `target`, which takes the same arguments plus that
/// address (`usize`) and returns to the original caller itself. The stack is left as it was.
macro_rules! caller_trampoline {
    (
        $(#[$attr:meta])*
        $vis:vis unsafe fn $name:ident($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty
            => $($target:tt)+
    ) => {
        $(#[$attr])*
        #[unsafe(naked)]
        $vis unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            core::arch::naked_asm!(
                caller_into_register!(),
                "jmp {target}",
                caller = const caller_register!($($ty),*),
                target = sym $($target)+,
            )
        }
    };
}

/// A handler: calls the real function once with the program's arguments, then reports `op`
/// (which may read the arguments and the result `r`).
macro_rules! handler {
    ($fn:ident, $api:ident, $order:ident, ($($arg:ident : $ty:ty),*), |$r:ident| $op:expr) => {
        unsafe fn $fn(
            real: unsafe extern "C" fn($($ty),*) -> i32,
            caller: usize,
            $($arg: $ty),*
        ) -> i32 {
            $crate::hooks::Call::run(
                vramtrace_collector::event::Api::$api,
                caller,
                $crate::hooks::Order::$order,
                // SAFETY: the program's own arguments.
                || unsafe { real($($arg),*) },
                |$r| $op,
            )
        }
    };
}

/// A handler for an allocation that returns its pointer through the first argument and takes the
/// size as the second: `(ptr_out, size, extra...)`.
macro_rules! alloc_handler {
    ($fn:ident, $api:ident, $kind:ident, $pty:ty, ($($extra:ident : $ety:ty),*),
        stream = $stream:expr, flags = $flags:expr) => {
        unsafe fn $fn(
            real: unsafe extern "C" fn(*mut $pty, usize $(, $ety)*) -> i32,
            caller: usize,
            out_ptr: *mut $pty,
            size: usize,
            $($extra: $ety),*
        ) -> i32 {
            $crate::hooks::Call::run(
                vramtrace_collector::event::Api::$api,
                caller,
                $crate::hooks::Order::Create,
                // SAFETY: the program's own arguments.
                || unsafe { real(out_ptr, size $(, $extra)*) },
                |r| vramtrace_collector::event::Op::Alloc {
                    kind: vramtrace_collector::event::MemKind::$kind,
                    // SAFETY: written by the real call when it succeeded.
                    ptr: unsafe { $crate::hooks::out(out_ptr, r) },
                    size: size as u64,
                    stream: $stream,
                    pool: 0,
                    flags: $flags,
                    pitch: 0,
                },
            )
        }
    };
}

/// A handler for a call that releases what its single argument names.
macro_rules! release_handler {
    ($fn:ident, $api:ident, $ty:ty, |$arg:ident| $op:expr) => {
        unsafe fn $fn(real: unsafe extern "C" fn($ty) -> i32, caller: usize, $arg: $ty) -> i32 {
            $crate::hooks::Call::run(
                vramtrace_collector::event::Api::$api,
                caller,
                $crate::hooks::Order::Destroy,
                // SAFETY: the program's own argument.
                || unsafe { real($arg) },
                |_| $op,
            )
        }
    };
}

#[cfg(not(target_arch = "x86_64"))]
compile_error!("libvramtrace's hook trampolines are written for x86-64 only so far");
