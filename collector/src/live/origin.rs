//! Naming the module that asked for an object.
//!
//! The caller of an intercepted function is often a CUDA library itself (`cudaMalloc` calling
//! `cuMemAlloc`, the runtime's own pools), which says nothing useful about who wanted the memory.
//! The owner is the first frame outside the CUDA libraries: the caller's module when it is not one
//! of them, else the first such frame on the event's interned stack.

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::event::StackId;
use crate::format::{Module, StackDef};
use crate::module_map::{is_cuda_library, ModuleMap};

/// The module that asked, and the address that names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// Module id, `None` when no module contains the address.
    pub module: Option<u32>,
    /// The caller, or the stack frame the owner was found at.
    pub frame: u64,
}

/// A code address named as `module+offset`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CodeLocation {
    pub module: Option<u32>,
    /// Module file name (`libnccl.so.2`), `None` when no module contains the address.
    pub module_name: Option<String>,
    /// Offset from the module's load bias (a file virtual address, what `addr2line` takes); the
    /// raw address when no module contains it.
    pub offset: u64,
}

impl std::fmt::Display for CodeLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&crate::units::module_offset(
            self.module_name.as_deref(),
            self.offset,
        ))
    }
}

/// Modules, stacks, and a cache of the owner per (caller, stack).
#[derive(Debug, Default)]
pub struct OwnerResolver {
    modules: ModuleMap,
    stacks: FxHashMap<StackId, Box<[u64]>>,
    cache: FxHashMap<(u64, StackId), Owner>,
    /// Counts the modules and stacks recorded: an owner found at one generation may differ at
    /// the next.
    generation: u64,
}

impl OwnerResolver {
    /// Records a loaded module. Cached owners are dropped: an address that was unknown may now
    /// belong to it, and it may replace an unloaded module.
    pub fn add_module(&mut self, module: Module) {
        self.modules.insert(module);
        self.cache.clear();
        self.generation += 1;
    }

    /// Records an interned stack.
    pub(crate) fn add_stack(&mut self, stack: &StackDef) {
        let previous = self
            .stacks
            .insert(stack.id, stack.frames.clone().into_boxed_slice());
        if previous.is_some() {
            self.cache.retain(|&(_, id), _| id != stack.id);
        }
        self.generation += 1;
    }

    /// Changes whenever a module or stack is recorded: owners found before may differ now.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The owner of a call from `caller` with `stack`.
    pub fn owner(&mut self, caller: u64, stack: StackId) -> Owner {
        if let Some(&owner) = self.cache.get(&(caller, stack)) {
            return owner;
        }
        let owner = self.resolve(caller, stack);
        // A stack whose definition has not arrived yet may still name a better owner later.
        if stack == 0 || self.stacks.contains_key(&stack) {
            self.cache.insert((caller, stack), owner);
        }
        owner
    }

    /// The owner, without the cache.
    pub fn resolve(&self, caller: u64, stack: StackId) -> Owner {
        let caller_module = self.modules.find(caller);
        let from_caller = Owner {
            module: caller_module.map(|m| m.id),
            frame: caller,
        };
        if caller_module.is_some_and(|m| !is_cuda_library(m.file_name())) {
            return from_caller;
        }
        let frames = self.stacks.get(&stack).map(|f| &f[..]).unwrap_or(&[]);
        frames
            .iter()
            .find_map(|&frame| {
                let m = self.modules.find(frame)?;
                (!is_cuda_library(m.file_name())).then_some(Owner {
                    module: Some(m.id),
                    frame,
                })
            })
            .unwrap_or(from_caller)
    }

    /// The module map.
    pub fn modules(&self) -> &ModuleMap {
        &self.modules
    }

    /// The file name of module `id`.
    pub fn module_name(&self, id: u32) -> Option<&str> {
        self.modules.by_id(id).map(Module::file_name)
    }

    /// The frames of an interned stack, innermost first.
    pub fn stack(&self, id: StackId) -> Option<&[u64]> {
        self.stacks.get(&id).map(|f| &f[..])
    }

    /// Names `addr` as `module+offset`.
    pub fn locate(&self, addr: u64) -> CodeLocation {
        match self.modules.find(addr) {
            Some(m) => CodeLocation {
                module: Some(m.id),
                module_name: Some(m.file_name().to_string()),
                offset: addr.wrapping_sub(m.base),
            },
            None => CodeLocation {
                module: None,
                module_name: None,
                offset: addr,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Segment;

    fn module(id: u32, name: &str, start: u64) -> Module {
        Module {
            id,
            path: format!("/usr/lib/{name}"),
            base: start,
            segments: vec![Segment {
                start,
                len: 0x1000,
                executable: true,
            }],
            build_id: vec![],
        }
    }

    fn resolver() -> OwnerResolver {
        let mut r = OwnerResolver::default();
        r.add_module(module(1, "libcudart.so.13", 0x10000));
        r.add_module(module(2, "libcuda.so.1", 0x20000));
        r.add_module(module(3, "libnccl.so.2", 0x30000));
        r.add_module(module(4, "app", 0x40000));
        r
    }

    #[test]
    fn a_caller_outside_cuda_is_the_owner() {
        let mut r = resolver();
        assert_eq!(
            r.owner(0x40010, 0),
            Owner {
                module: Some(4),
                frame: 0x40010
            }
        );
    }

    #[test]
    fn cuda_frames_are_skipped_on_the_stack() {
        let mut r = resolver();
        r.add_stack(&StackDef {
            id: 7,
            frames: vec![0x20010, 0x10020, 0x30030, 0x40040],
        });
        assert_eq!(
            r.owner(0x10010, 7),
            Owner {
                module: Some(3),
                frame: 0x30030
            }
        );
    }

    #[test]
    fn without_a_better_frame_the_callers_module_stays() {
        let mut r = resolver();
        assert_eq!(r.owner(0x10010, 0).module, Some(1));
        assert_eq!(r.owner(0x99999, 0).module, None);
        // Stack 9 is not defined yet: not cached, so its later definition is used.
        assert_eq!(r.owner(0x10010, 9).module, Some(1));
        r.add_stack(&StackDef {
            id: 9,
            frames: vec![0x40001],
        });
        assert_eq!(r.owner(0x10010, 9).module, Some(4));
    }

    #[test]
    fn locations_are_module_plus_offset() {
        let r = resolver();
        assert_eq!(r.locate(0x30123).to_string(), "libnccl.so.2+0x123");
        assert_eq!(r.locate(0x5).to_string(), "0x5");
    }
}
