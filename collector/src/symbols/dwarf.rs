//! DWARF line and function information of one file, through `addr2line`: the frames (inlined
//! ones included) at a file address.

use std::sync::Arc;

use object::Object;

use super::elf::{DwarfReader, ElfFile};
use super::error::SymbolError;
use super::SourceFrame;

/// The DWARF of one file, parsed lazily unit by unit as addresses are looked up.
pub(crate) struct DwarfInfo {
    context: addr2line::Context<DwarfReader>,
}

impl std::fmt::Debug for DwarfInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DwarfInfo")
    }
}

impl DwarfInfo {
    /// Reads the DWARF sections of `file`.
    pub fn load(file: &ElfFile) -> Result<DwarfInfo, SymbolError> {
        let object = file.object()?;
        let endian = if object.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        let mut dwarf = gimli::Dwarf::load(|id| file.section(&object, id.name(), endian))?;
        // Units of one compiler share abbreviation tables; parsing each once saves most of the
        // cost of opening a unit.
        dwarf.populate_abbreviations_cache(gimli::AbbreviationsCacheStrategy::Duplicates);
        let context =
            addr2line::Context::from_dwarf(dwarf).map_err(|source| SymbolError::Dwarf {
                path: file.path.clone(),
                source,
            })?;
        Ok(DwarfInfo { context })
    }

    /// The frames at file address `probe`, innermost (inlined) first; empty when the DWARF does
    /// not cover it. Damaged DWARF yields what could be read before the damage.
    pub fn frames(&self, probe: u64) -> Vec<SourceFrame> {
        let mut out = Vec::new();
        // Split DWARF (.dwo files) is not looked for: the frames from the skeleton unit stand.
        let Ok(mut iter) = self.context.find_frames(probe).skip_all_loads() else {
            return out;
        };
        while let Ok(Some(frame)) = iter.next() {
            let function = frame
                .function
                .as_ref()
                .and_then(|f| f.demangle().ok())
                .map(|name| Arc::<str>::from(name.as_ref()));
            let (file, line) = match frame.location {
                Some(l) => (l.file.map(Arc::<str>::from), l.line),
                None => (None, None),
            };
            out.push(SourceFrame {
                function,
                file,
                line,
                inlined: true,
            });
        }
        // Every frame but the outermost was inlined into the one after it.
        if let Some(last) = out.last_mut() {
            last.inlined = false;
        }
        out
    }
}
