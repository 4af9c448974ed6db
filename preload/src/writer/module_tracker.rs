//! The module map as the writer thread sees it: every loaded object with its segments and
//! build id, refreshed when an event names an address no known module holds.

use std::collections::HashMap;
use std::ffi::CStr;

use libc::{c_int, c_void, dl_phdr_info, size_t};
use vramtrace_collector::format::{Module, Segment};
use vramtrace_collector::module_map::ModuleMap;

const PT_NOTE: u32 = 4;
const NT_GNU_BUILD_ID: u32 = 3;

fn build_id(info: &dl_phdr_info, phdrs: &[libc::Elf64_Phdr]) -> Vec<u8> {
    for p in phdrs.iter().filter(|p| p.p_type == PT_NOTE) {
        let mut at = info.dlpi_addr as usize + p.p_vaddr as usize;
        let end = at + p.p_memsz as usize;
        while at + 12 <= end {
            // SAFETY: a loaded PT_NOTE segment holds notes: namesz, descsz, type, name, desc,
            // each padded to 4 bytes; the bounds are checked against the segment's size.
            let (namesz, descsz, kind) = unsafe {
                let w = at as *const u32;
                (*w as usize, *w.add(1) as usize, *w.add(2))
            };
            let name_at = at + 12;
            let desc_at = name_at + namesz.div_ceil(4) * 4;
            let next = desc_at + descsz.div_ceil(4) * 4;
            if next > end {
                break;
            }
            if kind == NT_GNU_BUILD_ID && namesz == 4 {
                // SAFETY: inside the segment, as checked above.
                let (name, desc) = unsafe {
                    (
                        std::slice::from_raw_parts(name_at as *const u8, 4),
                        std::slice::from_raw_parts(desc_at as *const u8, descsz),
                    )
                };
                if name == b"GNU\0" {
                    return desc.to_vec();
                }
            }
            at = next;
        }
    }
    Vec::new()
}

fn executable_path() -> String {
    std::fs::read_link("/proc/self/exe")
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "[executable]".into())
}

unsafe extern "C" fn visit(info: *mut dl_phdr_info, _size: size_t, data: *mut c_void) -> c_int {
    // SAFETY: dl_iterate_phdr passes a valid info and our own Vec.
    let (info, out) = unsafe { (&*info, &mut *(data as *mut Vec<Module>)) };
    // SAFETY: dlpi_phdr points at dlpi_phnum headers while the callback runs.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: dlpi_name is NUL-terminated.
        unsafe { CStr::from_ptr(info.dlpi_name) }
            .to_string_lossy()
            .into_owned()
    };
    let path = if name.is_empty() {
        if out.is_empty() {
            executable_path()
        } else {
            // The vDSO and other nameless objects.
            "[vdso]".into()
        }
    } else {
        name
    };
    let segments = phdrs
        .iter()
        .filter(|p| p.p_type == libc::PT_LOAD)
        .map(|p| Segment {
            start: info.dlpi_addr + p.p_vaddr,
            len: p.p_memsz,
            executable: p.p_flags & libc::PF_X != 0,
        })
        .collect();
    out.push(Module {
        id: 0,
        path,
        base: info.dlpi_addr,
        segments,
        build_id: build_id(info, phdrs),
    });
    0
}

/// Every object loaded right now (ids unset).
pub fn snapshot() -> Vec<Module> {
    let mut out: Vec<Module> = Vec::new();
    // SAFETY: `visit` only reads loader data during the callback.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut out as *mut Vec<Module> as *mut c_void) };
    out
}

/// Modules already written to the trace, so each is written once.
#[derive(Default)]
pub struct ModuleTracker {
    map: ModuleMap,
    seen: HashMap<(String, u64), u32>,
    next_id: u32,
    /// The segment of the last address looked up (call sites repeat).
    last: (u64, u64),
}

impl ModuleTracker {
    /// Whether some written module holds `addr`.
    pub fn knows(&mut self, addr: u64) -> bool {
        if addr == 0 || (addr >= self.last.0 && addr < self.last.1) {
            return true;
        }
        let Some(m) = self.map.find(addr) else {
            return false;
        };
        if let Some(s) = m
            .segments
            .iter()
            .find(|s| addr >= s.start && addr - s.start < s.len)
        {
            self.last = (s.start, s.start + s.len);
        }
        true
    }

    /// Every module written so far.
    pub fn all(&self) -> &[Module] {
        self.map.modules()
    }

    /// Re-reads the loaded objects; returns those not written before, with ids assigned.
    pub fn refresh(&mut self) -> Vec<Module> {
        let mut new = Vec::new();
        for mut m in snapshot() {
            let key = (m.path.clone(), m.base);
            if self.seen.contains_key(&key) {
                continue;
            }
            self.next_id += 1;
            m.id = self.next_id;
            self.seen.insert(key, m.id);
            self.map.insert(m.clone());
            new.push(m);
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_sees_the_executable_and_libc_with_build_ids() {
        let mods = snapshot();
        assert!(mods[0].path.contains("vramtrace"), "{}", mods[0].path);
        let libc = mods
            .iter()
            .find(|m| m.file_name().starts_with("libc.so"))
            .expect("libc loaded");
        assert!(!libc.segments.is_empty());
        assert!(libc.contains(libc::getpid as *const () as usize as u64));
        let mut t = ModuleTracker::default();
        let first = t.refresh();
        assert_eq!(first.len(), mods.len());
        assert!(t.refresh().is_empty(), "nothing new the second time");
        assert!(t.knows(libc::getpid as *const () as usize as u64));
    }
}
