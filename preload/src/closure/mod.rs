//! The closure rule: every way a process can obtain a driver (or runtime, or NCCL) function
//! pointer hands out the tracer's wrapper — `dlsym`, `dlvsym`, `cuGetProcAddress`,
//! `cuGetProcAddress_v2` (including when asked for itself) and `cudaGetDriverEntryPoint*` —
//! matched to the exact ABI version handed out.
//!
//! The resolvers sit above the other hooks: they look hooks up by name ([`registry`]); no
//! other hook depends on them.

pub mod dlsym;
pub mod entry_point;
pub mod proc_address;
pub mod registry;
pub mod versions;
