//! The ELF symbol tables (`.symtab`, else what `.dynsym` exports) as a sorted address index: the
//! fallback that names functions in binaries without DWARF.
//!
//! The index holds addresses and symbol numbers only (24 bytes a function); a name is read from
//! the mapped file when a lookup asks for it. The CUDA libraries export hundreds of thousands of
//! long C++ names, and a report names a few hundred frames: copying every name cost a report
//! tens of MiB per library (and reading them all, as many pages of the file).

use std::borrow::Cow;

use object::{Object, ObjectSymbol, ObjectSymbolTable, SymbolIndex, SymbolKind};

/// Set in [`Entry::symbol`] for a symbol of `.dynsym` (else `.symtab`).
const DYNAMIC: u32 = 1 << 31;

/// One function symbol.
#[derive(Clone, Copy, Debug)]
struct Entry {
    start: u64,
    /// `start + size`; equal to `start` when the table gives no size (hand-written assembly).
    end: u64,
    /// Its number in its table, [`DYNAMIC`] set for `.dynsym`.
    symbol: u32,
    /// Sized, then global: at one address such a symbol wins over an alias.
    rank: u8,
}

/// Function symbols by address.
#[derive(Debug, Default)]
pub(crate) struct SymbolTable {
    entries: Vec<Entry>,
}

impl SymbolTable {
    /// Indexes the function symbols of `object` (both tables: a stripped file keeps only
    /// `.dynsym`, a `--only-keep-debug` file only `.symtab`). Names are not read.
    pub fn read(object: &object::File<'_>) -> SymbolTable {
        let mut entries: Vec<Entry> = Vec::new();
        let tables = [
            (object.symbol_table(), 0),
            (object.dynamic_symbol_table(), DYNAMIC),
        ];
        for (table, tag) in tables {
            let Some(table) = table else { continue };
            for symbol in table.symbols() {
                if symbol.kind() != SymbolKind::Text || !symbol.is_definition() {
                    continue;
                }
                let Ok(index) = u32::try_from(symbol.index().0) else {
                    continue;
                };
                if symbol.address() == 0 || index & DYNAMIC != 0 {
                    continue;
                }
                entries.push(Entry {
                    start: symbol.address(),
                    end: symbol.address().saturating_add(symbol.size()),
                    symbol: index | tag,
                    rank: u8::from(symbol.size() > 0) << 1 | u8::from(symbol.is_global()),
                });
            }
        }
        // At one address: sized and global first, then `.symtab` before `.dynsym`, then the
        // table's order — deterministic without reading names.
        entries.sort_unstable_by(|a, b| {
            (a.start.cmp(&b.start))
                .then(b.rank.cmp(&a.rank))
                .then(a.symbol.cmp(&b.symbol))
        });
        entries.dedup_by_key(|e| e.start);
        entries.shrink_to_fit();
        SymbolTable { entries }
    }

    /// The demangled name of the function containing the file address `probe`, its name read
    /// from `object` (the file the table was read from).
    pub fn lookup(&self, object: &object::File<'_>, probe: u64) -> Option<String> {
        let i = self.entries.partition_point(|e| e.start <= probe);
        let entry = self.entries.get(i.checked_sub(1)?)?;
        // A symbol without a size covers up to the next symbol; one with a size only itself
        // (the gap after it is padding or code of an unnamed function).
        if entry.end > entry.start && probe >= entry.end {
            return None;
        }
        let index = SymbolIndex((entry.symbol & !DYNAMIC) as usize);
        let table = if entry.symbol & DYNAMIC != 0 {
            object.dynamic_symbol_table()
        } else {
            object.symbol_table()
        };
        let name = table?.symbol_by_index(index).ok()?.name().ok()?;
        (!name.is_empty()).then(|| demangle(name))
    }

    /// Function symbols indexed.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

/// A symbol name as source would spell it: Rust (legacy and v0 mangling, without the hash) or
/// C++ (Itanium ABI) demangled; anything else (C) unchanged.
pub(crate) fn demangle(raw: &str) -> String {
    addr2line::demangle_auto(Cow::Borrowed(raw), None).into_owned()
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[test]
    fn rust_and_cpp_names_are_demangled_and_c_names_kept() {
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("_RNvCs1234_7mycrate3foo"), "mycrate::foo");
        assert_eq!(
            demangle("_ZN3c104cuda20CUDACachingAllocator6mallocEPPvim"),
            "c10::cuda::CUDACachingAllocator::malloc(void**, int, unsigned long)"
        );
        assert_eq!(demangle("cudaMalloc"), "cudaMalloc");
    }
}
