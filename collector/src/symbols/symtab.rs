//! The ELF symbol tables (`.symtab`, else what `.dynsym` exports) as a sorted address index: the
//! fallback that names functions in binaries without DWARF.

use std::borrow::Cow;
use std::ops::Range;

use object::{Object, ObjectSymbol, SymbolKind};

/// One function symbol; its name is a range of [`SymbolTable::names`].
#[derive(Clone, Debug)]
struct Entry {
    start: u64,
    /// `start + size`; equal to `start` when the table gives no size (hand-written assembly).
    end: u64,
    name: Range<usize>,
}

/// Function symbols by address.
#[derive(Debug, Default)]
pub(crate) struct SymbolTable {
    entries: Vec<Entry>,
    names: String,
}

impl SymbolTable {
    /// Reads the function symbols of `object` (both tables: a stripped file keeps only
    /// `.dynsym`, a `--only-keep-debug` file only `.symtab`).
    pub fn read(object: &object::File<'_>) -> SymbolTable {
        // (start, sized, global, name): sorted so that at one address a sized, global symbol
        // wins over an alias, deterministically.
        let mut found: Vec<(u64, u64, bool, &str)> = Vec::new();
        for symbol in object.symbols().chain(object.dynamic_symbols()) {
            if symbol.kind() != SymbolKind::Text || !symbol.is_definition() {
                continue;
            }
            let Ok(name) = symbol.name() else { continue };
            if name.is_empty() || symbol.address() == 0 {
                continue;
            }
            found.push((symbol.address(), symbol.size(), symbol.is_global(), name));
        }
        found.sort_by(|a, b| {
            a.0.cmp(&b.0)
                .then((b.1 > 0).cmp(&(a.1 > 0)))
                .then(b.2.cmp(&a.2))
                .then(a.3.cmp(b.3))
        });
        found.dedup_by_key(|s| s.0);
        let mut table = SymbolTable::default();
        for (start, size, _, name) in found {
            let from = table.names.len();
            table.names.push_str(name);
            table.entries.push(Entry {
                start,
                end: start.saturating_add(size),
                name: from..table.names.len(),
            });
        }
        table
    }

    /// The demangled name of the function containing the file address `probe`.
    pub fn lookup(&self, probe: u64) -> Option<String> {
        let i = self.entries.partition_point(|e| e.start <= probe);
        let entry = self.entries.get(i.checked_sub(1)?)?;
        // A symbol without a size covers up to the next symbol; one with a size only itself
        // (the gap after it is padding or code of an unnamed function).
        if entry.end > entry.start && probe >= entry.end {
            return None;
        }
        Some(demangle(&self.names[entry.name.clone()]))
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
