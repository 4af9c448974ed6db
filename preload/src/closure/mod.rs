//! The closure rule: every way a process can obtain a driver (or runtime, or NCCL) function
//! pointer hands out the tracer's wrapper — `dlsym`, `dlvsym`, `cuGetProcAddress`,
//! `cuGetProcAddress_v2` (including when asked for itself) and `cudaGetDriverEntryPoint*` (whose
//! hooks live with the runtime hooks) — matched to the exact ABI version handed out.

pub mod dlsym;
pub mod proc_address;
pub mod registry;
pub mod versions;
