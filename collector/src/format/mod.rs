//! The trace file: a header, then length-framed postcard records in zstd-compressed chunks.
//!
//! ```text
//! file   := magic "VRAMTRC\0" | u32 format version | u32 header length | header | u32 crc32(header)
//!           chunk*
//! chunk  := u32 compressed length | u32 raw length | u32 record count | u32 crc32(compressed)
//!           | zstd frame of: record* (then, from version 3, the columns: `layout.rs`; from
//!             version 4, each record behind an item byte or named by one: `shapes.rs`)
//! record := varint length | varint tag | postcard payload      (length covers tag + payload)
//! ```
//!
//! Version 4 (written now) encodes events against the previous event of their chunk
//! (`compact.rs`), with the values that vary from event to event in columns after the chunk's
//! records (`layout.rs`), and a record that repeats within its chunk named by one byte
//! (`shapes.rs`); version 3 (the same, every record written out), version 2 (all in the records)
//! and version 1 (events in postcard's layout) are still read.
//!
//! All integers in the fixed parts are little-endian. A chunk is written whole or not at all, so a
//! file cut off at any byte reads back up to its last complete chunk. A record whose tag this reader
//! does not know, or whose payload uses a variant it does not know, is skipped by its length, so
//! traces from newer writers stay readable.

mod chunk;
mod compact;
mod decode;
mod error;
mod header;
mod layout;
mod packing;
mod prefetch;
mod reader;
mod record;
mod shapes;
mod varint;
mod writer;

#[cfg(target_arch = "x86_64")]
pub(crate) use decode::packs_with_pext;
pub use error::TraceError;
pub use header::{Header, FORMAT_VERSION, MAGIC, OLDEST_VERSION};
pub use packing::Packing;
pub use reader::{Ending, RecordRef, TraceReader};
pub use record::{
    Attachment, End, Lookup, Module, PyCode, PyFrame, PyStackDef, Record, Segment, StackDef, Stats,
};
pub use writer::TraceWriter;
