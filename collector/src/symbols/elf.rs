//! An ELF file mapped into memory: its build id, its `.gnu_debuglink`, whether it carries DWARF,
//! and its sections as readers that keep the mapping alive.

use std::borrow::Cow;
use std::fs::File;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;
use object::{Object, ObjectSection};

use super::error::SymbolError;

/// Bytes that DWARF readers point into: a whole file mapping, or a section that had to be
/// decompressed into memory.
#[derive(Clone, Debug)]
pub(crate) enum SectionBytes {
    Mapped(Arc<Mmap>),
    Owned(Arc<[u8]>),
}

impl Deref for SectionBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            SectionBytes::Mapped(map) => map,
            SectionBytes::Owned(bytes) => bytes,
        }
    }
}

// SAFETY: both variants deref to the contents of an `Arc` allocation (the mapping, or the boxed
// slice), which stays at one address while any clone of the `Arc` lives: moving or cloning a
// `SectionBytes` never moves the bytes it derefs to.
unsafe impl gimli::StableDeref for SectionBytes {}
// SAFETY: as above; a clone shares the same allocation, so it derefs to the same bytes.
unsafe impl gimli::CloneStableDeref for SectionBytes {}

/// The reader every DWARF section is read through.
pub(crate) type DwarfReader = gimli::EndianReader<gimli::RunTimeEndian, SectionBytes>;

/// A mapped ELF file, checked to parse.
#[derive(Debug)]
pub(crate) struct ElfFile {
    pub path: PathBuf,
    map: Arc<Mmap>,
    /// GNU build id, empty when the file has none.
    pub build_id: Vec<u8>,
    /// Whether it holds `.debug_info` with contents (a stripped file or a binary whose debug
    /// info was split off does not).
    pub has_dwarf: bool,
}

impl ElfFile {
    /// Maps and parses `path`.
    pub fn open(path: &Path) -> Result<ElfFile, SymbolError> {
        let io = |source| SymbolError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        // SAFETY: the mapping is read-only and private. A file truncated or rewritten while
        // mapped could change what we read (or fault on access past a truncation); binaries and
        // debug files are replaced by rename, not rewritten in place, and the tools read them
        // for the duration of one report.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let map = Arc::new(map);
        let parsed = object::File::parse(&**map).map_err(|source| SymbolError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
        let build_id = parsed.build_id().ok().flatten().unwrap_or(&[]).to_vec();
        let has_dwarf = parsed
            .section_by_name(".debug_info")
            .is_some_and(|s| s.kind() != object::SectionKind::UninitializedData && s.size() > 0);
        Ok(ElfFile {
            path: path.to_path_buf(),
            map,
            build_id,
            has_dwarf,
        })
    }

    /// The parsed object (headers only are read: cheap to redo).
    pub fn object(&self) -> Result<object::File<'_>, SymbolError> {
        object::File::parse(&**self.map).map_err(|source| SymbolError::Parse {
            path: self.path.clone(),
            source,
        })
    }

    /// The `.gnu_debuglink` file name and CRC, when present.
    pub fn debuglink(&self) -> Option<(PathBuf, u32)> {
        let object = self.object().ok()?;
        let (name, crc) = object.gnu_debuglink().ok()??;
        let name = std::str::from_utf8(name).ok()?;
        Some((PathBuf::from(name), crc))
    }

    /// The CRC-32 of the whole file, as `.gnu_debuglink` records it.
    pub fn crc32(&self) -> u32 {
        crc32fast::hash(&self.map)
    }

    /// Whether the file's build id matches `expected`. A trace without a build id for the module
    /// cannot tell files apart, so any file matches it.
    pub fn matches(&self, expected: &[u8]) -> bool {
        expected.is_empty() || self.build_id == expected
    }

    /// A DWARF reader over the (decompressed) section called `name`; empty when absent.
    pub fn section(
        &self,
        object: &object::File<'_>,
        name: &str,
        endian: gimli::RunTimeEndian,
    ) -> Result<DwarfReader, SymbolError> {
        let empty = || gimli::EndianReader::new(SectionBytes::Owned(Arc::from(&[][..])), endian);
        let Some(section) = object.section_by_name(name) else {
            return Ok(empty());
        };
        if section.kind() == object::SectionKind::UninitializedData {
            return Ok(empty());
        }
        let data = section
            .uncompressed_data()
            .map_err(|source| SymbolError::Parse {
                path: self.path.clone(),
                source,
            })?;
        Ok(match data {
            Cow::Borrowed(bytes) => match self.offset_of(bytes) {
                Some(start) => {
                    gimli::EndianReader::new(SectionBytes::Mapped(self.map.clone()), endian)
                        .range(start..start + bytes.len())
                }
                None => gimli::EndianReader::new(SectionBytes::Owned(Arc::from(bytes)), endian),
            },
            Cow::Owned(bytes) => {
                gimli::EndianReader::new(SectionBytes::Owned(Arc::from(bytes)), endian)
            }
        })
    }

    /// Where `bytes` starts inside the mapping, when it lies wholly inside it.
    fn offset_of(&self, bytes: &[u8]) -> Option<usize> {
        let base = self.map.as_ptr() as usize;
        let start = (bytes.as_ptr() as usize).checked_sub(base)?;
        (start.checked_add(bytes.len())? <= self.map.len()).then_some(start)
    }
}

/// A build id as lowercase hex.
pub(crate) fn hex(build_id: &[u8]) -> String {
    build_id.iter().map(|b| format!("{b:02x}")).collect()
}
