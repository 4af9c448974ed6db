//! Turning an intercepted call into an event: per-thread state, the call discipline, the clock,
//! the current device and context, native and Python stacks and their interning.

pub mod call;
pub mod clock;
pub mod context;
pub mod intern;
pub mod meminfo;
pub mod python;
pub mod spin;
pub mod stack;
pub mod thread;

pub use call::{Call, Order};
