//! Addresses in binaries with DWARF: exact function, file and line, inlined frames included.

use vramtrace_collector::module_map::ModuleMap;
use vramtrace_collector::symbols::{ResolvedAddress, SymbolSearch, Symbolizer};

use crate::fixture::{fixture, module};

const LIB: u64 = 0x7f00_0000_0000;
const APP: u64 = 0x5555_0000_0000;

fn resolve(path: &std::path::Path, base: u64, offset: u64) -> ResolvedAddress {
    let mut map = ModuleMap::new();
    map.insert(module(1, path, base));
    let mut s = Symbolizer::new(SymbolSearch::only(vec![]));
    s.resolve(&map, base + offset)
}

/// (function, file, line, inlined) of every frame.
fn frames(r: &ResolvedAddress) -> Vec<(String, String, u32, bool)> {
    r.frames
        .iter()
        .map(|f| {
            (
                f.function.as_deref().unwrap_or("?").to_string(),
                f.file.as_deref().unwrap_or("?").to_string(),
                f.line.unwrap_or(0),
                f.inlined,
            )
        })
        .collect()
}

#[test]
fn a_call_in_a_library_names_its_function_file_and_line() {
    let f = fixture();
    let offset = f.frame_in("weights", &f.model);
    let r = resolve(&f.model, LIB, offset);
    let line = f.line_of("model.c", "@weights-call");
    assert_eq!(
        frames(&r),
        [("alloc_weights".into(), f.source("model.c"), line, false)]
    );
    assert_eq!(r.module_name.as_deref(), Some("libmodel.so"));
    assert_eq!(r.offset, offset);
    assert_eq!(
        r.to_string(),
        format!(
            "alloc_weights at {}:{line} (libmodel.so)",
            f.source("model.c")
        )
    );
}

#[test]
fn a_call_in_the_executable_names_main() {
    let f = fixture();
    let r = resolve(&f.app, APP, f.frame_in("weights", &f.app));
    let line = f.line_of("main.c", "@main-weights");
    assert_eq!(
        frames(&r),
        [("main".into(), f.source("main.c"), line, false)]
    );
}

#[test]
fn inlined_code_gives_the_inlined_function_then_its_caller() {
    let f = fixture();
    let r = resolve(&f.inline, LIB, f.frame_in("inlined", &f.inline));
    let inner = f.line_of("inline.c", "@inner-call");
    let outer = f.line_of("inline.c", "@outer-call");
    assert_eq!(
        frames(&r),
        [
            ("inner_alloc".into(), f.source("inline.c"), inner, true),
            ("alloc_inlined".into(), f.source("inline.c"), outer, false),
        ]
    );
}

#[test]
fn one_symbolizer_serves_modules_at_any_load_address() {
    let f = fixture();
    let offset = f.frame_in("weights", &f.model);
    let mut s = Symbolizer::new(SymbolSearch::only(vec![]));
    let mut first = ModuleMap::new();
    first.insert(module(1, &f.model, LIB));
    let mut second = ModuleMap::new();
    second.insert(module(7, &f.model, LIB + 0x10_0000_0000));
    let a = s.resolve(&first, LIB + offset);
    let b = s.resolve(&second, LIB + 0x10_0000_0000 + offset);
    assert_eq!(a.frames, b.frames);
    assert_eq!((a.module, b.module), (Some(1), Some(7)));
    assert_eq!(s.sources().count(), 1, "the file is opened once");
}
