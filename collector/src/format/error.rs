//! Errors from reading or writing a trace.

use thiserror::Error;

/// Why a trace could not be opened or written. Problems after the header (a cut-off or damaged
/// chunk) are not errors: the reader stops there and reports it as its [`super::Ending`].
#[derive(Debug, Error)]
pub enum TraceError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("not a vramtrace trace (it does not start with the trace signature)")]
    NotATrace,
    #[error(
        "trace format version {found} is not supported (this vramtrace reads versions {oldest} to {supported})"
    )]
    UnsupportedVersion {
        found: u32,
        oldest: u32,
        supported: u32,
    },
    #[error("the trace is cut off inside its header ({have} of {need} bytes)")]
    TruncatedHeader { have: u64, need: u64 },
    #[error("the trace header is damaged: {0}")]
    CorruptHeader(String),
    #[error("write failed: {0}")]
    Write(#[source] std::io::Error),
    #[error("could not encode a record: {0}")]
    Encode(#[from] postcard::Error),
}
