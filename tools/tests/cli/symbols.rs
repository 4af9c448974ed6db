//! `vramtrace report` naming call sites from real binaries built at test time (the collector's
//! C fixture): grouping by function, line and Python line, mixed stacks with CUDA-library
//! frames collapsed or not, and the stacks in the JSON document.

use std::path::Path;

use serde_json::{json, Value};
use vramtrace_collector::event::{Api, Event, MemKind, Op};
use vramtrace_collector::format::{PyCode, PyFrame, PyStackDef, Record, StackDef, TraceWriter};

use crate::support::{header, vramtrace, MIB};

// The tools' tests use part of the fixture's helpers.
#[allow(dead_code)]
#[path = "../../../collector/tests/symbols/fixture.rs"]
mod fixture;

use fixture::{fake_module, fixture, module};

const APP: u64 = 0x5555_0000_0000;
const MODEL: u64 = 0x7f00_0000_0000;
const INLINE: u64 = 0x7f10_0000_0000;
const CUDART: u64 = 0x7f20_0000_0000;
const CUDA: u64 = 0x7f30_0000_0000;

fn alloc(seq: u64, ptr: u64, size: u64, stack: u32, py_stack: u32) -> Record {
    Record::Event(Event {
        time_ns: seq * 1000,
        thread: 7,
        context: 0xc7,
        caller: CUDART + 0x30,
        stack,
        py_stack,
        ..Event::new(
            seq,
            Api::CudaMalloc,
            Op::Alloc {
                kind: MemKind::Device,
                ptr,
                size,
                stream: 0,
                pool: 0,
                flags: 0,
                pitch: 0,
            },
        )
    })
}

/// A trace of three live allocations, each called through libcudart and libcuda: 1 and 2 MiB
/// from `alloc_weights` under two Python lines, 4 MiB from the inlined path without Python.
fn write_trace(dir: &Path) -> std::path::PathBuf {
    let f = fixture();
    let cuda = [CUDA + 0x20, CUDART + 0x30];
    let weights = [
        MODEL + f.frame_in("weights", &f.model),
        APP + f.frame_in("weights", &f.app),
    ];
    let inlined = [
        INLINE + f.frame_in("inlined", &f.inline),
        APP + f.frame_in("inlined", &f.app),
    ];
    let code = |id: u32, function: &str| {
        Record::PyCode(PyCode {
            id,
            file: "train.py".into(),
            function: function.into(),
            first_line: 1,
        })
    };
    let py = |id: u32, line: u32| {
        Record::PyStack(PyStackDef {
            id,
            frames: vec![PyFrame { code: 1, line }, PyFrame { code: 2, line: 60 }],
        })
    };
    let records = [
        Record::Module(module(1, &f.app, APP)),
        Record::Module(module(2, &f.model, MODEL)),
        Record::Module(module(3, &f.inline, INLINE)),
        Record::Module(fake_module(
            4,
            "/usr/local/cuda/lib64/libcudart.so.13",
            CUDART,
            &[1, 2],
        )),
        Record::Module(fake_module(5, "/usr/lib/libcuda.so.1", CUDA, &[3, 4])),
        Record::Stack(StackDef {
            id: 1,
            frames: [&cuda[..], &weights].concat(),
        }),
        Record::Stack(StackDef {
            id: 2,
            frames: [&cuda[..], &inlined].concat(),
        }),
        code(1, "Model.forward"),
        code(2, "main"),
        py(1, 12),
        py(2, 14),
        alloc(1, 0x1000_0000, MIB, 1, 1),
        alloc(2, 0x2000_0000, 2 * MIB, 1, 2),
        alloc(3, 0x3000_0000, 4 * MIB, 2, 0),
    ];
    let path = dir.join("attributed.vtrace");
    let mut w = TraceWriter::new(std::fs::File::create(&path).unwrap(), &header()).unwrap();
    for r in &records {
        w.write(r).unwrap();
    }
    w.finish().unwrap();
    path
}

fn report(path: &Path, args: &[&str]) -> String {
    let out = vramtrace()
        .env_remove("VRAMTRACE_SYMBOL_PATH")
        .arg("report")
        .args(args)
        .arg(path)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    String::from_utf8(out)
        .unwrap()
        .replace(&fixture().dir.display().to_string(), "[FIXTURE]")
}

/// The report from the ranking table to the end of the stacks.
fn ranking_section(text: &str, title: &str) -> String {
    let start = text.find(title).expect("ranking table");
    let rest = &text[start..];
    let end = rest.find("\nFailures").unwrap_or(rest.len());
    rest[..end].trim_end().to_string()
}

#[test]
fn by_function_names_the_native_functions_and_prints_their_stacks() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_trace(dir.path());
    let text = report(&path, &["--by", "function"]);
    insta::assert_snapshot!(
        "report_by_function",
        ranking_section(&text, "Top functions")
    );
}

#[test]
fn by_line_names_source_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_trace(dir.path());
    let f = fixture();
    let text = report(&path, &["--by", "line"]);
    // Files by their base name in the table, as every output names a place.
    let weights = format!("model.c:{}", f.line_of("model.c", "@weights-call"));
    let inner = format!("inline.c:{}", f.line_of("inline.c", "@inner-call"));
    let section = ranking_section(&text, "Top source lines");
    let row = |label: &str| {
        section
            .lines()
            .find(|l| l.contains(&format!(" {label} ")) && l.contains("MiB"))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
    };
    assert_eq!(
        row(&inner).unwrap(),
        format!("1 4.0 MiB 0 B 1 1 {inner} libinline.so 3")
    );
    assert_eq!(
        row(&weights).unwrap(),
        format!("2 3.0 MiB 0 B 2 2 {weights} libmodel.so 1..2")
    );
}

#[test]
fn by_python_splits_python_lines_and_full_stacks_shows_cuda_frames() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_trace(dir.path());
    let text = report(&path, &["--by", "python", "--full-stacks"]);
    let section = ranking_section(&text, "Top Python lines");
    insta::assert_snapshot!("report_by_python_full", section);
}

#[test]
fn json_call_sites_and_groups_carry_stacks() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_trace(dir.path());
    let f = fixture();
    let text = report(&path, &["--json", "--by", "python"]);
    let r: Value = serde_json::from_str(&text).unwrap();
    let site = &r["call_sites"][0];
    assert_eq!(site["stack"], 2, "the 4 MiB site is stack 2");
    let native = |function: &str, file: &str, line: u32, module: &str, offset: u64, inlined| {
        json!({"kind": "native", "function": function, "file": format!("[FIXTURE]/{file}"),
               "line": line, "module": module, "offset": offset, "inlined": inlined})
    };
    let bare = |module: &str, offset: u64| {
        json!({"kind": "native", "function": null, "file": null, "line": null,
               "module": module, "offset": offset, "inlined": false})
    };
    let inline_offset = f.frame_in("inlined", &f.inline);
    let app_offset = f.frame_in("inlined", &f.app);
    assert_eq!(
        site["frames"],
        json!([
            bare("libcuda.so.1", 0x20),
            bare("libcudart.so.13", 0x30),
            native(
                "inner_alloc",
                "inline.c",
                f.line_of("inline.c", "@inner-call"),
                "libinline.so",
                inline_offset,
                true
            ),
            native(
                "alloc_inlined",
                "inline.c",
                f.line_of("inline.c", "@outer-call"),
                "libinline.so",
                inline_offset,
                false
            ),
            native(
                "main",
                "main.c",
                f.line_of("main.c", "@main-inlined"),
                "app",
                app_offset,
                false
            ),
        ])
    );
    let groups = &r["groups"];
    assert_eq!(groups["by"], "python");
    assert_eq!(groups["total"], 3);
    let second = &groups["list"][1];
    assert_eq!(second["label"], "train.py:14 in Model.forward");
    assert_eq!(
        (&second["function"], &second["file"], &second["line"]),
        (&json!("Model.forward"), &json!("train.py"), &json!(14))
    );
    assert_eq!(
        (&second["bytes"], &second["calls"]),
        (&json!(2 * MIB), &json!(1))
    );
    assert_eq!(
        second["frames"][0],
        json!({"kind": "python", "function": "Model.forward", "file": "train.py", "line": 14,
               "module": null, "offset": null, "inlined": false})
    );
    let sources: Vec<(&str, bool)> = r["symbols"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["module"].as_str().unwrap(), s["found"].as_bool().unwrap()))
        .collect();
    assert!(sources.contains(&("libinline.so", true)), "{sources:?}");
    assert!(sources.contains(&("libcudart.so.13", false)), "{sources:?}");
}

#[test]
fn without_symbols_or_python_the_groups_are_module_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = crate::support::write_workload(dir.path(), "run.vtrace");
    let text = report(&path, &["--by", "python"]);
    let section = ranking_section(&text, "Top Python lines");
    let lines: Vec<String> = section
        .lines()
        .filter(|l| !l.starts_with('─'))
        .take(6)
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        lines,
        [
            "Top Python lines by device memory (3 of 3)",
            "# bytes host objects stacks python line owner module seq",
            "1 2.0 MiB 0 B 2 1 libtorch_cuda.so+0x1234 libtorch_cuda.so 1..2",
            "2 2.0 MiB 0 B 1 1 libnccl.so.2+0x500 libnccl.so.2 8",
            "3 512.0 KiB 0 B 1 1 python3.12+0x30 python3.12 5",
            "the trace holds no Python stacks: calls are grouped by native function",
        ]
    );
}
