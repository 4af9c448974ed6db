//! `libvramtrace.so`: the library injected with `LD_PRELOAD` that sees every GPU memory operation
//! of a process.
//!
//! It hooks the CUDA runtime, the CUDA driver (including virtual memory and every way a library
//! obtains driver function pointers) and NCCL; each hook calls the real function exactly as asked,
//! turns what happened into an event and hands it over a bounded channel to a writer thread that
//! writes the trace. Analysis lives in `vramtrace-collector` and the tools, not here.
//!
//! Layout, one job a folder:
//! - [`hooks`]: one handler per intercepted entry point, by library, and on top of them the
//!   resolvers a program asks for function pointers (`dlsym`, `cuGetProcAddress`, ...), which
//!   hand out the wrappers (`hooks::closure`);
//! - [`resolve`]: finding the real functions, also in local scopes, and the slots that keep
//!   them, below everything that calls one;
//! - [`capture`]: per-thread state, event building, stacks;
//! - [`session`]: the process's session: settings, the ring from hooks to the writer, the
//!   lifecycle (lazy start, fork/exit/exec/signals);
//! - [`writer`]: the writer thread (causal order, modules, stacks, chunks, rotation);
//! - [`files`]: the trace's files (creation, segments), below the session and the writer;
//! - [`monitor`]: the live analysis while the program runs (alerts, metrics), fed by the writer;
//! - [`self_profile`]: the tracer's own stage timings (`VRAMTRACE_SELF_PROFILE=1`);
//! - [`setting`], [`tracer_thread`] and [`warn`]: how the tracer reads one setting, starts its
//!   own threads and warns, for all of the above.

// The documentation is for the people who work on the repository (`cargo doc
// --document-private-items`): a public item's doc may point at the private module doing the work.
#![allow(rustdoc::private_intra_doc_links)]

#[macro_use]
#[path = "hooks/macros.rs"]
mod macros;

pub mod capture;
pub mod ffi;
pub mod files;
pub mod hooks;
pub mod monitor;
pub mod resolve;
pub mod self_profile;
pub mod session;
pub mod setting;
pub mod tracer_thread;
pub mod warn;
pub mod writer;

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
