//! How hard the writer compresses a chunk: a choice of zstd settings, made per chunk.
//!
//! Replaying a trace spends much of its time in zstd's sequence decoding, whose cost follows the
//! number of matches more than the number of bytes. Level 1 (zstd's fast strategy) cuts an event
//! into many short matches; lazy matching with a slightly longer minimum finds fewer, longer ones.
//! On the replay benchmark's trace (`docs/performance.md`) that decompresses in about 10 ns per
//! event instead of 15, and the file is 13% smaller, for about 150 ns of compression per event
//! instead of 45 — time of the tracer's writer thread, not of the traced program's calls.
//! A writer that falls behind (the tracer's buffer filling up) switches to [`Packing::Fast`] until
//! it has caught up. Every chunk is a zstd frame of its own, so readers see no difference.

use zstd::bulk::Compressor;
use zstd::zstd_safe::{CParameter, Strategy};

/// The zstd settings of the next chunk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Packing {
    /// Smaller chunks that decompress faster (lazy matching): the default.
    #[default]
    Small,
    /// Cheapest to compress (zstd level 1): for a writer that has fallen behind.
    Fast,
}

/// A compressor per packing, the fast one made on first use.
pub(crate) struct Packer {
    packing: Packing,
    small: Compressor<'static>,
    fast: Option<Compressor<'static>>,
}

impl Packer {
    /// A packer of the default packing ([`Packing::Small`]).
    pub(crate) fn new() -> std::io::Result<Self> {
        let mut small = Compressor::new(5)?;
        // Measured on the replay benchmark's chunks (256 KiB): search depth 3 and tables of 2^16
        // entries decompress as fast as larger ones and compress faster; a minimum match of 6
        // bytes (level 5 uses 5) keeps the matches few.
        for p in [
            CParameter::Strategy(Strategy::ZSTD_lazy),
            CParameter::SearchLog(3),
            CParameter::MinMatch(6),
            CParameter::HashLog(16),
            CParameter::ChainLog(16),
        ] {
            small.set_parameter(p)?;
        }
        Ok(Packer {
            packing: Packing::Small,
            small,
            fast: None,
        })
    }

    pub(crate) fn packing(&self) -> Packing {
        self.packing
    }

    pub(crate) fn set(&mut self, packing: Packing) -> std::io::Result<()> {
        if packing == Packing::Fast && self.fast.is_none() {
            self.fast = Some(Compressor::new(1)?);
        }
        self.packing = packing;
        Ok(())
    }

    /// Compresses `raw` into `out` as one zstd frame; the compressed length.
    pub(crate) fn compress(&mut self, raw: &[u8], out: &mut [u8]) -> std::io::Result<usize> {
        match (self.packing, self.fast.as_mut()) {
            (Packing::Fast, Some(fast)) => fast.compress_to_buffer(raw, out),
            _ => self.small.compress_to_buffer(raw, out),
        }
    }
}
