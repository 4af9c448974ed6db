//! Paths to the CPU stand-ins of the CUDA driver, CUDA runtime, NCCL, cuBLAS and a framework
//! library, and to the C workload programs that exercise them, all built by this crate's
//! `build.rs` with the system C compiler.
//!
//! There is no GPU in the test environment.  The stand-ins (`tests/standins/`, described in
//! `tests/standins/README.md`) reproduce how the real libraries reach the driver — libcudart and
//! libnccl through `dlopen("libcuda.so.1")` + `cuGetProcAddress`, cuBLAS through `dlsym`, a
//! framework through `cudaGetDriverEntryPointByVersion` — so that a tracer which sees every
//! stand-in call also sees real programs.  Each workload (`tests/workloads/*.c`) prints a
//! deterministic transcript and documents its planted ground truth (leaks, failing calls).
//!
//! ```no_run
//! let out = vramtrace_tests::standin_command("wl_runtime").output().unwrap();
//! assert!(out.status.success());
//! ```

pub mod source;
pub mod trace;
pub mod traced;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;

/// Directory holding `libcuda.so.1`, `libcudart.so.13`, `libnccl.so.2`, `libcublas.so.13` and
/// `libtorch_standin.so` (each under its soname, plus `libX.so` symlinks).
pub fn standin_lib_dir() -> PathBuf {
    PathBuf::from(env!("VRAMTRACE_STANDIN_LIB_DIR"))
}

/// Directory holding the workload executables.
pub fn workload_dir() -> PathBuf {
    PathBuf::from(env!("VRAMTRACE_WORKLOAD_DIR"))
}

/// Directory holding `cuda_standin.h`.
pub fn standin_include_dir() -> PathBuf {
    PathBuf::from(env!("VRAMTRACE_STANDIN_INCLUDE_DIR"))
}

/// Path of the workload executable `name` (for example `"wl_runtime"`).
pub fn workload(name: &str) -> PathBuf {
    workload_dir().join(name)
}

/// `LD_LIBRARY_PATH` with the stand-in directory prepended to the current value.
pub fn standin_ld_library_path() -> OsString {
    let mut v = OsString::from(standin_lib_dir());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
        v.push(":");
        v.push(old);
    }
    v
}

/// A command that runs workload `name` with `LD_LIBRARY_PATH` pointing at the stand-ins first,
/// so that `dlopen("libcuda.so.1")` and friends find them.
pub fn standin_command(name: &str) -> Command {
    let mut c = Command::new(workload(name));
    c.env("LD_LIBRARY_PATH", standin_ld_library_path());
    c
}
