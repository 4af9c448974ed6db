//! `vramtrace run`'s Python hooks end to end, on the PyTorch stand-in (`tests/standins/torch/`,
//! installed as `<dir>/site-packages/torch`) over the CUDA runtime stand-in: steps from optimizer
//! steps (one per iteration with several optimizers), the user's own `sitecustomize` still run,
//! PyTorch's allocator settings and memory history landing in the trace and read back per
//! Python line with exact bytes, `--per-tensor`'s allocator backend, the history handed over at
//! an out-of-memory error by a process that dies right after, and nothing at all for a program
//! that never imports torch. Each program's output is the same with and without vramtrace.
//!
//! An optional last test runs a real PyTorch (CPU) when `VRAMTRACE_TEST_TORCH_PYTHON` names an
//! interpreter that has it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use vramtrace_collector::event::{MemKind, Op};
use vramtrace_collector::torch::{TensorHistory, TensorView, TorchView};
use vramtrace_tests::standin_ld_library_path;
use vramtrace_tests::trace::Trace;
use vramtrace_tests::traced::{text, trace_files, vramtrace_command};

use crate::{vramtrace_json, MIB};

/// The line of `# @marker` in `script`.
fn line_of(script: &str, marker: &str) -> u32 {
    let tag = format!("# @{marker}");
    script
        .lines()
        .position(|l| l.ends_with(&tag))
        .unwrap_or_else(|| panic!("no {tag}")) as u32
        + 1
}

/// A leak in a loop of 5 steps: each step makes a 2 MiB activation and drops it, and keeps a
/// 1 MiB tensor; a 4 MiB weight is made before the loop.
const TRAIN: &str = r#"import sys
import torch

weight = torch.empty(4 << 20)  # @weight
opt = torch.optim.SGD([weight])
kept = []
for step in range(5):
    act = torch.empty(2 << 20)  # @activation
    kept.append(torch.empty(1 << 20))  # @kept
    del act
    opt.step()
print("trained", len(kept), "steps")
"#;

/// A loop of 12 steps that keeps nothing (`diff`'s run A).
const HEALTHY: &str = r#"import torch

weight = torch.empty(4 << 20)
opt = torch.optim.SGD([weight])
for step in range(12):
    act = torch.empty(2 << 20)
    del act
    opt.step()
print("done")
"#;

/// The same with two lines inserted above the loop and one in it that keeps 2 MiB a step
/// (`diff`'s run B).
const LEAKY: &str = r#"import torch

weight = torch.empty(4 << 20)
opt = torch.optim.SGD([weight])
kept = []
# every line below moves
for step in range(12):
    act = torch.empty(2 << 20)  # @moved
    kept.append(torch.empty(2 << 20))  # @added
    del act
    opt.step()
print("done")
"#;

/// A GAN's two optimizers, in either order, 7 iterations, on the CPU.
const GAN: &str = r#"import torch

d = torch.optim.SGD([])
g = torch.optim.SGD([])
for i in range(7):
    first, second = (d, g) if i % 2 == 0 else (g, d)
    first.step()
    second.step()
print("gan done")
"#;

/// An inference server's loop: no optimizer, 6 requests, each one call of a model whose inner
/// module makes the 1 MiB answer the cache keeps, beside a 2 MiB scratch tensor it drops.
const INFER: &str = r#"import torch


class Inner(torch.nn.Module):
    def forward(self, n):
        return torch.empty(n)  # @answer


class Model(torch.nn.Module):
    def __init__(self):
        self.inner = Inner()

    def forward(self, n):
        scratch = torch.empty(2 << 20)
        del scratch
        return self.inner(n)


model = Model()
cache = {}
for request in range(6):
    cache[request] = model(1 << 20)
print("answered", len(cache))
"#;

/// A model called twice before its optimizer is made (a warm-up), then trained for 5 steps.
const WARM_TRAIN: &str = r#"import torch


class Model(torch.nn.Module):
    def forward(self, n):
        return torch.empty(n)


model = Model()
model(4096)
model(4096)
opt = torch.optim.SGD([])
kept = []
for step in range(5):
    kept.append(model(1 << 20))
    opt.step()
print("trained", len(kept))
"#;

/// A loop of 40 steps keeping 1 MiB a step (and dropping a 2 MiB temporary), 20 ms a step: the
/// stand-in allocator charges its 8 MiB segments to whichever of the two lines needs one.
const ALERTED: &str = r#"import time
import torch

opt = torch.optim.SGD([])
kept = []
for step in range(40):
    tmp = torch.empty(2 << 20)
    kept.append(torch.empty(1 << 20))  # @alert_kept
    del tmp
    opt.step()
    time.sleep(0.02)
print("done", len(kept))
"#;

/// ALERTED's leak in 20 quick steps, then an exit that lingers: a handler registered before
/// torch (so run after the hooks' own, which hand over the history) sleeps 2.5 s, in which the
/// live analysis judges the run for the first time since its first step.
const ALERTED_LATE: &str = r#"import atexit
import time

atexit.register(time.sleep, 2.5)
import torch

opt = torch.optim.SGD([])
kept = []
for step in range(20):
    tmp = torch.empty(2 << 20)
    kept.append(torch.empty(1 << 20))  # @late_kept
    del tmp
    opt.step()
    time.sleep(0.01)
print("done", len(kept))
"#;

/// ALERTED_LATE's leak kept by a model's calls, the model called twice before its optimizer is
/// made: three of its calls mark iterations before the first optimizer step.
const ALERTED_WARM: &str = r#"import atexit
import time

atexit.register(time.sleep, 2.5)
import torch


class Model(torch.nn.Module):
    def forward(self, n):
        return torch.empty(n)


model = Model()
model(4096)
model(4096)
opt = torch.optim.SGD([])
kept = []
for step in range(20):
    tmp = torch.empty(2 << 20)
    kept.append(model(1 << 20))  # @warm_kept
    del tmp
    opt.step()
    time.sleep(0.01)
print("done", len(kept))
"#;

/// A leak through the script's own helper: every tensor comes from `make`, called for one to
/// three 2 MiB temporaries a step and, from step 20 of 40, for a 1 MiB tensor the list keeps.
/// `make`'s line is every tensor's; the line that keeps the memory is `helper_kept`.
const HELPER: &str = r#"import os
import torch

kept = []
KEEP_FROM = int(os.environ.get("KEEP_FROM", "20"))


def make(n):
    return torch.empty(n)  # @helper_make


opt = torch.optim.SGD([])
for step in range(40):
    tmp = [make(2 << 20) for _ in range(1 + step % 3)]  # @helper_temporaries
    if step >= KEEP_FROM:
        kept.append(make(1 << 20))  # @helper_kept
    del tmp
    opt.step()
print("helper done", len(kept))
"#;

/// Runs `helper.py` as `python -m` or a wrapper script would: its frames are in the stacks of one
/// run only.
const LAUNCH: &str = r#"import os
import runpy

here = os.path.dirname(os.path.abspath(__file__))
runpy.run_path(os.path.join(here, "helper.py"), run_name="__main__")
"#;

/// A helper that keeps every tensor it makes, called from three lines a step (64, 128 and 256
/// KiB): the helper's line keeps the memory on every path. With `HELPER_KEEP=0` it keeps
/// nothing (the three paths hold the last step's tensors).
const HELPER_KEEPS: &str = r#"import os
import torch

CACHE = []
KEEP = os.environ.get("HELPER_KEEP", "1") == "1"


def make(n):
    t = torch.empty(n)  # @keeps_make
    if KEEP:
        CACHE.append(t)
    return t


opt = torch.optim.SGD([])
for step in range(40):
    a = make(1 << 16)
    b = make(1 << 17)
    c = make(1 << 18)
    opt.step()
print("cached", len(CACHE))
"#;

/// No tensor kept: a 2 MiB temporary a step, which the stand-in allocator never reuses, so the
/// driver sees its segments grow 2 MiB a step while PyTorch's tensors stay flat (a cache
/// warming up, as a real caching allocator's does over a run's first steps).
const CACHE_GROWS: &str = r#"import time
import torch

opt = torch.optim.SGD([])
for step in range(40):
    tmp = torch.empty(2 << 20)
    del tmp
    opt.step()
    time.sleep(0.02)
print("done")
"#;

/// No torch at all.
const PLAIN: &str = r#"import sys
print("hello", "torch" in sys.modules, "ctypes" in sys.modules)
"#;

/// Three tensors kept, then an out-of-memory error, caught, and a hard exit (no atexit, no
/// library destructors: only what was written before survives).
const OOM: &str = r#"import os
import torch

kept = []
for _ in range(3):
    kept.append(torch.empty(1 << 20))  # @oom_kept
try:
    torch.empty(2 << 30)
except torch.cuda.OutOfMemoryError as e:
    print("caught:", e)
    os._exit(3)
"#;

/// A thread still allocating when the main thread leaves, and an exit handler registered before
/// CUDA starts (so it runs after the hooks' hand-over) that prints the interpreter's switch
/// interval: the hand-over leaves the interpreter as it found it.
const BUSY_EXIT: &str = r#"import atexit
import sys
import threading
import torch

atexit.register(lambda: print("switch interval", sys.getswitchinterval()))
kept = [torch.empty(1 << 20) for _ in range(3)]
opt = torch.optim.SGD([])
for _ in range(3):
    opt.step()


def busy():
    while True:
        x = torch.empty(1 << 16)
        del x


threading.Thread(target=busy, daemon=True).start()
print("leaving")
"#;

/// A fresh directory with the torch stand-in installed, a user `sitecustomize` that says it ran,
/// and the scripts.
struct Setup {
    dir: PathBuf,
    python_path: String,
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &target);
        } else if e.path().extension().is_some_and(|x| x == "py") {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

fn setup(dir: &Path) -> Setup {
    let standin = Path::new(env!("CARGO_MANIFEST_DIR")).join("standins/torch/torch");
    let site = dir.join("site-packages");
    copy_dir(&standin, &site.join("torch"));
    let user = dir.join("user");
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(
        user.join("sitecustomize.py"),
        "print(\"user sitecustomize ran\")\n",
    )
    .unwrap();
    for (name, script) in [
        ("train.py", TRAIN),
        ("gan.py", GAN),
        (
            "gan_gpu.py",
            &GAN.replacen(
                "import torch\n",
                "import torch\n\nz = torch.empty(1 << 20)\n",
                1,
            ),
        ),
        ("plain.py", PLAIN),
        ("oom.py", OOM),
        ("busy_exit.py", BUSY_EXIT),
        ("healthy.py", HEALTHY),
        ("leaky.py", LEAKY),
        ("infer.py", INFER),
        ("warm_train.py", WARM_TRAIN),
        ("alerted.py", ALERTED),
        ("alerted_late.py", ALERTED_LATE),
        ("alerted_warm.py", ALERTED_WARM),
        ("cache_grows.py", CACHE_GROWS),
        ("helper.py", HELPER),
        ("launch.py", LAUNCH),
        ("helper_keeps.py", HELPER_KEEPS),
    ] {
        std::fs::write(dir.join(name), script).unwrap();
    }
    std::fs::create_dir_all(dir.join("out")).unwrap();
    Setup {
        dir: dir.to_path_buf(),
        python_path: format!("{}:{}", site.display(), user.display()),
    }
}

impl Setup {
    fn plain(&self, script: &str) -> Output {
        Command::new("python3")
            .arg(self.dir.join(script))
            .env("PYTHONPATH", &self.python_path)
            .env("LD_LIBRARY_PATH", standin_ld_library_path())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env_remove("PYTORCH_ALLOC_CONF")
            .env_remove("PYTORCH_CUDA_ALLOC_CONF")
            .current_dir(&self.dir)
            .output()
            .unwrap()
    }

    fn traced(&self, script: &str, flags: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = vramtrace_command();
        c.arg("run")
            .args(flags)
            .arg("-o")
            .arg(self.dir.join("out/t-%p.vtrace"))
            .arg("--")
            .arg("python3")
            .arg(self.dir.join(script))
            .env("PYTHONPATH", &self.python_path)
            .env("LD_LIBRARY_PATH", standin_ld_library_path())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env_remove("PYTORCH_ALLOC_CONF")
            .env_remove("PYTORCH_CUDA_ALLOC_CONF")
            .current_dir(&self.dir);
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    }

    /// `diff --json` of two traced runs, A then B (each a script and its environment), which
    /// must exit 1: B a regression.
    fn diff_of_runs(
        &self,
        flags: &[&str],
        runs: [(&str, &[(&str, &str)]); 2],
    ) -> serde_json::Value {
        let out = self.dir.join("out");
        let mut traces = Vec::new();
        for (n, (script, env)) in runs.into_iter().enumerate() {
            std::fs::remove_dir_all(&out).unwrap();
            std::fs::create_dir_all(&out).unwrap();
            let mut env = env.to_vec();
            env.push(("VRAMTRACE_ALERT_INTERVAL_MS", "600000"));
            let traced = self.traced(script, flags, &env);
            assert_eq!(traced.status.code(), Some(0), "{}", text(&traced.stderr));
            let files = trace_files(&out);
            let kept = self.dir.join(format!("run{n}.vtrace"));
            std::fs::rename(&files[0], &kept).unwrap();
            traces.push(kept);
        }
        let mut c = vramtrace_command();
        c.args(["diff", "--json"]).args(&traces);
        let diffed = c.output().unwrap();
        assert_eq!(diffed.status.code(), Some(1), "{}", text(&diffed.stderr));
        serde_json::from_slice(&diffed.stdout).unwrap()
    }

    fn trace(&self) -> Trace {
        let files = trace_files(&self.dir.join("out"));
        assert_eq!(files.len(), 1, "{files:?}");
        Trace::load(&files[0])
    }
}

fn iterations(t: &Trace) -> Vec<u64> {
    t.events
        .iter()
        .filter_map(|e| match e.op {
            Op::MarkIteration { n } => Some(n),
            _ => None,
        })
        .collect()
}

fn marks(t: &Trace) -> Vec<u64> {
    t.events
        .iter()
        .filter(|e| matches!(e.op, Op::MarkStep { .. }))
        .map(|e| e.time_ns)
        .collect()
}

/// The line `file:N in <module>` of a script in the setup's directory.
fn at(s: &Setup, script: &str, line: u32) -> String {
    format!("{}:{line} in <module>", s.dir.join(script).display())
}

/// The reason of each history PyTorch handed over, in the order of the trace.
fn snapshot_reasons(t: &Trace) -> Vec<String> {
    t.state
        .attachments()
        .of_kind(vramtrace_collector::torch::KIND_SNAPSHOT)
        .iter()
        .map(|a| {
            let v: serde_json::Value = serde_json::from_slice(&a.data).unwrap();
            v["reason"].as_str().unwrap().to_string()
        })
        .collect()
}

/// The live-alert settings of these tests: a 512 KiB threshold, confirmed over 5 steps, judged
/// at most every `interval_ms`.
fn alerting(interval_ms: &'static str) -> [(&'static str, &'static str); 3] {
    [
        ("VRAMTRACE_ALERT_INTERVAL_MS", interval_ms),
        ("VRAMTRACE_ALERT_CONFIRM", "5"),
        ("VRAMTRACE_ALERT_THRESHOLD", "512KiB"),
    ]
}

/// Runs `script` traced with `env`, checks that it exited 0 and printed what it prints untraced,
/// and returns the ALERT lines of its stderr with the whole stderr.
fn alerts_of(s: &Setup, script: &str, env: &[(&str, &str)]) -> (Vec<String>, String) {
    let traced = s.traced(script, &[], env);
    assert_eq!(traced.status.code(), Some(0), "{}", text(&traced.stderr));
    assert_eq!(text(&traced.stdout), text(&s.plain(script).stdout));
    let err = text(&traced.stderr);
    let alerts = err
        .lines()
        .filter(|l| l.starts_with("vramtrace: ALERT"))
        .map(str::to_string)
        .collect();
    (alerts, err)
}

// The leak program: its output (with the user's sitecustomize first) is unchanged, each
// optimizer step marks a step, the allocator settings are those of the run, and the history
// handed over at exit names the kept tensors' line with 5 MiB in 5 tensors, growing 1 MiB a
// step, beside the 4 MiB weight made before the loop.
captest!(torch_steps_settings_and_tensor_history, |dir| {
    let s = setup(dir);
    let plain = s.plain("train.py");
    let conf = [("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64")];
    let traced = s.traced("train.py", &[], &conf);
    assert_eq!(traced.status.code(), Some(0), "{}", text(&traced.stderr));
    assert_eq!(
        text(&plain.stdout),
        "user sitecustomize ran\ntrained 5 steps\n"
    );
    assert_eq!(text(&traced.stdout), text(&plain.stdout));
    assert!(
        !text(&traced.stderr).contains("warning"),
        "{}",
        text(&traced.stderr)
    );

    let t = s.trace();
    let marks = marks(&t);
    assert_eq!(marks.len(), 5);
    let view = TorchView::read(t.state.attachments(), None);
    assert!(view.problems.is_empty(), "{:?}", view.problems);
    let config = view.config.as_ref().expect("the allocator settings");
    assert_eq!(config.backend.as_deref(), Some("native"));
    assert_eq!(config.torch_version, "2.11.0+standin");
    assert_eq!(config.alloc_conf.as_deref(), Some("max_split_size_mb:64"));
    assert_eq!(
        config.alloc_conf_variable.as_deref(),
        Some("PYTORCH_CUDA_ALLOC_CONF")
    );
    assert_eq!(config.recorder.state, "on");
    assert_eq!(config.recorder.max_entries, 100_000);
    assert_eq!(view.tensor_view(), Some(TensorView::Recorder));

    let snapshot = view.snapshot.as_ref().expect("the history at exit");
    assert_eq!(snapshot.reason, "exit");
    assert_eq!(snapshot.alloc_conf.as_deref(), Some("max_split_size_mb:64"));
    assert!(!snapshot.ring_full());
    let mut tensors = TensorHistory::new(snapshot);
    assert_eq!(tensors.unmatched(), 0);
    // Weight, 5 activations, 5 kept.
    assert_eq!(tensors.tensors().len(), 11);
    let named = |frame: Option<u32>| frame.map(|f| snapshot.frames[f as usize].to_string());
    let end: Vec<(Option<String>, u64, u64)> = tensors
        .live_at_end()
        .into_iter()
        .map(|l| (named(l.frame), l.bytes, l.count))
        .collect();
    let kept = at(&s, "train.py", line_of(TRAIN, "kept"));
    let weight = at(&s, "train.py", line_of(TRAIN, "weight"));
    assert_eq!(
        end,
        [
            (Some(kept.clone()), 5 * MIB, 5),
            (Some(weight.clone()), 4 * MIB, 1)
        ]
    );
    // The payload carries the same marks on torch's clock (the trace's event times come from a
    // calibrated cycle counter, within a millisecond of them on an idle machine; the clocks'
    // anchor is two readings, which a loaded machine can part by a few milliseconds).
    let steps: Vec<u64> = snapshot.step_marks.iter().map(|m| m.step).collect();
    assert_eq!(steps, [1, 2, 3, 4, 5]);
    let clock = snapshot.clock.unwrap();
    for (m, &trace_ns) in snapshot.step_marks.iter().zip(&marks) {
        let ns = clock.trace_ns(m.time_us);
        assert!(ns.abs_diff(trace_ns) < 25_000_000, "{ns} vs {trace_ns}");
    }
    // The marks come after each optimizer step: the first iteration's tensor is before the
    // first mark, the next four fall one in each step, the last step (to the end) has none.
    let growth = tensors.survivor_growth_at_marks();
    assert_eq!(named(growth[0].frame), Some(kept.clone()));
    assert_eq!(growth[0].before, MIB);
    assert_eq!(growth[0].per_step, [MIB, MIB, MIB, MIB, 0]);
    assert_eq!(
        (growth[0].steps_measured, growth[0].bytes_per_step),
        (4, MIB as f64)
    );
    assert_eq!(named(growth[1].frame), Some(weight.clone()));
    assert_eq!((growth[1].before, growth[1].bytes_per_step), (4 * MIB, 0.0));
    // Over time: at each mark, the weight, the kept tensors so far, no activation.
    let series = tensors.series_at_marks();
    let totals: Vec<u64> = (1..=5).map(|k| (4 + k) * MIB).collect();
    assert_eq!(series.total, totals);
    assert_eq!(series.complete_from, 0);

    // The report names the allocator configuration and the recorder's view.
    let files = trace_files(&s.dir.join("out"));
    let r = vramtrace_json(["report".as_ref(), "--json".as_ref(), files[0].as_os_str()]);
    let a = &r["allocator"];
    assert_eq!(a["backend"], "native");
    assert_eq!(a["alloc_conf"], "max_split_size_mb:64");
    assert_eq!(a["alloc_conf_variable"], "PYTORCH_CUDA_ALLOC_CONF");
    assert_eq!(a["tensor_view"], "recorder");
    assert_eq!(a["recorder"]["snapshot"], "exit");
    assert_eq!(a["recorder"]["live_tensors"], 6);
    assert_eq!(a["recorder"]["live_bytes"], 9 * MIB);
    assert_eq!(a["recorder"]["by_line"][0]["line"], kept.as_str());
    assert_eq!(a["recorder"]["by_line"][0]["bytes"], 5 * MIB);
    assert_eq!(r["events"]["steps"], 5);
    // The recorder's view judges growth per line beside the driver's: the kept line grows by
    // 1 MiB a step in tensors, and the headline and the first finding name it.
    let g = &r["analysis"]["growth"];
    let rows: Vec<(&str, &str, f64)> = g["steady"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let label = s["label"].as_str().unwrap();
            (
                s["view"].as_str().unwrap(),
                label,
                s["rate"].as_f64().unwrap(),
            )
        })
        .collect();
    let kept_label = format!("train.py:{} in <module>", line_of(TRAIN, "kept"));
    assert!(
        rows.contains(&("allocator", kept_label.as_str(), MIB as f64)),
        "{rows:?}"
    );
    let first = &r["analysis"]["diagnosis"][0];
    assert_eq!(first["site"]["label"].as_str(), Some(kept_label.as_str()));
    assert_eq!(first["evidence"]["view"], "allocator");
    let out = vramtrace_command()
        .arg("report")
        .arg(&files[0])
        .output()
        .unwrap();
    let report = text(&out.stdout);
    let headline = format!("+1.0 MiB per step at {kept_label} (");
    assert!(report.contains(&headline), "{report}");
    assert!(
        report.contains(
            "  allocator PyTorch 2.11.0+standin caching allocator (native), \
             PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64; tensors: PyTorch's recorder \
             (all 24 allocator actions), 9.0 MiB in 6 tensors live at exit\n"
        ),
        "{report}"
    );
});

// Two optimizers stepping once each per iteration, in either order, mark one step per
// iteration.
// On the CPU the program made no GPU memory call, only the hooks' step marks: no trace is left,
// and `run` says why.
captest!(two_optimizers_mark_one_step_per_iteration, |dir| {
    let s = setup(dir);
    let traced = s.traced("gan_gpu.py", &[], &[]);
    assert_eq!(traced.status.code(), Some(0), "{}", text(&traced.stderr));
    assert_eq!(text(&traced.stdout), text(&s.plain("gan_gpu.py").stdout));
    let t = s.trace();
    assert_eq!(marks(&t).len(), 7);
    std::fs::remove_dir_all(s.dir.join("out")).unwrap();
    let traced = s.traced("gan.py", &[], &[]);
    assert_eq!(traced.status.code(), Some(0), "{}", text(&traced.stderr));
    assert_eq!(text(&traced.stdout), text(&s.plain("gan.py").stdout));
    assert!(trace_files(&s.dir.join("out")).is_empty());
    assert!(
        text(&traced.stderr).contains("the program made no GPU memory call (no trace written)"),
        "{}",
        text(&traced.stderr)
    );
});

// A program that never imports torch: the same output, torch and ctypes never imported, no
// trace at all (it made no GPU call and marked no step).
captest!(a_program_without_torch_is_untouched, |dir| {
    let s = setup(dir);
    let plain = s.plain("plain.py");
    let traced = s.traced("plain.py", &[], &[]);
    assert_eq!(traced.status.code(), Some(0), "{}", text(&traced.stderr));
    assert_eq!(
        text(&plain.stdout),
        "user sitecustomize ran\nhello False False\n"
    );
    assert_eq!(text(&traced.stdout), text(&plain.stdout));
    assert!(trace_files(&s.dir.join("out")).is_empty());
    // Without the hooks the program is the same again.
    let bare = s.traced("plain.py", &["--no-python-hooks"], &[]);
    assert_eq!(text(&bare.stdout), text(&plain.stdout));
});

// `--per-tensor`: the program runs with the cudaMallocAsync backend (added to the settings it
// had), every tensor is a driver allocation (the weight, 5 activations, 5 kept; all freed when
// the interpreter tears the module down), and the report says so.
captest!(per_tensor_runs_the_async_backend, |dir| {
    let s = setup(dir);
    let conf = [("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")];
    let traced = s.traced("train.py", &["--per-tensor"], &conf);
    assert_eq!(traced.status.code(), Some(0), "{}", text(&traced.stderr));
    assert_eq!(text(&traced.stdout), text(&s.plain("train.py").stdout));
    let t = s.trace();
    let view = TorchView::read(t.state.attachments(), None);
    let config = view.config.as_ref().unwrap();
    assert_eq!(config.backend.as_deref(), Some("cudaMallocAsync"));
    assert_eq!(
        config.alloc_conf.as_deref(),
        Some("expandable_segments:True,backend:cudaMallocAsync")
    );
    assert_eq!(
        config.alloc_conf_variable.as_deref(),
        Some("PYTORCH_ALLOC_CONF")
    );
    assert_eq!(config.recorder.state, "not available with this backend");
    assert!(view.snapshot.is_none());
    assert_eq!(view.tensor_view(), Some(TensorView::Driver));
    let mut sizes: Vec<u64> = t
        .events
        .iter()
        .filter_map(|e| match e.op {
            Op::Alloc {
                kind: MemKind::Async,
                size,
                ..
            } => Some(size),
            _ => None,
        })
        .collect();
    sizes.sort();
    let mut want = vec![MIB; 5];
    want.extend([2 * MIB; 5]);
    want.push(4 * MIB);
    assert_eq!(sizes, want);
    let files = trace_files(&s.dir.join("out"));
    let r = vramtrace_json(["report".as_ref(), "--json".as_ref(), files[0].as_os_str()]);
    assert_eq!(r["allocator"]["tensor_view"], "driver");
    assert_eq!(r["allocator"]["backend"], "cudaMallocAsync");
});

// A helper's line reached from two lines of the script is named with the line whose call made
// what stays live, by the tracer's call sites (`--per-tensor`: every tensor a driver allocation;
// the report's finding and the alert at exit) and by PyTorch's recorder (the report's finding)
// alike; the rate is the kept tensors' own, whatever the temporaries do.
captest!(
    a_helper_s_line_is_named_with_the_line_that_called_it,
    |dir| {
        let s = setup(dir);
        let plain = s.plain("helper.py");
        assert_eq!(
            text(&plain.stdout),
            "user sitecustomize ran\nhelper done 20\n"
        );
        let place = format!(
            "helper.py:{} in make via helper.py:{} in <module>",
            line_of(HELPER, "helper_make"),
            line_of(HELPER, "helper_kept")
        );
        // The alert at exit is the tracer's own judgement (`--per-tensor`); with the recorder it
        // hangs on the stand-in allocator's segments, which never reuse a block.
        for (flags, view, alerted) in [
            (
                &["--per-tensor"][..],
                "driver",
                Some(format!(
                    "+1.0 MiB per step at {place} (libtorch_standin.so)"
                )),
            ),
            (&[][..], "allocator", None),
        ] {
            let out = s.dir.join("out");
            std::fs::remove_dir_all(&out).unwrap();
            std::fs::create_dir_all(&out).unwrap();
            // Judged once, at exit, over the whole run (a judgement before it would leave the exit
            // only the steps since).
            let traced = s.traced(
                "helper.py",
                flags,
                &[("VRAMTRACE_ALERT_INTERVAL_MS", "600000")],
            );
            assert_eq!(traced.status.code(), Some(0), "{}", text(&traced.stderr));
            assert_eq!(text(&traced.stdout), text(&plain.stdout));
            if let Some(alerted) = alerted {
                let err = text(&traced.stderr);
                let alerts: Vec<&str> = (err.lines())
                    .filter(|l| l.starts_with("vramtrace: ALERT"))
                    .collect();
                assert_eq!(alerts.len(), 1, "{err}");
                assert!(alerts[0].contains(&alerted), "{view}: {}", alerts[0]);
            }
            let files = trace_files(&out);
            let r = vramtrace_json(["report".as_ref(), "--json".as_ref(), files[0].as_os_str()]);
            let finding = &r["analysis"]["diagnosis"][0];
            assert_eq!(finding["class"], "steady-growth");
            assert_eq!(finding["site"]["label"], place.as_str(), "{view}");
            assert_eq!(finding["evidence"]["view"], view);
            assert_eq!(finding["evidence"]["rate"], MIB as f64, "{view}");
            assert_eq!(finding["evidence"]["rises"], 20, "{view}");
            assert_eq!(r["analysis"]["diagnosis"].as_array().unwrap().len(), 1);
        }
    }
);

// `diff` of the helper's program keeping nothing (A, run by a launcher script) and keeping from
// step 20 (B): what changed is the kept path of the helper's line, named as the report names it,
// at its rate; the temporaries' path is paired with itself although A's passes through the
// launcher. Both views:
// the driver's sites (`--per-tensor`: the top difference) and the recorder's lines (the stand-in
// allocator never reuses a block, so there the driver's segments grow in both runs and come
// first).
captest!(diff_names_the_path_of_a_helper_s_line_that_keeps, |dir| {
    let s = setup(dir);
    let place = format!(
        "helper.py:{} in make via helper.py:{} in <module>",
        line_of(HELPER, "helper_make"),
        line_of(HELPER, "helper_kept")
    );
    for (flags, view) in [(&["--per-tensor"][..], "driver"), (&[][..], "tensors")] {
        let d = s.diff_of_runs(
            flags,
            [
                ("launch.py", &[("KEEP_FROM", "40")]),
                ("helper.py", &[("KEEP_FROM", "20")]),
            ],
        );
        let (top, growth, list) = match view {
            "driver" => (
                &d["top_difference"],
                &d["top_difference"]["growth"],
                &d["sites"],
            ),
            _ => (
                &d["tensors"]["list"][0],
                &d["tensors"]["list"][0]["change"]["growth"],
                &d["tensors"],
            ),
        };
        assert_eq!(top["label"], place.as_str(), "{view}: {top}");
        assert_eq!(top["status"], "new", "{view}");
        assert_eq!(*growth, MIB as f64, "{view}");
        assert_eq!(list["only_in_a"], 0, "{view}: {list}");
        assert_eq!(list["only_in_b"], 1, "{view}: {list}");
    }
});

// A helper that keeps what it makes, called from three lines: its line grows on every path, and
// is one finding at the helper's line at the three paths' rate together (64 + 128 + 256 KiB a
// step), not one path's.
captest!(
    a_helper_that_keeps_on_every_path_is_one_finding_at_its_line,
    |dir| {
        let s = setup(dir);
        let traced = s.traced("helper_keeps.py", &["--per-tensor"], &[]);
        assert_eq!(traced.status.code(), Some(0), "{}", text(&traced.stderr));
        assert_eq!(
            text(&traced.stdout),
            text(&s.plain("helper_keeps.py").stdout)
        );
        let files = trace_files(&s.dir.join("out"));
        let r = vramtrace_json(["report".as_ref(), "--json".as_ref(), files[0].as_os_str()]);
        let diagnosis = r["analysis"]["diagnosis"].as_array().unwrap();
        assert_eq!(diagnosis.len(), 1, "{diagnosis:?}");
        let finding = &diagnosis[0];
        assert_eq!(finding["class"], "steady-growth");
        let line = line_of(HELPER_KEEPS, "keeps_make");
        assert_eq!(
            finding["site"]["label"],
            format!("helper_keeps.py:{line} in make")
        );
        assert!(finding["site"].get("via").is_none(), "{finding}");
        assert_eq!(finding["evidence"]["rate"], (448 * 1024) as f64);
    }
);

// `diff` of the helper keeping nothing (A: its line on three paths, none growing) and keeping
// on every path (B: the line one place): the line is compared as one place in both runs, its
// growth new in B at the three paths' rate together, and nothing of A's is left unpaired (A's
// three paths are not "gone" beside B's one line). Both views.
captest!(
    diff_compares_a_line_kept_on_every_path_as_one_place,
    |dir| {
        let s = setup(dir);
        let place = format!(
            "helper_keeps.py:{} in make",
            line_of(HELPER_KEEPS, "keeps_make")
        );
        for (flags, view) in [(&["--per-tensor"][..], "driver"), (&[][..], "tensors")] {
            let d = s.diff_of_runs(
                flags,
                [
                    ("helper_keeps.py", &[("HELPER_KEEP", "0")]),
                    ("helper_keeps.py", &[("HELPER_KEEP", "1")]),
                ],
            );
            let (rows, list) = match view {
                "driver" => (&d["sites"]["list"], &d["sites"]),
                _ => (&d["tensors"]["list"], &d["tensors"]),
            };
            let at_line: Vec<&serde_json::Value> = (rows.as_array().unwrap().iter())
                .filter(|r| r["label"].as_str().unwrap().starts_with(&place))
                .collect();
            assert_eq!(at_line.len(), 1, "{view}: {rows}");
            let row = at_line[0];
            assert_eq!(row["label"], place.as_str(), "{view}: {row}");
            assert_eq!(row["match"], "exact", "{view}: {row}");
            assert_eq!(
                row["change"]["growth"],
                (448 * 1024) as f64,
                "{view}: {row}"
            );
            assert_eq!(list["only_in_a"], 0, "{view}: {list}");
            let new: Vec<&serde_json::Value> =
                (d["verdict"]["new_growth"].as_array().unwrap().iter())
                    .filter(|g| g["label"] == place.as_str())
                    .collect();
            assert_eq!(new.len(), 1, "{view}: {}", d["verdict"]);
            // A's report says the line one place per path: the verdict says why diff does not.
            let what = match view {
                "driver" => "call sites",
                _ => "tensor lines (PyTorch recorder)",
            };
            let note = format!(
            "run A's 3 {what} at {place}, one per path, compared as one: run B says the line as \
             one place (it grows on every path)"
        );
            let notes = d["verdict"]["notes"].as_array().unwrap();
            assert!(
                notes.contains(&serde_json::Value::from(note)),
                "{view}: {notes:?}"
            );
        }
    }
);

// An out-of-memory error: the history is handed over before the error reaches the program,
// and is in the file although the process then leaves with `os._exit`, which runs no exit
// handler (the tracer's own `_exit` hook still ends the trace).
captest!(the_history_is_handed_over_at_out_of_memory, |dir| {
    let s = setup(dir);
    let traced = s.traced("oom.py", &[], &[]);
    assert_eq!(traced.status.code(), Some(3), "{}", text(&traced.stderr));
    assert_eq!(text(&traced.stdout), text(&s.plain("oom.py").stdout));
    let t = s.trace();
    assert_eq!(t.end_reasons, ["_exit"]);
    let view = TorchView::read(t.state.attachments(), None);
    let snapshot = view.snapshot.as_ref().expect("the history at the error");
    assert_eq!(snapshot.reason, "oom");
    let oom = snapshot.oom.unwrap();
    assert_eq!((oom.requested, oom.device_free), (2 << 30, MIB));
    let mut tensors = TensorHistory::new(snapshot);
    let end = tensors.live_at_end();
    assert_eq!(end.len(), 1);
    let f = end[0].frame.unwrap();
    assert_eq!(
        snapshot.frames[f as usize].to_string(),
        at(&s, "oom.py", line_of(OOM, "oom_kept"))
    );
    assert_eq!((end[0].bytes, end[0].count), (3 * MIB, 3));
});

// A real PyTorch on the CPU (when VRAMTRACE_TEST_TORCH_PYTHON names an interpreter that has
// it): 4 optimizer steps are 4 steps, and the program's output does not change.
captest!(real_torch_steps_when_available, |dir| {
    let Some(python) = std::env::var_os("VRAMTRACE_TEST_TORCH_PYTHON") else {
        eprintln!("skipped: VRAMTRACE_TEST_TORCH_PYTHON is not set");
        return;
    };
    let script = dir.join("real.py");
    std::fs::write(
        &script,
        "import torch\nm = torch.nn.Linear(4, 2)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n\
         for _ in range(4):\n    opt.zero_grad()\n    m(torch.ones(3, 4)).sum().backward()\n    opt.step()\n\
         print('real torch done')\n",
    )
    .unwrap();
    let out = vramtrace_command()
        .arg("run")
        .arg("-o")
        .arg(dir.join("t-%p.vtrace"))
        .arg("--")
        .arg(&python)
        .arg(&script)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "real torch done\n");
    assert!(
        !text(&out.stderr).contains("warning"),
        "{}",
        text(&out.stderr)
    );
    let files = trace_files(dir);
    assert_eq!(files.len(), 1, "{}", text(&out.stderr));
    assert_eq!(marks(&Trace::load(&files[0])).len(), 4);
});

// A thread still allocating at exit: the program's own exit handler, run after the hand-over,
// prints the same as without vramtrace and finds its own switch interval, and the self-profile
// says what was handed over and how long each part took.
captest!(the_hand_over_at_exit_beside_a_busy_thread, |dir| {
    let s = setup(dir);
    let plain = s.plain("busy_exit.py");
    assert_eq!(
        text(&plain.stdout),
        "user sitecustomize ran\nleaving\nswitch interval 0.005\n"
    );
    let traced = s.traced("busy_exit.py", &[], &[("VRAMTRACE_SELF_PROFILE", "1")]);
    assert_eq!(traced.status.code(), Some(0), "{}", text(&traced.stderr));
    assert_eq!(text(&traced.stdout), text(&plain.stdout));
    let err = text(&traced.stderr);
    let said: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("torch's memory history handed over (exit)"))
        .collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(
        said[0].starts_with("vramtrace: self-profile: torch's memory history handed over (exit): "),
        "{err}"
    );
    assert!(said[0].contains(" ms (snapshot "), "{err}");
    assert!(said[0].ends_with(" ms)"), "{err}");
});

// `vramtrace diff` of two runs with the recorder's history: the per-tensor view names the line
// added in B (its tensors reach the stand-in's driver too, but PyTorch's caching allocator would
// hide them in its segments), with its bytes and rate, and pairs the line that moved.
captest!(diff_compares_the_recorders_tensors_by_line, |dir| {
    let s = setup(dir);
    let mut runs = Vec::new();
    for script in ["healthy.py", "leaky.py"] {
        let out = s.traced(script, &[], &[]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let files = trace_files(&dir.join("out"));
        let kept = dir.join(format!("{script}.vtrace"));
        std::fs::rename(&files[0], &kept).unwrap();
        runs.push(kept);
    }
    let out = vramtrace_command()
        .arg("diff")
        .arg("--json")
        .args(&runs)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let added = line_of(LEAKY, "added");
    let top = &d["top_difference"];
    assert_eq!(top["view"], "allocator-tensors");
    assert_eq!(top["label"], format!("leaky.py:{added} in <module>"));
    assert_eq!(top["status"], "new");
    assert_eq!(top["live_bytes"], 24 * MIB);
    assert_eq!(top["growth"], (2 * MIB) as f64);
    let t = &d["tensors"];
    assert_eq!(t["changed"], 1);
    assert_eq!(t["b"]["steps"], 12);
    assert_eq!(t["list"][0]["b"]["live_count"], 12);
    // The weight's line did not move; nothing of the moved activation line is live at the end.
    assert_eq!((&t["matched"], &t["unchanged"]), (&1.into(), &1.into()));
    // A against a copy of itself: one process's trace, where nothing can differ; refused as
    // the same file is, not passed as "no regression".
    let copy = Path::new(&runs[0]).with_extension("copy.vtrace");
    std::fs::copy(&runs[0], &copy).unwrap();
    let out = vramtrace_command()
        .arg("diff")
        .arg(&runs[0])
        .arg(&copy)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).starts_with("error: A and B are the same trace ("),
        "{}",
        text(&out.stderr)
    );
});

// A loop without an optimizer: each outermost model call (not the inner module's) marks an
// iteration, the report's steps are the 6 requests, and the cache's growth is 1 MiB a request
// at the line that makes the answers, from PyTorch's recorder (the stand-in's 8 MiB segment
// holds them all: the driver sees no growth).
captest!(a_loop_without_an_optimizer_steps_per_model_call, |dir| {
    let s = setup(dir);
    let plain = s.plain("infer.py");
    let traced = s.traced("infer.py", &[], &[]);
    assert_eq!(traced.status.code(), Some(0), "{}", text(&traced.stderr));
    assert_eq!(text(&traced.stdout), text(&plain.stdout));
    assert_eq!(text(&plain.stdout), "user sitecustomize ran\nanswered 6\n");
    let t = s.trace();
    assert_eq!(iterations(&t), [1, 2, 3, 4, 5, 6]);
    assert!(marks(&t).is_empty());
    let files = trace_files(&s.dir.join("out"));
    let r = vramtrace_json(["report".as_ref(), "--json".as_ref(), files[0].as_os_str()]);
    let steps = &r["analysis"]["steps"];
    assert_eq!(
        (&steps["source"], &steps["steps"]),
        (&"iterations".into(), &6.into())
    );
    let answer = format!("infer.py:{} in forward", line_of(INFER, "answer"));
    let growth: Vec<&serde_json::Value> = r["analysis"]["diagnosis"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["class"] == "steady-growth")
        .collect();
    assert_eq!(growth.len(), 1, "{growth:#?}");
    assert_eq!(growth[0]["site"]["label"].as_str(), Some(answer.as_str()));
    assert_eq!(growth[0]["evidence"]["rate"], MIB as f64);
    assert_eq!(growth[0]["evidence"]["view"], "allocator");
});

// Model calls before the optimizer is made mark iterations until its first step; the trace's
// steps are then the optimizer's 5 alone.
captest!(
    iterations_before_the_first_optimizer_step_are_not_steps,
    |dir| {
        let s = setup(dir);
        let traced = s.traced("warm_train.py", &[], &[]);
        assert_eq!(traced.status.code(), Some(0), "{}", text(&traced.stderr));
        assert_eq!(text(&traced.stdout), text(&s.plain("warm_train.py").stdout));
        let t = s.trace();
        // The two warm-up calls and the first training call, before the first optimizer step.
        assert_eq!(iterations(&t), [1, 2, 3]);
        assert_eq!(marks(&t).len(), 5);
        let files = trace_files(&s.dir.join("out"));
        let r = vramtrace_json(["report".as_ref(), "--json".as_ref(), files[0].as_os_str()]);
        let steps = &r["analysis"]["steps"];
        assert_eq!(
            (&steps["source"], &steps["steps"]),
            (&"marks".into(), &5.into())
        );
        assert_eq!(r["events"]["steps"], 5);
    }
);

// The live alert with PyTorch's recorder on waits for the hooks' snapshot and names the line
// whose tensors stay live, at its own rate, where the driver sees the allocator's segments grow
// at both lines; the program's output is unchanged and the trace records the alert as said.
captest!(
    the_live_alert_names_the_line_that_keeps_the_tensors,
    |dir| {
        let s = setup(dir);
        let (alerts, err) = alerts_of(&s, "alerted.py", &alerting("0"));
        assert_eq!(alerts.len(), 1, "{err}");
        // Named as the report names a line: the file's base name.
        let kept = format!("alerted.py:{} in <module>", line_of(ALERTED, "alert_kept"));
        let named = format!("+1.0 MiB per step of it kept at {kept} (PyTorch tensors)");
        assert!(alerts[0].contains(&named), "{}", alerts[0]);
        let files = trace_files(&s.dir.join("out"));
        let r = vramtrace_json(["report".as_ref(), "--json".as_ref(), files[0].as_os_str()]);
        let recorded = &r["analysis"]["alerts"][0];
        assert_eq!(recorded["place"], format!("{kept} (PyTorch tensors)"));
        assert_eq!(recorded["place_rate"], MIB);
        // The hand-over for the alert is a snapshot of its own, before the one at exit.
        let t = s.trace();
        assert_eq!(snapshot_reasons(&t), ["alert", "exit"]);
    }
);

// An alert raised after the program handed over its history at exit (the first judgement since
// its first step comes while the exit lingers) is named from that history, the last there will
// be: the line that keeps the tensors, not where the allocator asked for its segments.
captest!(
    an_alert_raised_after_the_exit_history_names_the_line_that_keeps_the_tensors,
    |dir| {
        let s = setup(dir);
        let (alerts, err) = alerts_of(&s, "alerted_late.py", &alerting("1500"));
        assert_eq!(alerts.len(), 1, "{err}");
        // Named as the report names a line: the file's base name.
        let kept = format!(
            "alerted_late.py:{} in <module>",
            line_of(ALERTED_LATE, "late_kept")
        );
        let named = format!("+1.0 MiB per step of it kept at {kept} (PyTorch tensors)");
        assert!(alerts[0].contains(&named), "{}", alerts[0]);
        assert!(
            alerts[0].starts_with("vramtrace: ALERT at step 20"),
            "{}",
            alerts[0]
        );
        // Only the history of the exit was handed over: the alert came after it.
        let t = s.trace();
        assert_eq!(snapshot_reasons(&t), ["exit"]);
        assert_eq!(
            t.state.alerts()[0].place,
            format!("{kept} (PyTorch tensors)")
        );
    }
);

// The live alert numbers steps as a reader of the trace does: the optimizer's step marks alone.
// The model's three calls before the first optimizer step marked iterations, which began steps
// of the live state's own series too: the alert said "at step 23" of 20, the report 20.
captest!(the_live_alert_counts_the_steps_the_report_counts, |dir| {
    let s = setup(dir);
    let (alerts, err) = alerts_of(&s, "alerted_warm.py", &alerting("1500"));
    assert_eq!(alerts.len(), 1, "{err}");
    assert!(
        alerts[0].starts_with("vramtrace: ALERT at step 20:"),
        "{}",
        alerts[0]
    );
    let t = s.trace();
    assert_eq!(iterations(&t), [1, 2, 3]);
    assert_eq!(marks(&t).len(), 20);
    let files = trace_files(&s.dir.join("out"));
    let r = vramtrace_json(["report".as_ref(), "--json".as_ref(), files[0].as_os_str()]);
    assert_eq!(r["analysis"]["steps"]["steps"], 20);
    assert_eq!(r["analysis"]["alerts"][0]["step"], 20);
});

// The driver sees the caching allocator's segments grow 2 MiB a step, above the threshold, but
// PyTorch's tensors stay flat: the alert is withdrawn once the hooks' snapshot shows it, looked
// at again when the run has gone on twice as long and withdrawn again (at exit, from the
// history handed over then), and never said. The program's output is unchanged.
captest!(
    segments_that_grow_under_flat_tensors_raise_no_alert,
    |dir| {
        let s = setup(dir);
        let (alerts, err) = alerts_of(&s, "cache_grows.py", &alerting("0"));
        assert!(alerts.is_empty(), "{err}");
        let t = s.trace();
        assert!(t.state.alerts().is_empty(), "{:?}", t.state.alerts());
        // One snapshot for the first alert, one at exit for the second.
        assert_eq!(snapshot_reasons(&t), ["alert", "exit"]);
    }
);
