//! Why a module's file could not be used for symbols. These never reach a report as errors: a
//! module that cannot be read degrades to `module+0xOFFSET`, and the reason is kept as a note.

use std::path::PathBuf;

/// A problem reading one candidate file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SymbolError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not an ELF file this reader understands: {source}")]
    Parse {
        path: PathBuf,
        source: object::Error,
    },
    #[error("{path}: bad DWARF debug information: {source}")]
    Dwarf { path: PathBuf, source: gimli::Error },
}
