//! vramtrace's shared core: the event model, the trace format, and the live-allocation state.
//!
//! The preload library uses it in-process (its writer thread writes traces with
//! [`format::TraceWriter`]); the `vramtrace` tools use it offline (they read traces with
//! [`format::TraceReader`] and rebuild what was live with [`live::LiveState`]). Both go through the
//! same code, so "what is live" has one definition.

// The documentation is for the people who work on the repository (`cargo doc
// --document-private-items`): a public item's doc may point at the private module doing the work.
#![allow(rustdoc::private_intra_doc_links)]

pub mod analysis;
pub mod attached;
#[cfg(feature = "symbols")]
pub mod compare;
pub mod event;
pub mod format;
mod ids;
pub mod live;
pub mod module_map;
mod python;
#[cfg(feature = "symbols")]
pub mod symbols;
pub mod torch;
pub mod units;

pub use event::{Api, Event, MemKind, Op};
pub use format::{Header, Record, TraceError, TraceReader, TraceWriter};

/// The maps on the replay path hash with rustc-hash's `FxHasher`: their keys are pointers,
/// handles and small ids chosen by the traced program and its drivers, not by an attacker, and
/// SipHash's protection against chosen keys would cost a third of the apply time. Page-aligned
/// pointers (low bits all zero) must still spread over a table's buckets.
#[cfg(test)]
mod tests {
    use std::hash::{BuildHasher, Hasher};

    #[test]
    fn page_aligned_pointers_spread() {
        let mut buckets = [0u32; 64];
        for i in 0..64_000u64 {
            let mut h = rustc_hash::FxBuildHasher.build_hasher();
            h.write_u64(0x7f00_0000_0000 + i * 0x20_0000);
            buckets[(h.finish() & 63) as usize] += 1;
        }
        assert!(buckets.iter().all(|&n| n > 500), "{buckets:?}");
    }
}
