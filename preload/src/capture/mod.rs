//! What an event records about a call: per-thread state, the clock, the current device and
//! context, native and Python stacks and their interning. The hooks (`hooks::call`) and the
//! writer thread use it; it depends on neither.

pub mod clock;
pub mod context;
pub mod intern;
pub mod python;
pub mod spin;
pub mod stack;
pub mod thread;
