//! Module map: which loaded object an address belongs to, and whether that object is one of the
//! CUDA libraries whose frames are skipped when naming the module that asked.

use std::collections::BTreeMap;

use crate::format::Module;

/// File-name prefixes of the libraries that implement CUDA itself. A call made from inside one of
/// them was asked for by the first frame outside them.
const CUDA_LIBRARY_PREFIXES: &[&str] = &["libcuda.so", "libcudart.so", TRACER_PREFIX];

/// File-name prefix of the tracer itself (`libvramtrace.so`).
const TRACER_PREFIX: &str = "libvramtrace";

/// Whether a module file name is the tracer's: its frames are never part of a stack a report
/// shows (they are the hooks of an outer intercepted call, between a library and its caller).
pub(crate) fn is_tracer(file_name: &str) -> bool {
    file_name.starts_with(TRACER_PREFIX)
}

/// Whether a module file name is one of the CUDA implementation libraries (or the tracer).
pub(crate) fn is_cuda_library(file_name: &str) -> bool {
    CUDA_LIBRARY_PREFIXES
        .iter()
        .any(|p| file_name.starts_with(p))
}

/// Address → module lookup over the modules recorded in a trace.
#[derive(Clone, Debug, Default)]
pub struct ModuleMap {
    modules: Vec<Module>,
    /// Segment start → (segment end, index into `modules`).
    by_start: BTreeMap<u64, (u64, usize)>,
}

impl ModuleMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a module; a later module overlapping an earlier one wins for the overlapping range
    /// (the earlier one was unloaded).
    pub fn insert(&mut self, module: Module) {
        let index = self.modules.len();
        for s in &module.segments {
            let end = s.start.saturating_add(s.len);
            // The segments in the map do not overlap, so their ends follow their starts: those
            // that overlap this one are the last ones starting before its end, back to the
            // first that ends before its start (looking further made every insert scan the map).
            let stale: Vec<u64> = self
                .by_start
                .range(..end)
                .rev()
                .take_while(|&(_, &(e, _))| e > s.start)
                .map(|(&start, _)| start)
                .collect();
            for k in stale {
                self.by_start.remove(&k);
            }
            self.by_start.insert(s.start, (end, index));
        }
        self.modules.push(module);
    }

    /// The module containing `addr`.
    pub fn find(&self, addr: u64) -> Option<&Module> {
        let (_, &(end, index)) = self.by_start.range(..=addr).next_back()?;
        (addr < end).then(|| &self.modules[index])
    }

    /// The module with a given id.
    pub fn by_id(&self, id: u32) -> Option<&Module> {
        self.modules.iter().rev().find(|m| m.id == id)
    }

    /// All modules recorded, in order.
    pub fn modules(&self) -> &[Module] {
        &self.modules
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Segment;

    fn module(id: u32, name: &str, start: u64, len: u64) -> Module {
        Module {
            id,
            path: format!("/lib/{name}"),
            base: start,
            segments: vec![Segment {
                start,
                len,
                executable: true,
            }],
            build_id: vec![],
        }
    }

    #[test]
    fn finds_by_address_and_replaces_overlaps() {
        let mut m = ModuleMap::new();
        m.insert(module(1, "a.so", 0x1000, 0x1000));
        m.insert(module(2, "b.so", 0x3000, 0x1000));
        assert_eq!(m.find(0x1000).unwrap().id, 1);
        assert_eq!(m.find(0x1fff).unwrap().id, 1);
        assert!(m.find(0x2000).is_none());
        assert_eq!(m.find(0x3800).unwrap().id, 2);
        m.insert(module(3, "c.so", 0x1800, 0x100));
        assert_eq!(m.find(0x1850).unwrap().id, 3);
        assert!(m.find(0x1000).is_none(), "a.so was unloaded");
    }

    #[test]
    fn cuda_libraries_are_recognised() {
        assert!(is_cuda_library("libcuda.so.1"));
        assert!(is_cuda_library("libcudart.so.13"));
        assert!(!is_cuda_library("libnccl.so.2"));
        assert!(!is_cuda_library("libcublas.so.13"));
    }
}
