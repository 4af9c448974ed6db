//! How function pointers are looked up and handed out: the tracer's side of interposition,
//! beside the hooks themselves (`hooks/`).
//!
//! - [`resolve`]: finding the real functions (glibc's `dlsym` without `dlsym`, local scopes, the
//!   driver library) and the per-hook slots that keep them;
//! - [`closure`]: the resolvers a program asks for function pointers (`dlsym`,
//!   `cuGetProcAddress`, `cudaGetDriverEntryPoint*`), which hand out the wrappers.
//!
//! Two folders, not one: the resolvers look hooks up by name, and the hooks find their real
//! functions through `resolve`, so `closure` sits above `hooks` and `resolve` below.

pub mod closure;
pub mod resolve;
