//! Attribution (issue 4): every planted leak of the stand-in workloads is named at the exact C
//! function and source line of the call that made it (the workloads are built with `-g`), through
//! the collector's [`Attribution`] and through `vramtrace report --by line|function --json`;
//! memory that NCCL, cuBLAS and the framework allocate is named by its module; allocations from
//! Python are named by the Python line and function that made them.
//!
//! Expected lines are found by searching the C source for the text written on the line
//! ([`line_of`]), so the tests follow the sources without markers in them. Python attribution is
//! in [`python`].

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use vramtrace_collector::event::Op;
use vramtrace_collector::live::{Accounting, Category, LiveObject, LiveState};
use vramtrace_collector::symbols::{
    Attribution, CallRef, CallSiteGroup, CallSiteKey, Granularity, SymbolSearch, Symbolizer,
};
use vramtrace_tests::source::{line_of, workload_source};
use vramtrace_tests::trace::{Hex, ANY};
use vramtrace_tests::traced::Workload;

use crate::{vramtrace_json, MIB};

/// Symbols from the binaries the trace names (this build's), nothing from the environment.
fn symbolizer() -> Symbolizer {
    Symbolizer::new(SymbolSearch::only(Vec::new()))
}

/// One planted leak: the live object, the function whose line calls the CUDA API, the text on
/// that line, and, when that function is a helper, the text on `main`'s line that called it.
struct Leak {
    category: Category,
    /// Pointer or handle; [`ANY`] for a static buffer (its address moves with ASLR).
    address: u64,
    bytes: u64,
    function: &'static str,
    call: &'static str,
    from_main: Option<&'static str>,
}

#[allow(clippy::too_many_arguments)]
const fn leak(
    category: Category,
    address: u64,
    bytes: u64,
    function: &'static str,
    call: &'static str,
    from_main: Option<&'static str>,
) -> Leak {
    Leak {
        category,
        address,
        bytes,
        function,
        call,
        from_main,
    }
}

impl Leak {
    fn is_host(&self) -> bool {
        self.category.accounting() == Accounting::Host
    }
}

/// A call-site group as compared: what names it, and what it holds.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Group {
    label: String,
    function: Option<String>,
    file: Option<String>,
    line: Option<u32>,
    module: Option<String>,
    /// Objects, device bytes, host bytes, distinct calls.
    count: u64,
    bytes: u64,
    host_bytes: u64,
    calls: u64,
}

impl Group {
    fn of(g: &CallSiteGroup) -> Group {
        Group {
            label: g.label.clone(),
            function: g.function.clone(),
            file: g.file.clone(),
            line: g.line,
            module: g.module.clone(),
            count: g.count,
            bytes: g.bytes,
            host_bytes: g.host_bytes,
            calls: g.calls,
        }
    }

    fn of_json(g: &Value) -> Group {
        let s = |k: &str| g[k].as_str().map(str::to_string);
        let n = |k: &str| g[k].as_u64().unwrap_or_else(|| panic!("{k} in {g}"));
        Group {
            label: s("label").expect("a label"),
            function: s("function"),
            file: s("file"),
            line: g["line"].as_u64().map(|l| l as u32),
            module: s("module"),
            count: n("count"),
            bytes: n("bytes"),
            host_bytes: n("host_bytes"),
            calls: n("calls"),
        }
    }
}

fn sorted(mut groups: Vec<Group>) -> Vec<Group> {
    groups.sort();
    groups
}

/// `vramtrace report --by <by> --json` groups of a trace: (by, total, groups).
fn report_groups(trace: &Path, by: &str) -> (String, u64, Vec<Group>) {
    let args = ["report", "--json", "--top", "100", "--by", by].map(OsStr::new);
    let r = vramtrace_json(args.into_iter().chain([trace.as_os_str()]));
    let g = &r["groups"];
    let list = g["list"].as_array().expect("groups.list");
    let by = g["by"].as_str().unwrap_or_default().to_string();
    let total = g["total"].as_u64().unwrap_or(0);
    (by, total, sorted(list.iter().map(Group::of_json).collect()))
}

/// The groups the planted leaks of `workload` must form: one per line, or one per function
/// (named after its largest leak's line; where two are equally large they share a line).
fn planted_groups(workload: &str, leaks: &[Leak], by: Granularity) -> Vec<Group> {
    let src = workload_source(&format!("{workload}.c"));
    let file = src.display().to_string();
    let mut groups: BTreeMap<String, (Group, (u64, u64))> = BTreeMap::new();
    for l in leaks {
        let line = line_of(&src, l.call);
        // A group is labelled by its file's base name; its `file` is the whole path.
        let label = match by {
            Granularity::Line => format!("{workload}.c:{line}"),
            _ => l.function.to_string(),
        };
        let (g, largest) = groups.entry(label.clone()).or_insert_with(|| {
            let group = Group {
                label,
                function: Some(l.function.to_string()),
                file: Some(file.clone()),
                line: None,
                module: Some(workload.to_string()),
                count: 0,
                bytes: 0,
                host_bytes: 0,
                calls: 0,
            };
            (group, (0, 0))
        });
        let size = if l.is_host() {
            (0, l.bytes)
        } else {
            (l.bytes, 0)
        };
        (g.count, g.calls) = (g.count + 1, g.calls + 1);
        (g.bytes, g.host_bytes) = (g.bytes + size.0, g.host_bytes + size.1);
        // A group is named after its largest call: device bytes first, then host bytes.
        if g.line.is_none() || size > *largest {
            (g.line, *largest) = (Some(line), size);
        }
    }
    sorted(groups.into_values().map(|(g, _)| g).collect())
}

/// The function, file and line each granularity must name for leak `l` of `workload`.
fn planted_keys(workload: &str, l: &Leak, file: &Arc<str>, line: u32) -> [CallSiteKey; 3] {
    let module = Some(Arc::from(workload));
    let function = Arc::from(l.function);
    [
        CallSiteKey::Line {
            file: file.clone(),
            line,
        },
        CallSiteKey::Function {
            function,
            module: module.clone(),
        },
        CallSiteKey::Module { module },
    ]
}

/// Runs `workload` traced and checks every planted leak, object by object through the
/// collector's API and grouped through `vramtrace report --by line|function --json`.
fn check_planted(dir: &Path, workload: &str, leaks: &[Leak]) {
    let trace = Workload::new(workload).run_traced(dir).single_trace();
    let state = &trace.state;
    let src = workload_source(&format!("{workload}.c"));
    let file: Arc<str> = Arc::from(src.display().to_string());
    let mut symbols = symbolizer();
    let mut a = Attribution::of_state(state, &mut symbols);
    let by = [
        Granularity::Line,
        Granularity::Function,
        Granularity::Module,
    ];
    let mut seen: Vec<(Category, Hex)> = Vec::new();
    let holding = |o: &LiveObject| {
        matches!(
            o.category.accounting(),
            Accounting::Device | Accounting::Host
        )
    };
    for o in state.live_objects().filter(holding) {
        let what = format!("{workload}: {:?} at {:#x}", o.category, o.address);
        let l = leaks
            .iter()
            .find(|l| l.category == o.category && (l.address == ANY || l.address == o.address))
            .unwrap_or_else(|| panic!("{what}: not planted"));
        seen.push((l.category, Hex(l.address)));
        assert_eq!(o.bytes, l.bytes, "{what}");
        let call = CallRef::from(o.origin);
        let line = line_of(&src, l.call);
        let keys = by.map(|g| a.key(g, call));
        assert_eq!(keys, planted_keys(workload, l, &file, line), "{what}");
        // The native stack names the helper's line, then main's line that called it.
        let mut want = vec![(l.function.to_string(), line)];
        want.extend(l.from_main.map(|t| ("main".to_string(), line_of(&src, t))));
        let frames: Vec<(String, u32)> = a
            .stack(call)
            .into_iter()
            .filter(|f| f.file.as_deref() == Some(&*file))
            .map(|f| (f.function.unwrap_or_default(), f.line.unwrap_or(0)))
            .collect();
        assert_eq!(frames, want, "{what}: frames in {file}");
    }
    seen.sort();
    let mut planted: Vec<_> = leaks.iter().map(|l| (l.category, Hex(l.address))).collect();
    planted.sort();
    assert_eq!(
        seen, planted,
        "{workload}: every planted leak is live, once"
    );

    for (by, name) in [
        (Granularity::Line, "line"),
        (Granularity::Function, "function"),
    ] {
        let want = planted_groups(workload, leaks, by);
        let got = sorted(a.group_live(state, by).iter().map(Group::of).collect());
        assert_eq!(got, want, "{workload}: Attribution::group_live by {name}");
        let (json_by, total, groups) = report_groups(&trace.path, name);
        assert_eq!((json_by.as_str(), total), (name, want.len() as u64));
        assert_eq!(groups, want, "{workload}: report --by {name} --json");
    }
}

use Category::*;

// wl_runtime: L1 through the `dmalloc` helper (its cudaMalloc line, then main's call), the
// others straight from main; L3 is host memory.
#[rustfmt::skip]
captest!(wl_runtime_leaks_at_their_functions_and_lines, |dir| {
    check_planted(dir, "wl_runtime", &[
        leak(Device, 0x7000_0000_0000, MIB, "dmalloc", "int rc = cudaMalloc(&p, n);",
             Some("void *l1 = dmalloc(1 * MiB, 0);")),
        leak(Managed, 0x7000_0010_0000, 65536, "main", "cudaMallocManaged(&l2, 65536,", None),
        leak(HostPinned, 0x4000_0000_0000, 4096, "main", "cudaMallocHost(&l3, 4096)", None),
        leak(Pitched, 0x7000_0011_0000, 10240, "main", "cudaMallocPitch(&l4, &pitch, 1000, 10)",
             None),
        leak(Array, 0x7000_0011_2800, 262144, "main", "cudaMallocArray(&l5, &f1, 256, 256, 0)",
             None),
        leak(Async, 0x7000_0015_2800, 131072, "main", "cudaMallocFromPoolAsync(&l6, 131072,", None),
    ]);
});

// wl_driver: D1 through `dalloc`, V1 and V3 through `create` (one line, two callers in main),
// the rest from main; H1 and R1 are host memory, X1 an IPC mapping of no device bytes.
#[rustfmt::skip]
captest!(wl_driver_leaks_at_their_functions_and_lines, |dir| {
    const CREATED: &str = "CALL(0, cuMemCreate(&h, size, &prop, 0)";
    check_planted(dir, "wl_driver", &[
        leak(Device, 0x7000_0000_0000, MIB, "dalloc", "CALL(want, cuMemAlloc_v2(&p, n)",
             Some("CUdeviceptr d1 = dalloc(1 * MiB, 0);")),
        leak(Pitched, 0x7000_0010_0000, 61440, "main", "cuMemAllocPitch_v2(&d2, &pitch, 3000, 20,",
             None),
        leak(Managed, 0x7000_0010_f000, 262144, "main", "cuMemAllocManaged(&d3, 262144,", None),
        leak(HostPinned, 0x4000_0000_0000, 8192, "main", "cuMemHostAlloc(&h1, 8192,", None),
        leak(HostRegistered, ANY, 16384, "main", "cuMemHostRegister_v2(r1buf, sizeof r1buf", None),
        leak(Physical, 0x1000, 2 * MIB, "create", CREATED, Some("v1 = create(2 * MiB, 0, 0)")),
        leak(Physical, 0x1002, 2 * MIB, "create", CREATED, Some("v3 = create(2 * MiB, 0, 0);")),
        leak(Async, 0x7000_0014_f000, MIB, "main", "cuMemAllocFromPoolAsync(&a1, 1 * MiB, p1,",
             None),
        leak(Ipc, 0x5000_0000_0000, 0, "main", "cuIpcOpenMemHandle(&x1, ih", None),
        leak(Array, 0x7000_0024_f000, 2 * MIB, "main", "cuArrayCreate_v2(&ar1, &ar)", None),
    ]);
});

// wl_closure: A, C, E and H, each at main's line calling through its pointer. F went through
// the unwrapped legacy 32-bit entry point, so the trace never saw it (closure.rs).
#[rustfmt::skip]
captest!(wl_closure_leaks_at_their_lines, |dir| {
    check_planted(dir, "wl_closure", &[
        leak(Device, 0x7000_0000_0000, 69632, "main", "alloc_a(&a, 69632)", None),
        leak(Device, 0x7000_0001_1000, 77824, "main", "(&c, 77824)", None),
        leak(Async, 0x7000_0002_4000, 86016, "main", "(&e, 86016, NULL)", None),
        leak(Physical, 0x1000, 4194304, "main", "(&hh, 4194304, &prop, 0)", None),
    ]);
});

/// Module groups as (module, objects, device bytes, host bytes), by name.
fn modules(groups: impl IntoIterator<Item = Group>) -> Vec<(String, u64, u64, u64)> {
    let mut v: Vec<_> = groups
        .into_iter()
        .map(|g| (g.label, g.count, g.bytes, g.host_bytes))
        .collect();
    v.sort();
    v
}

fn modules_of(state: &LiveState) -> Vec<(String, u64, u64, u64)> {
    let mut symbols = symbolizer();
    let mut a = Attribution::of_state(state, &mut symbols);
    modules(
        a.group_live(state, Granularity::Module)
            .iter()
            .map(Group::of),
    )
}

/// `report --by module --json` of a trace, as [`modules`].
fn report_modules(trace: &Path) -> Vec<(String, u64, u64, u64)> {
    let (by, _, groups) = report_groups(trace, "module");
    assert_eq!(by, "module");
    modules(groups)
}

fn module(name: &str, count: u64, bytes: u64, host: u64) -> (String, u64, u64, u64) {
    (name.to_string(), count, bytes, host)
}

// wl_train right after step 10 began: the framework holds its 2 caching segments, the 4 MiB
// registered buffer and 9 history tensors (17 MiB in 12); cuBLAS its 4 MiB workspace; NCCL its
// 2 channel buffers of 4096, 2 MiB proxy handle, 1 MiB all-reduce buffer and 4096 + 65536 of
// host memory. NCCL and cuBLAS reach the driver from inside themselves (a hidden runtime,
// dlsym), called by the framework: their memory is named after them, not the framework.
captest!(libraries_own_their_allocations_by_module, |dir| {
    let trace = Workload::new("wl_train").run_traced(dir).single_trace();
    let marks: Vec<u64> = trace
        .events
        .iter()
        .filter(|e| matches!(e.op, Op::MarkStep { .. }))
        .map(|e| e.seq)
        .collect();
    let state = trace.state_after(marks[9]);
    assert_eq!(state.steps(), 10);
    let want = [
        module("libcublas.so.13", 1, 4 * MIB, 0),
        module("libnccl.so.2", 6, 3 * MIB + 8192, 69632),
        module("libtorch_standin.so", 12, 17 * MIB, 0),
    ];
    assert_eq!(modules_of(&state), want);

    // At exit: wl_framework's leaked split communicator (README "wl_framework leak") beside the
    // framework's own four allocations (the async tensor at its 200000 requested bytes).
    let fw_dir = dir.join("framework");
    std::fs::create_dir(&fw_dir).unwrap();
    let fw = Workload::new("wl_framework").arg("leak");
    let fw = fw.run_traced(&fw_dir).single_trace();
    let want = [
        module("libnccl.so.2", 6, 3153920, 69632),
        module("libtorch_standin.so", 4, 6 * MIB + 200000, 0),
    ];
    assert_eq!(modules_of(&fw.state), want);
    assert_eq!(report_modules(&fw.path), want);

    // wl_cublas: the workspace of the handle never destroyed, taken by libcublas through dlsym.
    let blas_dir = dir.join("cublas");
    std::fs::create_dir(&blas_dir).unwrap();
    let blas = Workload::new("wl_cublas")
        .run_traced(&blas_dir)
        .single_trace();
    let want = [module("libcublas.so.13", 1, 4 * MIB, 0)];
    assert_eq!(modules_of(&blas.state), want);
    assert_eq!(report_modules(&blas.path), want);
});

mod python;
