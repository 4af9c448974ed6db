//! Attribution of allocations made from Python: a script calls `cudaMalloc` of the runtime
//! stand-in through `ctypes.PyDLL` (which keeps the GIL held during the call, so the tracer reads
//! the calling thread's Python frames), and `--by python` names the Python file, line and
//! function of each call site. (`ctypes.CDLL`, which releases the GIL, is not covered here.)

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use vramtrace_collector::symbols::{Attribution, FrameKind, Granularity};
use vramtrace_tests::source::line_of;
use vramtrace_tests::trace::Trace;
use vramtrace_tests::traced::{text, trace_files, traced_program};

use super::{symbolizer, Group};
use crate::{vramtrace_json, MIB};

/// A Python program allocating through `ctypes.PyDLL`, which keeps the GIL held during the
/// call, so the tracer captures this thread's Python frames.
const SCRIPT: &str = r#"import ctypes
import sys

runtime = ctypes.PyDLL("libcudart.so.13")
runtime.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
runtime.cudaMalloc.restype = ctypes.c_int
kept = []


def grow_cache(size):
    p = ctypes.c_void_p()
    rc = runtime.cudaMalloc(ctypes.byref(p), size)  # the cache's call site
    kept.append(p.value)
    return rc


class Model:
    def load_weights(self):
        p = ctypes.c_void_p()
        rc = runtime.cudaMalloc(ctypes.byref(p), 1 << 20)  # the weights' call site
        kept.append(p.value)
        return rc

    def forward(self):
        return grow_cache(3 << 20)  # forward calls the cache


model = Model()
sys.exit(model.load_weights() | model.forward() | grow_cache(4096))  # the entry
"#;

/// Writes [`SCRIPT`] to `dir` and runs it traced: the script's path and its one trace.
fn run_script(dir: &Path) -> (PathBuf, PathBuf) {
    let script = dir.join("allocate.py");
    std::fs::write(&script, SCRIPT).unwrap();
    let out = traced_program("python3", dir).arg(&script).output();
    let out = out.expect("running python3 (required by this test)");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let traces = trace_files(dir);
    assert_eq!(traces.len(), 1, "{traces:?}\n{}", text(&out.stderr));
    (script, traces[0].clone())
}
// `--by python` names the innermost Python line and function of each allocation: the two
// calls of grow_cache (3 MiB from Model.forward, 4096 from the module) are one line and two
// distinct calls; Model.load_weights is another line. The largest call's stack lists its
// Python frames innermost first.
captest!(python_allocations_by_python_line, |dir| {
    let (script, trace_path) = run_script(dir);
    let trace = Trace::load(&trace_path);
    trace.assert_clean("exit");
    let file = script.display().to_string();
    let line = |t: &str| line_of(&script, t);
    let cache = line("the cache's call site");
    // The owner module of a Python call is the native frame under the interpreter (libffi or
    // _ctypes, as Python was built): not compared.
    // Labelled by the file's base name; `file` is the whole path.
    let name = script.file_name().unwrap().to_string_lossy().into_owned();
    let group = |line: u32, function: &str, count, bytes, calls| Group {
        label: format!("{name}:{line} in {function}"),
        function: Some(function.into()),
        file: Some(file.clone()),
        line: Some(line),
        module: None,
        count,
        bytes,
        host_bytes: 0,
        calls,
    };
    let want = vec![
        group(cache, "grow_cache", 2, 3 * MIB + 4096, 2),
        group(
            line("the weights' call site"),
            "Model.load_weights",
            1,
            MIB,
            1,
        ),
    ];
    let no_module = |g: Group| Group { module: None, ..g };
    let mut symbols = symbolizer();
    let mut a = Attribution::of_state(&trace.state, &mut symbols);
    let got = a.group_live(&trace.state, Granularity::Python);
    assert_eq!(
        got.iter().map(Group::of).map(no_module).collect::<Vec<_>>(),
        want
    );

    let args = ["report", "--json", "--by", "python"].map(OsStr::new);
    let r = vramtrace_json(args.into_iter().chain([trace_path.as_os_str()]));
    assert_eq!(r["groups"]["by"], "python");
    let list = r["groups"]["list"].as_array().unwrap();
    let groups: Vec<Group> = list.iter().map(Group::of_json).map(no_module).collect();
    assert_eq!(groups, want);
    let want_frames: Vec<(String, u32)> = vec![
        ("grow_cache".into(), cache),
        ("Model.forward".into(), line("forward calls the cache")),
        ("<module>".into(), line("# the entry")),
    ];
    let json_frames: Vec<(String, u32)> = list[0]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "python")
        .map(|f| {
            (
                f["function"].as_str().unwrap().into(),
                f["line"].as_u64().unwrap() as u32,
            )
        })
        .collect();
    assert_eq!(json_frames, want_frames, "report --json frames");
    let frames: Vec<(String, u32)> = a
        .stack(got[0].example)
        .into_iter()
        .filter(|f| f.kind == FrameKind::Python)
        .map(|f| (f.function.unwrap_or_default(), f.line.unwrap_or(0)))
        .collect();
    assert_eq!(frames, want_frames, "Attribution::stack");
});

// The analyses group call sites by the program's Python line that made the call, on the
// program's path to it: the two calls of grow_cache (from Model.forward and from the module)
// are two places at the cache's line, each named with the line that called the helper;
// load_weights' call is another place.
captest!(python_sites_are_labelled_by_python_line, |dir| {
    let (script, trace_path) = run_script(dir);
    let args = ["report", "--json"].map(OsStr::new);
    let r = vramtrace_json(args.into_iter().chain([trace_path.as_os_str()]));
    let sites = r["analysis"]["leaks"]["sites"].as_array().unwrap();
    let labels: Vec<(String, u64, bool)> = sites
        .iter()
        .map(|s| {
            (
                s["label"].as_str().unwrap_or("null").to_string(),
                s["bytes"].as_u64().unwrap(),
                s["py_stacks_vary"].as_bool().unwrap(),
            )
        })
        .collect();
    let weights = line_of(&script, "the weights' call site");
    let cache = line_of(&script, "the cache's call site");
    let forward = line_of(&script, "forward calls the cache");
    let entry = line_of(&script, "the entry");
    assert_eq!(
        labels,
        [
            (
                format!(
                    "allocate.py:{cache} in grow_cache via allocate.py:{forward} in Model.forward"
                ),
                3 * MIB,
                false
            ),
            (
                format!("allocate.py:{weights} in Model.load_weights"),
                MIB,
                false
            ),
            (
                format!("allocate.py:{cache} in grow_cache via allocate.py:{entry} in <module>"),
                4096,
                false
            ),
        ]
    );
});

/// An installed "layers" package (under a `site-packages` directory, so its frames are a
/// library's, as `torch.nn`'s are) that allocates through `ctypes.PyDLL`.
const LAYERS: &str = r#"import ctypes

runtime = ctypes.PyDLL("libcudart.so.13")
runtime.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
runtime.cudaMalloc.restype = ctypes.c_int
runtime.cudaFree.argtypes = [ctypes.c_void_p]
runtime.cudaFree.restype = ctypes.c_int


def forward(size):
    p = ctypes.c_void_p()
    assert runtime.cudaMalloc(ctypes.byref(p), size) == 0
    return p.value


def release(p):
    assert runtime.cudaFree(p) == 0
"#;

/// A training loop without step marks: every step calls the same layers twice, once for a
/// tensor it frees, once for a tensor it keeps.
const TRAIN: &str = r#"import sys

sys.path.insert(0, sys.argv[1])
import layers

history = []
for step in range(20):
    out = layers.forward(1 << 20)  # the step's own output
    layers.release(out)
    history.append(layers.forward(1 << 20))  # kept across steps
"#;

// Both lines reach the allocator through one native path and one library function: the
// growth, its headline and the live set are named by the line whose tensors stay live, not by
// the first line that called the layers.
captest!(python_growth_is_named_at_the_line_that_keeps, |dir| {
    let packages = dir.join("lib").join("site-packages");
    std::fs::create_dir_all(&packages).unwrap();
    std::fs::write(packages.join("layers.py"), LAYERS).unwrap();
    let script = dir.join("train.py");
    std::fs::write(&script, TRAIN).unwrap();
    let out = traced_program("python3", dir)
        .arg(&script)
        .arg(&packages)
        .output()
        .expect("running python3 (required by this test)");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let traces = trace_files(dir);
    assert_eq!(traces.len(), 1, "{traces:?}");
    let kept = format!(
        "train.py:{} in <module>",
        line_of(&script, "kept across steps")
    );
    let args = ["report", "--json"].map(OsStr::new);
    let r = vramtrace_json(args.into_iter().chain([traces[0].as_os_str()]));
    let a = &r["analysis"];
    assert_eq!(
        (&a["steps"]["source"], &a["steps"]["steps"]),
        (&"pattern".into(), &20.into())
    );
    let steady = a["growth"]["steady"].as_array().unwrap();
    assert_eq!(steady.len(), 1, "{steady:#?}");
    assert_eq!(steady[0]["label"].as_str(), Some(kept.as_str()));
    assert_eq!(steady[0]["rate"].as_f64(), Some(MIB as f64));
    let leaks = a["leaks"]["sites"].as_array().unwrap();
    let live: Vec<(&str, u64)> = leaks
        .iter()
        .map(|s| (s["label"].as_str().unwrap(), s["bytes"].as_u64().unwrap()))
        .collect();
    assert_eq!(live, [(kept.as_str(), 20 * MIB)]);
    let out = vramtrace_tests::traced::vramtrace_command()
        .arg("report")
        .arg(&traces[0])
        .output()
        .unwrap();
    let report = text(&out.stdout);
    let headline = format!("STEADY GROWTH on device 0: +1.0 MiB per guessed step at {kept} (");
    assert!(report.contains(&headline), "{report}");
});
