//! Degraded and detoured symbolization: symbol tables without DWARF, missing files, rebuilt
//! binaries found again by build id, and separate debug files.

use std::path::{Path, PathBuf};

use vramtrace_collector::format::Module;
use vramtrace_collector::module_map::ModuleMap;
use vramtrace_collector::symbols::{ResolvedAddress, SymbolSearch, Symbolizer};

use crate::fixture::{build_id, fake_module, fixture, module, tool};

const LIB: u64 = 0x7f00_0000_0000;

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = fixture().dir.join("scratch").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn resolve_with(search: SymbolSearch, m: Module, offset: u64) -> (ResolvedAddress, Symbolizer) {
    let mut map = ModuleMap::new();
    let base = m.base;
    map.insert(m);
    let mut s = Symbolizer::new(search);
    let r = s.resolve(&map, base + offset);
    (r, s)
}

fn weights_offset() -> u64 {
    let f = fixture();
    f.frame_in("weights", &f.model)
}

/// `strip` with `flags` applied to a copy of libmodel.so in `dir`.
fn stripped(dir: &Path, flags: &[&str]) -> PathBuf {
    let out = dir.join("libmodel.so");
    std::fs::copy(&fixture().model, &out).unwrap();
    let mut args = flags.to_vec();
    args.push("libmodel.so");
    tool(dir, "strip", &args);
    out
}

#[test]
fn without_dwarf_the_symbol_table_names_the_function() {
    let dir = scratch("strip-debug");
    let path = stripped(&dir, &["--strip-debug"]);
    let (r, s) = resolve_with(
        SymbolSearch::only(vec![]),
        module(1, &path, LIB),
        weights_offset(),
    );
    assert_eq!(r.frames.len(), 1);
    assert_eq!(r.frames[0].function.as_deref(), Some("alloc_weights"));
    assert_eq!((r.frames[0].file.clone(), r.frames[0].line), (None, None));
    assert_eq!(r.to_string(), "alloc_weights (libmodel.so)");
    let source = s.sources().next().unwrap().1;
    assert_eq!(source.binary.as_deref(), Some(path.as_path()));
    assert_eq!(source.debug_info, None);
}

#[test]
fn a_fully_stripped_library_is_named_from_dynsym() {
    let dir = scratch("strip-all");
    let path = stripped(&dir, &["--strip-all"]);
    let (r, _) = resolve_with(
        SymbolSearch::only(vec![]),
        module(1, &path, LIB),
        weights_offset(),
    );
    assert_eq!(r.frames[0].function.as_deref(), Some("alloc_weights"));
}

#[test]
fn a_missing_file_degrades_to_module_plus_offset() {
    let m = fake_module(3, "/nonexistent/lib/libgone.so.2", LIB, &[0xab, 0xcd, 0xef]);
    let (r, mut s) = resolve_with(SymbolSearch::only(vec![]), m.clone(), 0x1234);
    assert!(r.frames.is_empty());
    assert_eq!(r.to_string(), "libgone.so.2+0x1234");
    let source = s.source(&m);
    assert!(!source.found());
    assert_eq!(
        source.notes,
        ["no file with build id abcdef found (looked at /nonexistent/lib/libgone.so.2 and the symbol path)"]
    );
    // An address outside every module is its raw value.
    let r = s.resolve(&ModuleMap::new(), 0x42);
    assert_eq!((r.module, r.to_string()), (None, "0x42".to_string()));
}

#[test]
fn a_rebuilt_binary_is_detected_and_the_symbol_path_copy_is_used() {
    let f = fixture();
    let recorded = scratch("rebuilt-recorded");
    let symbols = scratch("rebuilt-symbols");
    std::fs::copy(&f.model, symbols.join("libmodel.so")).unwrap();
    // The file at the recorded path is rebuilt from changed sources after the trace.
    for src in ["model.c", "probe.h"] {
        std::fs::copy(f.dir.join(src), recorded.join(src)).unwrap();
    }
    let args = [
        "-g",
        "-O0",
        "-fPIC",
        "-shared",
        "-DREBUILT",
        "-Wl,--build-id=sha1",
    ];
    let mut args = args.to_vec();
    args.extend(["model.c", "-o", "libmodel.so"]);
    tool(&recorded, "cc", &args);
    let recorded = recorded.join("libmodel.so");
    let traced = module(1, &f.model, LIB);
    assert_ne!(build_id(&recorded), traced.build_id);
    let m = Module {
        path: recorded.display().to_string(),
        ..traced.clone()
    };

    // Without the symbol path: the rebuilt file is refused, not trusted.
    let (r, _) = resolve_with(SymbolSearch::only(vec![]), m.clone(), weights_offset());
    assert_eq!(
        r.to_string(),
        format!("libmodel.so+{:#x}", weights_offset())
    );

    let (r, mut s) = resolve_with(
        SymbolSearch::only(vec![symbols.clone()]),
        m.clone(),
        weights_offset(),
    );
    let line = f.line_of("model.c", "@weights-call");
    assert_eq!(r.frames[0].function.as_deref(), Some("alloc_weights"));
    assert_eq!(r.frames[0].line, Some(line));
    let source = s.source(&m);
    assert_eq!(source.binary, Some(symbols.join("libmodel.so")));
    assert_eq!(source.notes.len(), 1);
    assert!(
        source.notes[0].starts_with(&format!("{} has build id ", recorded.display()))
            && source.notes[0].ends_with("it was rebuilt since"),
        "{:?}",
        source.notes
    );
}

#[test]
fn the_symbol_path_is_colon_separated() {
    let search = SymbolSearch::with_symbol_path("/srv/a::/srv/b".as_ref());
    assert_eq!(
        search.dirs,
        [PathBuf::from("/srv/a"), PathBuf::from("/srv/b")]
    );
    assert_eq!(search.debug_dirs, [PathBuf::from("/usr/lib/debug")]);
}

/// A stripped copy of libmodel.so in `dir`, and its debug info split off to `debug`.
fn split_debug(dir: &Path, debug: &Path) -> PathBuf {
    tool(
        dir,
        "objcopy",
        &[
            "--only-keep-debug",
            &fixture().model.display().to_string(),
            &debug.display().to_string(),
        ],
    );
    stripped(dir, &["--strip-debug"])
}

#[test]
fn separate_debug_info_is_found_by_build_id() {
    let f = fixture();
    let dir = scratch("build-id-binary");
    let symbols = scratch("build-id-symbols");
    let id = build_id(&f.model);
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let debug_dir = symbols.join(".build-id").join(&hex[..2]);
    std::fs::create_dir_all(&debug_dir).unwrap();
    let debug = debug_dir.join(format!("{}.debug", &hex[2..]));
    let binary = split_debug(&dir, &debug);
    let m = module(1, &binary, LIB);
    let (r, mut s) = resolve_with(
        SymbolSearch::only(vec![symbols]),
        m.clone(),
        weights_offset(),
    );
    assert_eq!(r.frames[0].function.as_deref(), Some("alloc_weights"));
    assert_eq!(
        r.frames[0].file.as_deref(),
        Some(f.source("model.c").as_str())
    );
    assert_eq!(
        r.frames[0].line,
        Some(f.line_of("model.c", "@weights-call"))
    );
    let source = s.source(&m);
    assert_eq!(source.binary.as_deref(), Some(binary.as_path()));
    assert_eq!(source.debug_info.as_deref(), Some(debug.as_path()));
}

#[test]
fn separate_debug_info_is_found_by_debuglink() {
    let f = fixture();
    let dir = scratch("debuglink");
    let binary = split_debug(&dir, &dir.join("libmodel.so.dbg"));
    tool(
        &dir,
        "objcopy",
        &["--add-gnu-debuglink=libmodel.so.dbg", "libmodel.so"],
    );
    let m = module(1, &binary, LIB);
    let (r, mut s) = resolve_with(SymbolSearch::only(vec![]), m.clone(), weights_offset());
    assert_eq!(
        r.frames[0].line,
        Some(f.line_of("model.c", "@weights-call"))
    );
    assert_eq!(s.source(&m).debug_info, Some(dir.join("libmodel.so.dbg")));
}

#[test]
fn a_trace_moved_elsewhere_finds_the_binary_by_build_id_layout() {
    let f = fixture();
    let symbols = scratch("debuginfod");
    let id = build_id(&f.model);
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    // debuginfod's cache layout: DIR/<build id>/executable.
    std::fs::create_dir_all(symbols.join(&hex)).unwrap();
    std::fs::copy(&f.model, symbols.join(&hex).join("executable")).unwrap();
    let m = Module {
        path: "/opt/elsewhere/lib/libmodel.so".into(),
        ..module(1, &f.model, LIB)
    };
    let (r, _) = resolve_with(SymbolSearch::only(vec![symbols]), m, weights_offset());
    assert_eq!(r.frames[0].function.as_deref(), Some("alloc_weights"));
}
