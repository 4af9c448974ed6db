//! Symbolization: return addresses from a trace named as functions, source files and lines.
//!
//! The trace records, for every loaded module, its path, load bias and GNU build id. A
//! [`Symbolizer`] finds the file holding each module's symbols (see [`SymbolSearch`]), reads its
//! DWARF through `addr2line` (inlined frames included, names demangled), falls back to the ELF
//! symbol tables when there is no DWARF, and degrades to `module+0xOFFSET` when no usable file is
//! found: symbolization never fails a report. Files are opened on first use and addresses
//! resolved on demand, both cached, so a report pays only for the frames it shows.
//!
//! On top of it, [`Attribution`] names calls (an event's or a live object's caller, native stack
//! and Python stack) at a chosen [`Granularity`], and builds the mixed Python + native stacks
//! reports print; [`frames_label`] is the one rule that names a call site in words.

mod callsite;
mod dwarf;
mod elf;
mod error;
mod label;
mod search;
mod site_labels;
mod stack;
mod symtab;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use rustc_hash::FxHashMap;

pub use callsite::{Attribution, CallRef, CallSiteGroup, CallSiteKey, Granularity};
pub(crate) use error::SymbolError;
pub use label::frames_label;
pub use search::SymbolSearch;
pub use site_labels::{label as site_label, label_sites};
pub use stack::{collapse, FrameKind, StackFrame};

use self::dwarf::DwarfInfo;
use self::search::ModuleFiles;
use self::symtab::SymbolTable;
use crate::format::Module;
use crate::module_map::ModuleMap;

/// One source-level frame at an address. An address inside inlined code has several: the
/// inlined functions innermost first, then the function they were inlined into.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SourceFrame {
    /// Demangled function name; `None` when neither DWARF nor a symbol table names it.
    pub function: Option<Arc<str>>,
    /// Source file as the DWARF names it (joined with the compilation directory).
    pub file: Option<Arc<str>>,
    pub line: Option<u32>,
    /// Whether this frame was inlined into the next one.
    pub inlined: bool,
}

/// A code address resolved as far as the available files allow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedAddress {
    /// The runtime address (a return address, as recorded).
    pub address: u64,
    /// Id of the module containing it, `None` when no recorded module does.
    pub module: Option<u32>,
    /// That module's file name (`libnccl.so.2`).
    pub module_name: Option<Arc<str>>,
    /// Offset from the module's load bias (the raw address when no module contains it).
    pub offset: u64,
    /// Source frames, innermost first; empty when nothing names the address.
    pub frames: Arc<[SourceFrame]>,
}

impl ResolvedAddress {
    /// The innermost frame, where the call itself is written.
    pub fn innermost(&self) -> Option<&SourceFrame> {
        self.frames.first()
    }

    /// `libnccl.so.2+0x1234`, or the raw address when no module contains it.
    pub(crate) fn module_offset(&self) -> String {
        crate::units::module_offset(self.module_name.as_deref(), self.offset)
    }
}

impl fmt::Display for ResolvedAddress {
    /// The innermost function (`alloc_buffers at src/model.c:42 (libmodel.so)`), else
    /// `module+0xOFFSET`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.innermost().and_then(|s| s.function.as_deref()) {
            None => f.write_str(&self.module_offset()),
            Some(function) => {
                let frame = &self.frames[0];
                write!(f, "{function}")?;
                if let (Some(file), Some(line)) = (&frame.file, frame.line) {
                    write!(f, " at {file}:{line}")?;
                }
                match &self.module_name {
                    Some(m) => write!(f, " ({m})"),
                    None => Ok(()),
                }
            }
        }
    }
}

/// Which of a module's files its symbol table was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SymtabFile {
    Binary,
    Debug,
}

/// Which files were used for a module's symbols, or why none could be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymbolSource {
    /// The module's binary (the recorded path, or a copy with its build id).
    pub binary: Option<PathBuf>,
    /// The file whose DWARF is read: the binary itself or a separate debug file.
    pub debug_info: Option<PathBuf>,
    /// Problems met on the way (a rebuilt binary, an unreadable file), in order.
    pub notes: Vec<String>,
}

impl SymbolSource {
    /// Whether any file was found: when not, the module's addresses stay `module+0xOFFSET`.
    pub fn found(&self) -> bool {
        self.binary.is_some() || self.debug_info.is_some()
    }
}

/// The symbols of one module file, opened on first use.
#[derive(Debug)]
struct ModuleSymbols {
    source: SymbolSource,
    name: Arc<str>,
    files: ModuleFiles,
    /// Parsed on first lookup; `None` inside when there is no DWARF or it is unreadable.
    dwarf: Option<Option<DwarfInfo>>,
    /// Indexed on first lookup, with the file it was read from (its names are read there).
    symtab: Option<(SymbolTable, Option<SymtabFile>)>,
    frames: FxHashMap<u64, Arc<[SourceFrame]>>,
}

impl ModuleSymbols {
    fn open(search: &SymbolSearch, module: &Module) -> Self {
        let files = search.find(module);
        let debug = files.debug.as_ref().or(files.binary.as_ref());
        let source = SymbolSource {
            binary: files.binary.as_ref().map(|f| f.path.clone()),
            debug_info: debug.filter(|f| f.has_dwarf).map(|f| f.path.clone()),
            notes: files.notes.clone(),
        };
        ModuleSymbols {
            source,
            name: Arc::from(module.file_name()),
            files,
            dwarf: None,
            symtab: None,
            frames: FxHashMap::default(),
        }
    }

    /// The source frames at file offset `offset` of a return address, cached.
    fn frames(&mut self, offset: u64) -> Arc<[SourceFrame]> {
        if let Some(f) = self.frames.get(&offset) {
            return f.clone();
        }
        let frames: Arc<[SourceFrame]> = self.lookup(offset.wrapping_sub(1)).into();
        self.frames.insert(offset, frames.clone());
        frames
    }

    fn lookup(&mut self, probe: u64) -> Vec<SourceFrame> {
        if !self.source.found() {
            return Vec::new();
        }
        let mut frames = match self.dwarf() {
            Some(dwarf) => dwarf.frames(probe),
            None => Vec::new(),
        };
        // DWARF without a function entry here (line tables only, or no DWARF at all): the
        // symbol table names the function the code belongs to.
        let unnamed = frames.last().is_none_or(|f| f.function.is_none());
        if unnamed {
            if let Some(name) = self.symbol_name(probe) {
                match frames.last_mut() {
                    Some(last) => last.function = Some(Arc::from(name)),
                    None => frames.push(SourceFrame {
                        function: Some(Arc::from(name)),
                        file: None,
                        line: None,
                        inlined: false,
                    }),
                }
            }
        }
        frames
    }

    fn dwarf(&mut self) -> Option<&DwarfInfo> {
        if self.dwarf.is_none() {
            let file = self.files.debug.as_ref().or(self.files.binary.as_ref());
            let loaded = match file.filter(|f| f.has_dwarf).map(DwarfInfo::load) {
                Some(Ok(d)) => Some(d),
                Some(Err(e)) => {
                    self.source.notes.push(e.to_string());
                    None
                }
                None => None,
            };
            self.dwarf = Some(loaded);
        }
        self.dwarf.as_ref().and_then(Option::as_ref)
    }

    /// The symbol tables' name for file address `probe`.
    fn symbol_name(&mut self, probe: u64) -> Option<String> {
        let files = &self.files;
        let (table, from) = self.symtab.get_or_insert_with(|| {
            // The binary's tables first (the running code's own), then the debug file's
            // (`--only-keep-debug` keeps the full `.symtab` a stripped binary lost).
            for (file, which) in [
                (&files.binary, SymtabFile::Binary),
                (&files.debug, SymtabFile::Debug),
            ] {
                let Some(object) = file.as_ref().and_then(|f| f.object().ok()) else {
                    continue;
                };
                let table = SymbolTable::read(&object);
                if table.len() > 0 {
                    return (table, Some(which));
                }
            }
            (SymbolTable::default(), None)
        });
        let file = match (*from)? {
            SymtabFile::Binary => files.binary.as_ref(),
            SymtabFile::Debug => files.debug.as_ref(),
        }?;
        table.lookup(&file.object().ok()?, probe)
    }
}

/// Resolves return addresses of traced processes to source frames.
///
/// Modules are keyed by path and build id, not by their id in one trace, so a symbolizer can
/// serve several traces of the same builds (a diff, every rank of a job) and open each file once.
#[derive(Debug, Default)]
pub struct Symbolizer {
    search: SymbolSearch,
    modules: Vec<ModuleSymbols>,
    /// Path → (build id, index into `modules`).
    by_path: FxHashMap<String, Vec<(Vec<u8>, usize)>>,
}

impl Symbolizer {
    /// A symbolizer that looks for files as `search` says.
    pub fn new(search: SymbolSearch) -> Self {
        Symbolizer {
            search,
            ..Symbolizer::default()
        }
    }

    /// A symbolizer using the system debug directory and `VRAMTRACE_SYMBOL_PATH`.
    pub fn from_env() -> Self {
        Symbolizer::new(SymbolSearch::from_env())
    }

    /// Resolves `address` against the modules of a trace.
    pub fn resolve(&mut self, modules: &ModuleMap, address: u64) -> ResolvedAddress {
        let Some(module) = modules.find(address) else {
            return ResolvedAddress {
                address,
                module: None,
                module_name: None,
                offset: address,
                frames: Arc::from([]),
            };
        };
        let offset = address.wrapping_sub(module.base);
        let symbols = self.module_symbols(module);
        ResolvedAddress {
            address,
            module: Some(module.id),
            module_name: Some(symbols.name.clone()),
            offset,
            frames: symbols.frames(offset),
        }
    }

    /// Which files serve `module` (opening them if not done yet).
    pub fn source(&mut self, module: &Module) -> &SymbolSource {
        &self.module_symbols(module).source
    }

    /// The modules opened so far with their sources, in the order they were first needed.
    pub fn sources(&self) -> impl Iterator<Item = (&str, &SymbolSource)> {
        self.modules.iter().map(|m| (&*m.name, &m.source))
    }

    fn module_symbols(&mut self, module: &Module) -> &mut ModuleSymbols {
        let known = self
            .by_path
            .get(module.path.as_str())
            .and_then(|v| v.iter().find(|(id, _)| *id == module.build_id))
            .map(|&(_, i)| i);
        let index = match known {
            Some(i) => i,
            None => {
                let i = self.modules.len();
                self.modules.push(ModuleSymbols::open(&self.search, module));
                self.by_path
                    .entry(module.path.clone())
                    .or_default()
                    .push((module.build_id.clone(), i));
                i
            }
        };
        &mut self.modules[index]
    }
}
