//! Python stacks under the tracer, end to end: a Python program calls `cudaMalloc` of a minimal
//! CUDA runtime stand-in (built here with `cc`) through `ctypes.CDLL`, which releases the GIL
//! like PyTorch does, and through `ctypes.PyDLL`, which keeps it; the trace must name the exact
//! Python frames (file, qualified name, line), innermost first, on both paths, for nested calls,
//! a method, a generator, non-ASCII names, functions regenerated at run time, `threading.Thread`s
//! (also four at once while another thread churns code objects), and mark the stack of a C
//! thread that runs no Python as inferred. The program's output must not change under the
//! tracer. A last test measures what Python stacks cost per event.
//!
//! Runs with `python3` (required) and with every other CPython 3.11–3.13 found under pyenv or
//! `/usr/bin`; a 3.9 or 3.10 found there checks that an interpreter without a known layout gets
//! no raw walking. The tracer is the `libvramtrace.so` cargo built with this test. The programs
//! are in `python/scripts.rs`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use vramtrace_collector::event::{Event, Op};
use vramtrace_collector::format::{Module, PyCode, PyFrame, Record, TraceReader};

#[path = "python/scripts.rs"]
mod scripts;
use scripts::{BENCH, SCRIPT, STANDIN_C, THREADS_SCRIPT};

/// The line of `# @marker` in the script.
fn line(marker: &str) -> u32 {
    line_in(SCRIPT, marker)
}

/// The line of `# @marker` in `script`.
fn line_in(script: &str, marker: &str) -> u32 {
    let tag = format!("# @{marker}");
    script
        .lines()
        .position(|l| l.ends_with(&tag))
        .unwrap_or_else(|| panic!("no {tag} in the script")) as u32
        + 1
}

/// Where the test keeps what it builds and runs: the stand-in library and the script.
struct Fixture {
    _dir: tempfile::TempDir,
    library: PathBuf,
    script: PathBuf,
    threads_script: PathBuf,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let source = dir.path().join("standin.c");
        std::fs::write(&source, STANDIN_C).unwrap();
        let library = dir.path().join("libcudart_standin.so");
        let out = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args(["-shared", "-fPIC", "-O1", "-pthread", "-o"])
            .arg(&library)
            .arg(&source)
            .output()
            .expect("a C compiler (cc)");
        assert!(out.status.success(), "cc: {}", text(&out.stderr));
        let script = dir.path().join("alloc_sites.py");
        std::fs::write(&script, SCRIPT).unwrap();
        let threads_script = dir.path().join("alloc_threads.py");
        std::fs::write(&threads_script, THREADS_SCRIPT).unwrap();
        Fixture {
            _dir: dir,
            library,
            script,
            threads_script,
        }
    })
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The `libvramtrace.so` built with this test: `cargo test` writes it beside the test executable
/// (`target/<profile>/deps/`) and copies it to `target/<profile>/` only on `cargo build`.
fn tracer() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [deps, deps.parent().unwrap()]
        .iter()
        .map(|d| d.join("libvramtrace.so"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("no libvramtrace.so beside {}", exe.display()))
}

/// The interpreter behind a command name (pyenv's `python3` is a shell script).
fn resolve(python: &str) -> Option<PathBuf> {
    let out = Command::new(python)
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()?;
    let path = PathBuf::from(text(&out.stdout).trim());
    (out.status.success() && path.is_file()).then_some(path)
}

/// `(major, minor)` of an interpreter.
fn version(python: &Path) -> (u32, u32) {
    let out = Command::new(python)
        .args(["-c", "import sys; print(*sys.version_info[:2])"])
        .output()
        .unwrap();
    let v: Vec<u32> = text(&out.stdout)
        .split_whitespace()
        .map(|s| s.parse().unwrap())
        .collect();
    (v[0], v[1])
}

/// `python3`, then the other CPythons of minor version `minors` on this machine.
fn interpreters(minors: &[u32]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut candidates: Vec<PathBuf> = resolve("python3").into_iter().collect();
    let pyenv = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")));
    if let Some(Ok(dir)) = pyenv.map(|p| std::fs::read_dir(p.join("versions"))) {
        let mut v: Vec<PathBuf> = dir
            .flatten()
            .map(|e| e.path().join("bin/python3"))
            .collect();
        v.sort();
        candidates.extend(v);
    }
    candidates.extend(
        minors
            .iter()
            .map(|m| PathBuf::from(format!("/usr/bin/python3.{m}"))),
    );
    for c in candidates {
        let Ok(real) = c.canonicalize() else { continue };
        if found.contains(&real) || !real.is_file() {
            continue;
        }
        let (major, minor) = version(&real);
        if major == 3 && minors.contains(&minor) {
            found.push(real);
        }
    }
    found
}

/// What a traced run wrote, with names resolved.
struct Trace {
    events: Vec<Event>,
    codes: HashMap<u32, PyCode>,
    stacks: HashMap<u32, Vec<PyFrame>>,
    native: HashMap<u32, Vec<u64>>,
    modules: Vec<Module>,
}

/// A Python frame as a user reads it.
type Named = (String, String, u32);

impl Trace {
    fn read(dir: &Path) -> Trace {
        let files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "vtrace"))
            .collect();
        assert_eq!(files.len(), 1, "one trace expected: {files:?}");
        let mut t = Trace {
            events: Vec::new(),
            codes: HashMap::new(),
            stacks: HashMap::new(),
            native: HashMap::new(),
            modules: Vec::new(),
        };
        for r in TraceReader::open(&files[0]).expect("a readable trace") {
            match r {
                Record::Event(e) => t.events.push(e),
                Record::PyCode(c) => {
                    t.codes.insert(c.id, c);
                }
                Record::PyStack(s) => {
                    t.stacks.insert(s.id, s.frames);
                }
                Record::Stack(s) => {
                    t.native.insert(s.id, s.frames);
                }
                Record::Module(m) => t.modules.push(m),
                _ => {}
            }
        }
        t
    }

    /// The one allocation of `size` bytes.
    fn alloc(&self, size: u64) -> &Event {
        let found: Vec<&Event> = self
            .events
            .iter()
            .filter(|e| matches!(e.op, Op::Alloc { size: s, .. } if s == size))
            .collect();
        assert_eq!(found.len(), 1, "allocations of {size} bytes");
        found[0]
    }

    /// The native frames of an event as (object file name, offset in it), innermost first:
    /// comparable between runs whatever the load addresses.
    fn native_frames(&self, e: &Event) -> Vec<(String, u64)> {
        self.native[&e.stack]
            .iter()
            .map(|&a| {
                let m = self
                    .modules
                    .iter()
                    .find(|m| m.contains(a))
                    .unwrap_or_else(|| panic!("no module holds {a:#x}"));
                (m.file_name().to_string(), a - m.base)
            })
            .collect()
    }

    /// The Python frames of an event, innermost first.
    fn frames(&self, e: &Event) -> Vec<Named> {
        if e.py_stack == 0 {
            return Vec::new();
        }
        self.stacks[&e.py_stack]
            .iter()
            .map(|f| {
                let c = &self.codes[&f.code];
                (c.file.clone(), c.function.clone(), f.line)
            })
            .collect()
    }
}

/// Runs `script` with `python` without and with the tracer (traces in `dir`); checks that the
/// output is the same.
fn run_both(python: &Path, script: &Path, dir: &Path) -> (Trace, Output) {
    run_both_with(python, script, dir, &[])
}

/// [`run_both`] with settings `env` for the traced run.
fn run_both_with(
    python: &Path,
    script: &Path,
    dir: &Path,
    env: &[(&str, &str)],
) -> (Trace, Output) {
    let f = fixture();
    let command = || {
        let mut c = Command::new(python);
        c.arg(script).arg(&f.library).env_remove("LD_PRELOAD");
        for (k, _) in std::env::vars() {
            if k.starts_with("VRAMTRACE_") {
                c.env_remove(k);
            }
        }
        c
    };
    let plain = command().output().unwrap();
    assert!(plain.status.success(), "{}", text(&plain.stderr));
    let mut traced = command();
    traced
        .env("LD_PRELOAD", tracer())
        .env("VRAMTRACE_OUTPUT", dir.join("t-%p.vtrace"))
        .envs(env.iter().copied());
    let traced = traced.output().unwrap();
    assert_eq!(
        text(&plain.stdout),
        text(&traced.stdout),
        "{}: output differs under the tracer; stderr:\n{}",
        python.display(),
        text(&traced.stderr)
    );
    assert!(traced.status.success());
    (Trace::read(dir), plain)
}

/// The expected frames: `(function, line marker)` innermost first, all in the script.
fn expect(frames: &[(&str, &str)]) -> Vec<Named> {
    let file = fixture().script.display().to_string();
    frames
        .iter()
        .map(|&(f, m)| (file.clone(), f.to_string(), line(m)))
        .collect()
}

fn check_interpreter(python: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let (trace, plain) = run_both(python, &fixture().script, dir.path());
    assert!(text(&plain.stdout).contains("allocations 19"));
    let who = python.display();
    let own = |size: u64, want: &[(&str, &str)]| {
        let e = trace.alloc(size);
        assert!(!e.py_inferred, "{who}: {size} bytes: stack inferred");
        assert_eq!(trace.frames(e), expect(want), "{who}: {size} bytes");
    };
    for (size, main_line) in [(1001, "main_released"), (1002, "main_held")] {
        own(
            size,
            &[
                ("alloc", "alloc"),
                ("main", main_line),
                ("<module>", "module"),
            ],
        );
    }
    for (size, main_line) in [(1003, "main_nested_released"), (1004, "main_nested_held")] {
        own(
            size,
            &[
                ("alloc", "alloc"),
                ("inner", "inner"),
                ("outer", "outer"),
                ("Model.forward", "forward"),
                ("main", main_line),
                ("<module>", "module"),
            ],
        );
    }
    for (base, main_line) in [(1005, "main_gen_released"), (1007, "main_gen_held")] {
        for size in [base, base + 1] {
            own(
                size,
                &[
                    ("alloc", "alloc"),
                    ("steps", "steps"),
                    ("main", main_line),
                    ("<module>", "module"),
                ],
            );
        }
    }
    own(
        1009,
        &[
            ("alloc", "alloc"),
            ("größe", "latin1"),
            ("main", "main_names"),
            ("<module>", "module"),
        ],
    );
    for size in [1010, 1011] {
        own(
            size,
            &[
                ("alloc", "alloc"),
                ("分配", "ucs2"),
                ("main", "main_names"),
                ("<module>", "module"),
            ],
        );
    }

    // A Python thread: its own frames, down to the threading module's bootstrap.
    let e = trace.alloc(1012);
    assert!(!e.py_inferred, "{who}: thread stack inferred");
    let frames = trace.frames(e);
    assert_eq!(
        frames[..2],
        expect(&[("alloc", "alloc"), ("worker", "worker")])[..],
        "{who}"
    );
    assert!(frames.len() > 2, "{who}: {frames:?}");
    assert!(
        frames[2..]
            .iter()
            .all(|(file, _, _)| file.ends_with("threading.py")),
        "{who}: {frames:?}"
    );
    assert!(
        frames.iter().any(|(_, f, _)| f == "Thread.run"),
        "{who}: {frames:?}"
    );

    // A C thread runs no Python: it gets the last stack seen, marked inferred.
    let before = trace.alloc(1013);
    let c = trace.alloc(1014);
    assert!(
        c.py_inferred,
        "{who}: the C thread's stack is not marked inferred"
    );
    assert_ne!(c.thread, before.thread);
    assert_eq!(c.py_stack, before.py_stack, "{who}");

    // Code objects that die and are replaced, likely at the same address: each one's own lines.
    for n in 0..6u32 {
        let mut want = expect(&[
            ("alloc", "alloc"),
            ("regenerated", "regenerated"),
            ("main", "main_regenerated"),
            ("<module>", "module"),
        ]);
        want.insert(1, ("<generated>".into(), "gen".into(), n + 2));
        let e = trace.alloc(2000 + n as u64);
        assert!(!e.py_inferred);
        assert_eq!(trace.frames(e), want, "{who}: generated function {n}");
    }
}

#[test]
fn frames_are_exact_with_and_without_the_gil() {
    let pythons = interpreters(&[11, 12, 13]);
    assert!(!pythons.is_empty(), "python3 (3.11–3.13) is needed");
    for python in &pythons {
        eprintln!("checking {}", python.display());
        check_interpreter(python);
    }
}

#[test]
fn threads_allocating_together_each_get_their_own_frames() {
    for python in interpreters(&[11, 12, 13]) {
        let dir = tempfile::tempdir().unwrap();
        let (trace, _) = run_both(&python, &fixture().threads_script, dir.path());
        let file = fixture().threads_script.display().to_string();
        let want = [
            (
                file.clone(),
                "alloc".to_string(),
                line_in(THREADS_SCRIPT, "alloc"),
            ),
            (
                file,
                "worker".to_string(),
                line_in(THREADS_SCRIPT, "worker"),
            ),
        ];
        let mut threads = HashMap::new();
        for k in 0..4u64 {
            for i in 0..300 {
                let e = trace.alloc(10000 * (k + 1) + i);
                assert!(!e.py_inferred, "{}: {k}/{i}", python.display());
                let frames = trace.frames(e);
                assert_eq!(frames[..2], want, "{}: {k}/{i}", python.display());
                assert_eq!(*threads.entry(k).or_insert(e.thread), e.thread);
            }
        }
        assert_eq!(threads.len(), 4);
    }
}

/// Whether an object file is the interpreter (`libpython3.x.so`, or a `python3.x` executable
/// that links it in).
fn interpreter(file: &str) -> bool {
    file.starts_with("libpython") || file.starts_with("python")
}

/// With Python frames taken, an allocation's native stack ends at the first frame in the
/// interpreter's evaluation loop (the Python frames say the rest); with them off
/// (`VRAMTRACE_PYTHON_DEPTH=0`) the same frames come first and the walk goes on through the
/// interpreter. A free takes no Python frames, and ends at the loop as well.
#[test]
fn native_stacks_end_at_the_interpreter_when_python_frames_are_taken() {
    let python = resolve("python3").expect("python3");
    let (with, without) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (with, _) = run_both(&python, &fixture().script, with.path());
    let (without, _) = run_both_with(
        &python,
        &fixture().script,
        without.path(),
        &[("VRAMTRACE_PYTHON_DEPTH", "0")],
    );
    for size in [1001, 1002, 1003, 1004] {
        let short = with.native_frames(with.alloc(size));
        let long = without.native_frames(without.alloc(size));
        let (last, _) = short.last().unwrap();
        assert!(interpreter(last), "{size}: {short:?}");
        assert!(
            long.len() > short.len() && long[..short.len()] == short[..],
            "{size}: {short:?} against {long:?}"
        );
        // Beyond the stop, the walk without Python frames is still in the interpreter.
        assert_eq!(&long[short.len()].0, last, "{size}: {long:?}");
    }
    // Frees from Python threads end there too: a few frames of the interpreter's call
    // machinery, then the loop, never the interpreter's own callers beyond it.
    let dir = tempfile::tempdir().unwrap();
    let (threads, _) = run_both(&python, &fixture().threads_script, dir.path());
    let frees: Vec<&Event> = (threads.events.iter())
        .filter(|e| matches!(e.op, Op::Free { .. }))
        .collect();
    assert_eq!(frees.len(), 1200);
    for e in frees {
        let frames = threads.native_frames(e);
        let in_interpreter = frames.iter().filter(|(m, _)| interpreter(m)).count();
        assert!(
            in_interpreter <= 3 && interpreter(&frames.last().unwrap().0),
            "{frames:?}"
        );
    }
}

#[test]
fn interpreters_without_a_known_layout_are_not_read_raw() {
    for python in interpreters(&[9, 10]) {
        eprintln!("checking {}", python.display());
        let dir = tempfile::tempdir().unwrap();
        let (trace, _) = run_both(&python, &fixture().script, dir.path());
        // Through the C API, with the GIL: its own frames.
        let held = trace.alloc(1002);
        assert!(!held.py_inferred);
        assert_eq!(trace.frames(held)[0].1, "alloc");
        // Without the GIL: nothing of its own, only the last stack seen elsewhere.
        assert!(trace.alloc(1001).py_stack == 0 || trace.alloc(1001).py_inferred);
        assert!(trace.alloc(1003).py_inferred);
    }
}

/// Nanoseconds per `cudaMalloc` call of the benchmark script.
fn ns_per_call(python: &Path, gil: &str, env: Option<&[(&str, &str)]>) -> f64 {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("bench.py");
    std::fs::write(&script, BENCH).unwrap();
    let mut c = Command::new(python);
    c.arg(&script).arg(&f.library).arg(gil).arg("20000");
    c.env_remove("LD_PRELOAD");
    if let Some(env) = env {
        c.env("LD_PRELOAD", tracer())
            .env("VRAMTRACE_OUTPUT", dir.path().join("t-%p.vtrace"))
            .env("VRAMTRACE_STACK_DEPTH", "0")
            .env("VRAMTRACE_BUFFER_EVENTS", "1048576")
            .envs(env.iter().copied());
    }
    let out = c.output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).trim().parse().unwrap()
}

/// The cost of Python stacks per allocation event, 32 frames deep, with the GIL released (the
/// raw walk) and held (the C API): the time per call with stacks minus the time per call with
/// `VRAMTRACE_PYTHON_DEPTH=0`. Printed (run with `--nocapture`, and `--release` for the numbers
/// that matter); asserted only loosely, since the machine is shared.
#[test]
fn cost_of_python_stacks_per_event() {
    let python = resolve("python3").expect("python3");
    for gil in ["released", "held"] {
        let plain = ns_per_call(&python, gil, None);
        let without = ns_per_call(&python, gil, Some(&[("VRAMTRACE_PYTHON_DEPTH", "0")]));
        let with = ns_per_call(&python, gil, Some(&[("VRAMTRACE_PYTHON_DEPTH", "32")]));
        eprintln!(
            "GIL {gil}: {plain:.0} ns/call untraced, {without:.0} traced without Python frames, \
             {with:.0} with 32 frames: {:.0} ns per event for the Python stack",
            with - without
        );
        assert!(
            with - without < 50_000.0,
            "GIL {gil}: {with} vs {without} ns"
        );
    }
}
