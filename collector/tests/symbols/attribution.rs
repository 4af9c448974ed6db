//! Call-site keys at every granularity and mixed stacks, over a trace that points into the
//! fixture's real binaries, with Python frames above and CUDA-library frames below.

use vramtrace_collector::event::{Api, Event, MemKind, Op};
use vramtrace_collector::format::{PyCode, PyFrame, PyStackDef, Record, StackDef};
use vramtrace_collector::live::LiveState;
use vramtrace_collector::symbols::{
    collapse, Attribution, CallRef, CallSiteKey, FrameKind, Granularity, SymbolSearch, Symbolizer,
};

use crate::fixture::{fake_module, fixture, module};

const APP: u64 = 0x5555_0000_0000;
const MODEL: u64 = 0x7f00_0000_0000;
const INLINE: u64 = 0x7f10_0000_0000;
const CUDART: u64 = 0x7f20_0000_0000;
const CUDA: u64 = 0x7f30_0000_0000;
const TRACER: u64 = 0x7f40_0000_0000;

fn alloc(seq: u64, ptr: u64, size: u64, caller: u64, stack: u32, py_stack: u32) -> Record {
    Record::Event(Event {
        time_ns: seq,
        thread: 1,
        caller,
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

/// Three allocations: two from `alloc_weights` under two Python lines, one from the inlined
/// path without Python. Each native stack starts in the tracer and the CUDA libraries, and has
/// two more tracer frames between them and the program (the hook of an outer intercepted call).
fn state() -> LiveState {
    let f = fixture();
    let weights = MODEL + f.frame_in("weights", &f.model);
    let main_weights = APP + f.frame_in("weights", &f.app);
    let inlined = INLINE + f.frame_in("inlined", &f.inline);
    let main_inlined = APP + f.frame_in("inlined", &f.app);
    let cuda_frames = [
        TRACER + 0x10,
        CUDA + 0x20,
        CUDART + 0x30,
        TRACER + 0x40,
        TRACER + 0x50,
    ];
    let records = vec![
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
        Record::Module(fake_module(
            6,
            "/opt/vramtrace/libvramtrace.so",
            TRACER,
            &[5, 6],
        )),
        Record::Stack(StackDef {
            id: 1,
            frames: [&cuda_frames[..], &[weights, main_weights]].concat(),
        }),
        Record::Stack(StackDef {
            id: 2,
            frames: [&cuda_frames[..], &[inlined, main_inlined]].concat(),
        }),
        Record::PyCode(PyCode {
            id: 1,
            file: "train.py".into(),
            function: "Model.forward".into(),
            first_line: 10,
        }),
        Record::PyCode(PyCode {
            id: 2,
            file: "train.py".into(),
            function: "main".into(),
            first_line: 50,
        }),
        Record::PyStack(PyStackDef {
            id: 1,
            frames: vec![PyFrame { code: 1, line: 12 }, PyFrame { code: 2, line: 60 }],
        }),
        Record::PyStack(PyStackDef {
            id: 2,
            frames: vec![PyFrame { code: 1, line: 14 }, PyFrame { code: 2, line: 60 }],
        }),
        alloc(1, 0x1000_0000, 1 << 20, CUDART + 0x30, 1, 1),
        alloc(2, 0x2000_0000, 2 << 20, CUDART + 0x30, 1, 2),
        alloc(3, 0x3000_0000, 4 << 20, CUDART + 0x30, 2, 0),
    ];
    let mut s = LiveState::new();
    for r in &records {
        s.apply(r);
    }
    s
}

/// (label, bytes, calls) of each group, largest first.
fn groups(by: Granularity) -> Vec<(String, u64, u64)> {
    let state = state();
    let mut symbols = Symbolizer::new(SymbolSearch::only(vec![]));
    let mut a = Attribution::of_state(&state, &mut symbols);
    a.group_live(&state, by)
        .into_iter()
        .map(|g| (g.label, g.bytes, g.calls))
        .collect()
}

const MIB: u64 = 1 << 20;

#[test]
fn grouping_by_function_merges_the_python_callers() {
    assert_eq!(
        groups(Granularity::Function),
        [
            ("inner_alloc".to_string(), 4 * MIB, 1),
            ("alloc_weights".to_string(), 3 * MIB, 2),
        ]
    );
}

#[test]
fn grouping_by_line_names_the_innermost_source_line() {
    let f = fixture();
    assert_eq!(
        groups(Granularity::Line),
        [
            (
                // By the file's base name, as every output names a place.
                format!("inline.c:{}", f.line_of("inline.c", "@inner-call")),
                4 * MIB,
                1
            ),
            (
                format!("model.c:{}", f.line_of("model.c", "@weights-call")),
                3 * MIB,
                2
            ),
        ]
    );
}

#[test]
fn grouping_by_python_splits_by_line_and_falls_back_to_the_function() {
    assert_eq!(
        groups(Granularity::Python),
        [
            ("inner_alloc".to_string(), 4 * MIB, 1),
            ("train.py:14 in Model.forward".to_string(), 2 * MIB, 1),
            ("train.py:12 in Model.forward".to_string(), MIB, 1),
        ]
    );
}

// Grouping by module or site needs no symbols; a site's group is named as every output names
// the site (its largest call's Python line, else the function that asked), not by its stack id.
#[test]
fn grouping_by_module_and_site_needs_no_symbols() {
    assert_eq!(
        groups(Granularity::Module),
        [
            ("libinline.so".to_string(), 4 * MIB, 1),
            ("libmodel.so".to_string(), 3 * MIB, 2),
        ]
    );
    assert_eq!(
        groups(Granularity::Site),
        [
            ("inner_alloc at inline.c:6".to_string(), 4 * MIB, 1),
            ("train.py:14 in Model.forward".to_string(), 3 * MIB, 2),
        ]
    );
}

#[test]
fn keys_are_names_that_compare_across_traces() {
    let state = state();
    let mut symbols = Symbolizer::new(SymbolSearch::only(vec![]));
    let mut a = Attribution::of_state(&state, &mut symbols);
    let call = CallRef {
        caller: CUDART + 0x30,
        stack: 1,
        py_stack: 0,
    };
    assert_eq!(
        a.key(Granularity::Function, call),
        CallSiteKey::Function {
            function: "alloc_weights".into(),
            module: Some("libmodel.so".into()),
        }
    );
    // A caller in no known module, without a stack: its raw address.
    let unknown = CallRef {
        caller: 0x1234,
        stack: 0,
        py_stack: 0,
    };
    assert_eq!(
        a.key(Granularity::Line, unknown),
        CallSiteKey::Address {
            module: None,
            offset: 0x1234
        }
    );
}

#[test]
fn mixed_stacks_put_python_above_native_and_collapse_cuda_frames() {
    let f = fixture();
    let state = state();
    let mut symbols = Symbolizer::new(SymbolSearch::only(vec![]));
    let mut a = Attribution::of_state(&state, &mut symbols);
    let call = CallRef {
        caller: CUDART + 0x30,
        stack: 1,
        py_stack: 2,
    };
    let stack = a.stack(call);
    assert_eq!(stack[0].kind, FrameKind::Python);
    assert_eq!(stack[2].kind, FrameKind::Native);
    let lines: Vec<String> = collapse(&stack, false)
        .iter()
        .map(|l| l.to_string())
        .collect();
    let model = f.source("model.c");
    let main = f.source("main.c");
    assert_eq!(
        lines,
        [
            "train.py:14 in Model.forward".to_string(),
            "train.py:60 in main".to_string(),
            "… 2 frames in libcuda.so.1, libcudart.so.13".to_string(),
            format!(
                "alloc_weights at {model}:{} (libmodel.so)",
                f.line_of("model.c", "@weights-call")
            ),
            format!(
                "main at {main}:{} (app)",
                f.line_of("main.c", "@main-weights")
            ),
        ]
    );
    let full: Vec<String> = collapse(&stack, true)
        .iter()
        .map(|l| l.to_string())
        .collect();
    // The tracer's own frames are not in the stack at all, not even in full.
    assert_eq!(full[2..4], ["libcuda.so.1+0x20", "libcudart.so.13+0x30"]);
    assert!(full[4].starts_with("alloc_weights at "), "{full:?}");
    assert!(
        stack
            .iter()
            .all(|f| f.module.as_deref() != Some("libvramtrace.so")),
        "{stack:?}"
    );
}

#[test]
fn a_stack_of_only_tracer_frames_is_kept() {
    let mut s = LiveState::new();
    s.apply(&Record::Module(fake_module(
        6,
        "/opt/vramtrace/libvramtrace.so",
        TRACER,
        &[5, 6],
    )));
    s.apply(&Record::Stack(StackDef {
        id: 1,
        frames: vec![TRACER + 0x10, TRACER + 0x20],
    }));
    let mut symbols = Symbolizer::new(SymbolSearch::only(vec![]));
    let mut a = Attribution::of_state(&s, &mut symbols);
    let stack = a.stack(CallRef {
        caller: TRACER + 0x10,
        stack: 1,
        py_stack: 0,
    });
    let lines: Vec<String> = stack.iter().map(|f| f.to_string()).collect();
    assert_eq!(lines, ["libvramtrace.so+0x10", "libvramtrace.so+0x20"]);
}

#[test]
fn an_inlined_call_shows_both_frames() {
    let f = fixture();
    let state = state();
    let mut symbols = Symbolizer::new(SymbolSearch::only(vec![]));
    let mut a = Attribution::of_state(&state, &mut symbols);
    let stack = a.stack(CallRef {
        caller: CUDART + 0x30,
        stack: 2,
        py_stack: 0,
    });
    let src = f.source("inline.c");
    let lines: Vec<String> = collapse(&stack, false)
        .iter()
        .map(|l| l.to_string())
        .collect();
    assert_eq!(
        lines[1..3],
        [
            format!(
                "inner_alloc at {src}:{} (libinline.so) [inlined]",
                f.line_of("inline.c", "@inner-call")
            ),
            format!(
                "alloc_inlined at {src}:{} (libinline.so)",
                f.line_of("inline.c", "@outer-call")
            ),
        ]
    );
}

// The library a program called is the one past the tracer's hook: the live alert names a native
// place by it (`main → cudaMalloc (libcudart.so.13)`), never the hook in libvramtrace.so.
#[test]
fn the_library_a_program_called_is_the_one_past_the_tracers_hook() {
    let f = fixture();
    let state = state();
    let name = vramtrace_collector::analysis::site_name(&state, 0);
    assert_eq!(
        (name.program_frame, name.entry_frame),
        (MODEL + f.frame_in("weights", &f.model), CUDART + 0x30)
    );
}
