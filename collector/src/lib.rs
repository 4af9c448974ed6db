//! vramtrace's shared core: the event model, the trace format, and the live-allocation state.
//!
//! The preload library uses it in-process (its collector thread writes traces with
//! [`format::TraceWriter`]); the `vramtrace` tools use it offline (they read traces with
//! [`format::TraceReader`] and rebuild what was live with [`live::LiveState`]). Both go through the
//! same code, so "what is live" has one definition.

pub mod analysis;
pub mod attached;
#[cfg(feature = "symbols")]
pub mod compare;
pub mod event;
pub mod fasthash;
pub mod format;
pub mod live;
pub mod modules;
pub mod python;
#[cfg(feature = "symbols")]
pub mod symbols;
pub mod torch;

pub use event::{Api, Event, MemKind, Op};
pub use format::{Header, Record, TraceError, TraceReader, TraceWriter};
