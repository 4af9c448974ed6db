//! Turning an intercepted call into an event: per-thread state, the call discipline, the clock,
//! the current device and context, and native stacks.

pub mod call;
pub mod clock;
pub mod context;
pub mod meminfo;
pub mod python;
pub mod spin;
pub mod stack;
pub mod thread;

pub use call::{Call, Order};
