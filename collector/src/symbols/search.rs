//! Finding the files that hold a module's symbols: the binary the trace names (if its build id
//! still matches), copies of it in the symbol search path, and separate debug files found by
//! build id or by `.gnu_debuglink`. A trace moved to another machine symbolizes there as long as
//! the same builds are in one of these places.

use std::path::{Path, PathBuf};

use super::elf::{hex, ElfFile};
use crate::format::Module;

/// The environment variable naming extra symbol directories, colon-separated.
pub(crate) const SYMBOL_PATH_VAR: &str = "VRAMTRACE_SYMBOL_PATH";

/// The system's separate debug info directory (Debian, Fedora and others install
/// `-dbg`/`-debuginfo` packages under it).
const SYSTEM_DEBUG_DIR: &str = "/usr/lib/debug";

/// Where to look for symbol files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymbolSearch {
    /// Directories searched first, in order. A file there is used when it has the module's build
    /// id and is found as `DIR/NAME`, `DIR/NAME.debug`, `DIR/.build-id/ab/cdef….debug` (or without
    /// `.debug`: a binary), or debuginfod's `DIR/abcdef…/debuginfo` and `DIR/abcdef…/executable`.
    pub dirs: Vec<PathBuf>,
    /// Debug directories in the system layout: `DIR/.build-id/ab/cdef….debug`, and the
    /// `.gnu_debuglink` target under `DIR/<the binary's directory>/`.
    pub debug_dirs: Vec<PathBuf>,
}

impl Default for SymbolSearch {
    fn default() -> Self {
        SymbolSearch {
            dirs: Vec::new(),
            debug_dirs: vec![PathBuf::from(SYSTEM_DEBUG_DIR)],
        }
    }
}

impl SymbolSearch {
    /// The system debug directory, plus the directories in `VRAMTRACE_SYMBOL_PATH`.
    pub fn from_env() -> Self {
        Self::with_symbol_path(&std::env::var_os(SYMBOL_PATH_VAR).unwrap_or_default())
    }

    /// The system debug directory, plus the directories of a colon-separated `symbol_path`
    /// (empty entries are ignored).
    pub fn with_symbol_path(symbol_path: &std::ffi::OsStr) -> Self {
        SymbolSearch {
            dirs: std::env::split_paths(symbol_path)
                .filter(|p| !p.as_os_str().is_empty())
                .collect(),
            ..SymbolSearch::default()
        }
    }

    /// Searches only `dirs` (no system directory): for tests and for traces from elsewhere.
    pub fn only(dirs: Vec<PathBuf>) -> Self {
        SymbolSearch {
            dirs,
            debug_dirs: Vec::new(),
        }
    }
}

/// The files found for one module.
#[derive(Debug, Default)]
pub(crate) struct ModuleFiles {
    /// The module's own file (or a copy with its build id): symbol tables, maybe DWARF.
    pub binary: Option<ElfFile>,
    /// A separate file with the DWARF, when the binary has none.
    pub debug: Option<ElfFile>,
    /// What went wrong on the way, for the user: a rebuilt binary, an unreadable file.
    pub notes: Vec<String>,
}

impl SymbolSearch {
    /// Finds the files for `module`.
    pub(crate) fn find(&self, module: &Module) -> ModuleFiles {
        let mut found = ModuleFiles::default();
        let id = &module.build_id;
        let name = module.file_name();
        let recorded = Path::new(&module.path);
        if recorded.is_absolute() {
            if let Some(file) = open(recorded, &mut found.notes) {
                if file.matches(id) {
                    found.binary = Some(file);
                } else {
                    found.notes.push(format!(
                        "{} has build id {}, the trace says {}: it was rebuilt since",
                        recorded.display(),
                        show_id(&file.build_id),
                        hex(id)
                    ));
                }
            }
        }
        if found.binary.is_none() {
            found.binary = self.first_match(&self.binary_candidates(name, id), id, &mut found);
        }
        if found.binary.as_ref().is_some_and(|b| b.has_dwarf) {
            return found;
        }
        let mut candidates = self.debug_candidates(name, id);
        if let Some(binary) = &found.binary {
            candidates.extend(self.debuglink_candidates(binary));
        }
        found.debug = self
            .first_match(&candidates, id, &mut found)
            .filter(|f| f.has_dwarf);
        if found.binary.is_none() && found.debug.is_none() {
            found.notes.push(if id.is_empty() {
                format!("{} not found", module.path)
            } else {
                format!(
                    "no file with build id {} found (looked at {} and the symbol path)",
                    hex(id),
                    module.path
                )
            });
        }
        found
    }

    /// The first candidate that opens and has the build id (or, for a debuglink candidate,
    /// the CRC the binary expects).
    fn first_match(
        &self,
        candidates: &[Candidate],
        id: &[u8],
        found: &mut ModuleFiles,
    ) -> Option<ElfFile> {
        for c in candidates {
            let Some(file) = open(&c.path, &mut found.notes) else {
                continue;
            };
            let ok = match c.crc {
                // A debug file carries the build id of its binary; where it has none, the CRC
                // stands in.
                Some(crc) => {
                    if file.build_id.is_empty() {
                        file.crc32() == crc
                    } else {
                        file.matches(id)
                    }
                }
                None => file.matches(id),
            };
            if ok {
                return Some(file);
            }
        }
        None
    }

    /// Copies of the binary: `DIR/NAME`, and by build id.
    fn binary_candidates(&self, name: &str, id: &[u8]) -> Vec<Candidate> {
        let mut out = Vec::new();
        for dir in &self.dirs {
            out.push(Candidate::plain(dir.join(name)));
            if let Some(p) = build_id_path(dir, id, "") {
                out.push(Candidate::plain(p));
            }
            if !id.is_empty() {
                out.push(Candidate::plain(dir.join(hex(id)).join("executable")));
            }
        }
        out
    }

    /// Separate debug files found by name or build id.
    fn debug_candidates(&self, name: &str, id: &[u8]) -> Vec<Candidate> {
        let mut out = Vec::new();
        for dir in &self.dirs {
            if let Some(p) = build_id_path(dir, id, ".debug") {
                out.push(Candidate::plain(p));
            }
            if !id.is_empty() {
                out.push(Candidate::plain(dir.join(hex(id)).join("debuginfo")));
            }
            out.push(Candidate::plain(dir.join(format!("{name}.debug"))));
        }
        for dir in &self.debug_dirs {
            if let Some(p) = build_id_path(dir, id, ".debug") {
                out.push(Candidate::plain(p));
            }
        }
        out
    }

    /// Where gdb looks for a `.gnu_debuglink` target: beside the binary, in `.debug/` beside
    /// it, under each debug directory, and in the search directories.
    fn debuglink_candidates(&self, binary: &ElfFile) -> Vec<Candidate> {
        let Some((link, crc)) = binary.debuglink() else {
            return Vec::new();
        };
        // The link names a file, never a path: anything else is not followed.
        if link.components().count() != 1 {
            return Vec::new();
        }
        let dir = binary.path.parent().unwrap_or(Path::new("/"));
        let mut paths = vec![dir.join(&link), dir.join(".debug").join(&link)];
        for debug in &self.debug_dirs {
            let relative = dir.strip_prefix("/").unwrap_or(dir);
            paths.push(debug.join(relative).join(&link));
        }
        for d in &self.dirs {
            paths.push(d.join(&link));
        }
        paths
            .into_iter()
            // The binary itself can be its own link target only by mistake.
            .filter(|p| *p != binary.path)
            .map(|path| Candidate {
                path,
                crc: Some(crc),
            })
            .collect()
    }
}

/// A path to try, with the CRC a `.gnu_debuglink` expects of it.
struct Candidate {
    path: PathBuf,
    crc: Option<u32>,
}

impl Candidate {
    fn plain(path: PathBuf) -> Self {
        Candidate { path, crc: None }
    }
}

/// `DIR/.build-id/ab/cdef…SUFFIX`; `None` for a build id too short to split.
fn build_id_path(dir: &Path, id: &[u8], suffix: &str) -> Option<PathBuf> {
    let (first, rest) = id.split_first()?;
    if rest.is_empty() {
        return None;
    }
    Some(
        dir.join(".build-id")
            .join(format!("{first:02x}"))
            .join(format!("{}{suffix}", hex(rest))),
    )
}

fn show_id(id: &[u8]) -> String {
    if id.is_empty() {
        "(none)".to_string()
    } else {
        hex(id)
    }
}

/// Opens an ELF file; a file that exists but cannot be read is noted, a missing one is not.
/// Only regular files are tried: a recorded path may name a device or a directory by now.
fn open(path: &Path, notes: &mut Vec<String>) -> Option<ElfFile> {
    if !path.is_file() {
        return None;
    }
    match ElfFile::open(path) {
        Ok(f) => Some(f),
        Err(super::SymbolError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            None
        }
        Err(e) => {
            notes.push(e.to_string());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_id_paths_split_the_first_byte() {
        let p = build_id_path(Path::new("/usr/lib/debug"), &[0xab, 0xcd, 0xef], ".debug");
        assert_eq!(
            p.unwrap(),
            Path::new("/usr/lib/debug/.build-id/ab/cdef.debug")
        );
        assert!(build_id_path(Path::new("/d"), &[0xab], ".debug").is_none());
        assert!(build_id_path(Path::new("/d"), &[], ".debug").is_none());
    }
}
