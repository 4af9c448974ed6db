//! Symbol lookup straight from a loaded object's dynamic symbol table.
//!
//! The tracer exports its own `dlsym` and `dlvsym`, so it cannot call either by name to find
//! glibc's: every reference it makes binds to its own definitions (an unversioned definition in a
//! preloaded object satisfies versioned references too). Reading libc's `.gnu.hash` / `.hash`
//! tables in memory finds the real functions without going through the dynamic linker.

use std::ffi::CStr;

use libc::{c_int, c_void, dl_phdr_info, size_t};

const DT_NULL: i64 = 0;
const DT_HASH: i64 = 4;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_GNU_HASH: i64 = 0x6fff_fef5;
const DT_VERSYM: i64 = 0x6fff_fff0;
const PT_DYNAMIC: u32 = 2;
const VERSYM_HIDDEN: u16 = 0x8000;

#[repr(C)]
struct Dyn {
    tag: i64,
    val: u64,
}

#[repr(C)]
struct Sym {
    name: u32,
    info: u8,
    other: u8,
    shndx: u16,
    value: u64,
    size: u64,
}

struct Search<'a> {
    /// `None`: the executable (the first object, which has no name).
    file_prefix: Option<&'a [u8]>,
    symbol: &'a [u8],
    found: usize,
}

fn gnu_hash(name: &[u8]) -> u32 {
    name.iter().fold(5381u32, |h, &c| {
        h.wrapping_mul(33).wrapping_add(u32::from(c))
    })
}

fn sysv_hash(name: &[u8]) -> u32 {
    let mut h = 0u32;
    for &c in name {
        h = (h << 4).wrapping_add(u32::from(c));
        let g = h & 0xf000_0000;
        if g != 0 {
            h ^= g >> 24;
        }
        h &= !g;
    }
    h
}

/// The tables of one loaded object, with addresses already relocated.
struct Tables {
    base: usize,
    strtab: usize,
    symtab: usize,
    gnu_hash: usize,
    hash: usize,
    versym: usize,
}

impl Tables {
    /// Reads the dynamic section of a loaded object.
    ///
    /// # Safety
    /// `info` must describe an object that is loaded now.
    unsafe fn read(info: &dl_phdr_info) -> Option<Tables> {
        let base = info.dlpi_addr as usize;
        // SAFETY: dlpi_phdr points at dlpi_phnum program headers of a loaded object.
        let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
        let dynamic = phdrs.iter().find(|p| p.p_type == PT_DYNAMIC)?;
        let mut t = Tables {
            base,
            strtab: 0,
            symtab: 0,
            gnu_hash: 0,
            hash: 0,
            versym: 0,
        };
        // glibc relocates d_ptr values in place on x86_64 and aarch64; an address below the load
        // bias was left unrelocated.
        let fix = |v: u64| -> usize {
            let v = v as usize;
            if v < base {
                v + base
            } else {
                v
            }
        };
        let mut d = (base + dynamic.p_vaddr as usize) as *const Dyn;
        loop {
            // SAFETY: the dynamic section is an array of Dyn ended by DT_NULL.
            let entry = unsafe { &*d };
            match entry.tag {
                DT_NULL => break,
                DT_STRTAB => t.strtab = fix(entry.val),
                DT_SYMTAB => t.symtab = fix(entry.val),
                DT_GNU_HASH => t.gnu_hash = fix(entry.val),
                DT_HASH => t.hash = fix(entry.val),
                DT_VERSYM => t.versym = fix(entry.val),
                _ => {}
            }
            // SAFETY: still inside the array, which ends with DT_NULL.
            d = unsafe { d.add(1) };
        }
        (t.strtab != 0 && t.symtab != 0 && (t.gnu_hash != 0 || t.hash != 0)).then_some(t)
    }

    /// Whether symbol `idx` is a defined, default-version function named `name`.
    ///
    /// # Safety
    /// `idx` must be a valid index into the symbol table.
    unsafe fn matches(&self, idx: usize, name: &[u8]) -> bool {
        // SAFETY: idx comes from the object's own hash table.
        let sym = unsafe { &*(self.symtab as *const Sym).add(idx) };
        if sym.shndx == 0 || sym.value == 0 {
            return false;
        }
        // SAFETY: st_name is an offset into the string table of NUL-terminated names.
        let sname = unsafe { CStr::from_ptr((self.strtab + sym.name as usize) as *const _) };
        if sname.to_bytes() != name {
            return false;
        }
        if self.versym != 0 {
            // SAFETY: the version table has one entry per symbol.
            let v = unsafe { *(self.versym as *const u16).add(idx) };
            if v & VERSYM_HIDDEN != 0 {
                return false;
            }
        }
        true
    }

    /// # Safety
    /// The tables must belong to a loaded object.
    unsafe fn lookup(&self, name: &[u8]) -> Option<usize> {
        if self.gnu_hash != 0 {
            let h = gnu_hash(name);
            let words = self.gnu_hash as *const u32;
            // SAFETY: the GNU hash header is four words, then the bloom filter, buckets and
            // chains, laid out as the ELF gABI extension describes.
            unsafe {
                let nbuckets = *words as usize;
                let symoffset = *words.add(1) as usize;
                let bloom_size = *words.add(2) as usize;
                let buckets = words.add(4 + bloom_size * 2);
                let chains = buckets.add(nbuckets);
                let mut idx = *buckets.add(h as usize % nbuckets) as usize;
                if idx < symoffset {
                    return None;
                }
                loop {
                    let ch = *chains.add(idx - symoffset);
                    if (ch | 1) == (h | 1) && self.matches(idx, name) {
                        let sym = &*(self.symtab as *const Sym).add(idx);
                        return Some(self.base + sym.value as usize);
                    }
                    if ch & 1 != 0 {
                        return None;
                    }
                    idx += 1;
                }
            }
        }
        let words = self.hash as *const u32;
        // SAFETY: the SysV hash table is nbucket, nchain, buckets, chains.
        unsafe {
            let nbucket = *words as usize;
            let buckets = words.add(2);
            let chains = buckets.add(nbucket);
            let mut idx = *buckets.add(sysv_hash(name) as usize % nbucket) as usize;
            while idx != 0 {
                if self.matches(idx, name) {
                    let sym = &*(self.symtab as *const Sym).add(idx);
                    return Some(self.base + sym.value as usize);
                }
                idx = *chains.add(idx) as usize;
            }
        }
        None
    }
}

unsafe extern "C" fn visit(info: *mut dl_phdr_info, _size: size_t, data: *mut c_void) -> c_int {
    // SAFETY: dl_iterate_phdr passes a valid info and our own Search.
    let (info, search) = unsafe { (&*info, &mut *(data as *mut Search)) };
    let path: &[u8] = if info.dlpi_name.is_null() {
        b""
    } else {
        // SAFETY: dlpi_name is a NUL-terminated path.
        unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes()
    };
    match search.file_prefix {
        None => {
            // The executable comes first; stop after it either way.
            if let Some(addr) = unsafe_lookup(info, search.symbol) {
                search.found = addr;
            }
            return 1;
        }
        Some(prefix) => {
            let file = path.rsplit(|&c| c == b'/').next().unwrap_or(path);
            if !file.starts_with(prefix) {
                return 0;
            }
        }
    }
    match unsafe_lookup(info, search.symbol) {
        Some(addr) => {
            search.found = addr;
            1
        }
        None => 0,
    }
}

fn unsafe_lookup(info: &dl_phdr_info, symbol: &[u8]) -> Option<usize> {
    // SAFETY: called from the dl_iterate_phdr callback: the object is loaded meanwhile.
    let tables = unsafe { Tables::read(info) }?;
    // SAFETY: as above.
    unsafe { tables.lookup(symbol) }
}

/// Finds the default-version definition of `symbol` in the first loaded object whose file name
/// starts with `file_prefix` (`"libc.so"`), without calling `dlsym`.
pub fn lookup(file_prefix: &str, symbol: &str) -> Option<usize> {
    search(Some(file_prefix.as_bytes()), symbol.as_bytes())
}

/// The executable's own exported definition of `symbol`, if it has one.
pub fn lookup_executable(symbol: &[u8]) -> Option<usize> {
    search(None, symbol)
}

fn search(file_prefix: Option<&[u8]>, symbol: &[u8]) -> Option<usize> {
    let mut search = Search {
        file_prefix,
        symbol,
        found: 0,
    };
    // SAFETY: `visit` only reads the loader's tables while dl_iterate_phdr holds them stable.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut search as *mut Search as *mut c_void) };
    (search.found != 0).then_some(search.found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_libc_functions_without_dlsym() {
        let getpid = lookup("libc.so", "getpid").expect("getpid in libc");
        assert_eq!(getpid, libc::getpid as *const () as usize);
        assert!(lookup("libc.so", "dlsym").is_some());
        assert!(lookup("libc.so", "no_such_symbol_xyz").is_none());
        assert!(lookup("libnothing.so", "getpid").is_none());
        // The test executable exports nothing by that name.
        assert!(lookup_executable(b"getpid").is_none());
    }
}
