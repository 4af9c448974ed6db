//! The trace file: a header, then records in compressed chunks (`docs/trace-format.md`).
//!
//! ```text
//! file  := header block | header block (a copy) | chunk*            header.rs
//! chunk := sync marker | fixed part (lengths, counts, checksums)    frame.rs
//!          | zstd frame of: table | item* | column*                chunk.rs
//! ```
//!
//! Events are written against the previous event of their chunk, the values that vary from one
//! event to the next in columns (`events.rs`), and an event record that repeats within its chunk
//! is named by one byte (`shapes.rs`). The operations' fields are described once, for the writer
//! and the reader alike (`ops.rs`). A chunk decodes on its own (`decoder.rs`), on whatever
//! thread (`ahead.rs`).
//!
//! All integers in the fixed parts are little-endian. A chunk is written whole or not at all, so
//! a file cut off at any byte reads back up to its last complete chunk; a damaged chunk costs
//! that chunk, and reading goes on at the next intact one. A record whose tag this reader does
//! not know, or whose payload uses a variant it does not know, is skipped by its length, so
//! traces from newer writers stay readable. Version 4 (the same chunks without sync markers, the
//! header once) is read too.

mod ahead;
mod chunk;
mod decoder;
mod ending;
mod error;
mod events;
mod frame;
mod header;
mod ops;
mod packing;
mod reader;
mod record;
mod series;
mod shapes;
mod tail;
mod varint;
mod writer;

pub use ending::{Ending, Unread};
pub use error::TraceError;
pub use header::{Header, SegmentInfo, FORMAT_VERSION};
pub use packing::Packing;
pub use reader::{RecordRef, RecordSource, TraceReader};
pub use record::{
    Alert, Attachment, End, Lookup, Module, PyCode, PyFrame, PyStackDef, Record, Segment,
    SegmentEnd, Snapshot, StackDef, Stats,
};
pub use series::{
    trace_name, trace_of, Gone, OtherTrace, SegmentFile, Series, SeriesReader, TraceKey,
};
pub use tail::read_tail;
pub use writer::TraceWriter;
