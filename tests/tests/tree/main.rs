//! Checks on the repository's own tree rather than on the tracer: no import loops between
//! folders (`imports`), one module style (`modules`), and README and docs linking only to files
//! inside the repository (`links`).

mod imports;
mod links;
mod modules;

use std::path::{Path, PathBuf};

/// The repository's top folder.
fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the repository")
        .to_path_buf()
}
