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
    #[error("{}", cut_header(*have, *need))]
    TruncatedHeader { have: u64, need: u64 },
    #[error("the trace header is damaged: {0}")]
    CorruptHeader(String),
    #[error("write failed: {0}")]
    Write(#[source] std::io::Error),
    #[error("could not encode a record: {0}")]
    Encode(#[from] postcard::Error),
}

/// The words for a trace cut inside its header: an empty file is said to be one.
fn cut_header(have: u64, need: u64) -> String {
    if have == 0 {
        "the trace is empty (0 bytes): the tracer wrote nothing to it (it had not begun, or the \
         process was killed first)"
            .to_string()
    } else {
        format!("the trace is cut off inside its header ({have} of {need} bytes)")
    }
}
