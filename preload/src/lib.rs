//! `libvramtrace.so`: the library injected with `LD_PRELOAD` that sees every GPU memory operation
//! of a process.
//!
//! It hooks the CUDA runtime, the CUDA driver (including virtual memory and every way a library
//! obtains driver function pointers) and NCCL; each hook calls the real function exactly as asked,
//! turns what happened into an event and hands it over a bounded channel to a writer thread that
//! writes the trace. Analysis lives in `vramtrace-collector` and the tools, not here.
//!
//! Layout:
//! - [`hooks`]: one handler per intercepted entry point, by library;
//! - [`closure`]: the resolvers (`dlsym`, `cuGetProcAddress`, ...) that hand out wrappers;
//! - [`resolve`]: finding real functions, also in local scopes;
//! - [`capture`]: per-thread state, event building, stacks;
//! - [`session`]: settings, the writer thread, the trace file, fork/exit/signals;
//! - [`profile`]: the tracer's own stage timings (`VRAMTRACE_SELF_PROFILE=1`);
//! - [`tracer_thread`] and [`warn`]: how the tracer starts its own threads and warns, for all of
//!   the above.

#[macro_use]
#[path = "hooks/macros.rs"]
mod macros;

pub mod capture;
pub mod closure;
pub mod ffi;
pub mod hooks;
pub mod profile;
pub mod resolve;
pub mod session;
pub mod setting;
pub mod tracer_thread;
pub mod warn;

/// Library constructor: finds glibc's `dlsym`, reads the settings, installs the fork handlers,
/// and finds the real functions of the process hooks. Starting the trace waits for the first
/// event.
extern "C" fn on_load() {
    let _ = std::panic::catch_unwind(|| {
        session::lifecycle::install();
        // The process hooks (`_exit`, `exec*`) work whether tracing is on or off: their real
        // functions are found now, while the process has one thread, not in a signal handler.
        hooks::process::resolve();
    });
}

/// Library destructor (at exit): writes what is buffered and the end record.
extern "C" fn on_unload() {
    let _ = std::panic::catch_unwind(session::lifecycle::finish_at_exit);
}

#[used]
#[unsafe(link_section = ".init_array")]
static ON_LOAD: extern "C" fn() = on_load;

#[used]
#[unsafe(link_section = ".fini_array")]
static ON_UNLOAD: extern "C" fn() = on_unload;
