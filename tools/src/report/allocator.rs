//! What the report says about PyTorch's allocator: the configuration the run used, where its
//! tensors can be seen one by one, and what PyTorch's own recorder saw live at the end
//! (`docs/report-json.md`, "Allocator").

use serde::Serialize;
use vramtrace_collector::torch::{TensorHistory, TensorView, TorchView};

use crate::render::units::bytes;

/// PyTorch's allocator as the trace knows it.
#[derive(Serialize)]
pub struct AllocatorFacts {
    /// `torch`.
    pub framework: &'static str,
    pub torch_version: Option<String>,
    /// `native` (the caching allocator) or `cudaMallocAsync`.
    pub backend: Option<String>,
    /// The allocator settings in effect, and the variable they came from.
    pub alloc_conf: Option<String>,
    pub alloc_conf_variable: Option<String>,
    /// Where tensors can be seen one by one: `driver`, `recorder` or `segments-only`.
    pub tensor_view: Option<TensorView>,
    pub recorder: Option<RecorderFacts>,
    /// Payloads that could not be read.
    pub problems: Vec<String>,
}

/// PyTorch's memory history recorder and its last snapshot.
#[derive(Serialize)]
pub struct RecorderFacts {
    /// The recorder as the bootstrap left it: `on`, `off`, `not available with this backend`,
    /// `failed: …`.
    pub state: String,
    pub max_entries: u64,
    /// `exit` or `oom`: when the snapshot was taken; `null` without one.
    pub snapshot: Option<String>,
    /// Allocator actions in its ring.
    pub entries: u64,
    /// Whether the ring was full (older actions lost).
    pub ring_full: bool,
    /// Where the ring's window starts (trace clock), when it was full.
    pub window_start_ns: Option<u64>,
    /// Actions the tensor walk could not match (0 in a consistent snapshot).
    pub unmatched: u64,
    /// Tensors live when the snapshot was taken.
    pub live_tensors: u64,
    pub live_bytes: u64,
    /// The lines holding them, largest first (at most `--top`).
    pub by_line: Vec<TensorLine>,
    /// The first out-of-memory error, when a snapshot was taken at it.
    pub out_of_memory: Option<OomAt>,
}

/// Tensor bytes live at the end for one Python line.
#[derive(Serialize)]
pub struct TensorLine {
    /// `file:line in function`; `null` for tensors without a stack.
    pub line: Option<String>,
    pub bytes: u64,
    pub count: u64,
    /// Of `bytes`, those allocated on a thread without Python frames (the autograd engine's),
    /// attributed to the last line recorded before them.
    pub inferred_bytes: u64,
}

/// An out-of-memory error PyTorch's allocator raised.
#[derive(Serialize)]
pub struct OomAt {
    pub device: i64,
    pub requested: u64,
    pub device_free: u64,
    /// Tensor bytes live then.
    pub live_bytes: u64,
}

impl AllocatorFacts {
    /// The facts of a trace's PyTorch view; `None` when it holds nothing from PyTorch's hooks.
    pub fn of(view: &TorchView, top: usize) -> Option<AllocatorFacts> {
        if view.is_empty() {
            return None;
        }
        let config = view.config.as_ref();
        let recorder = view.snapshot.as_ref().map(|s| {
            let mut tensors = TensorHistory::new(s);
            let lines = tensors.live_at_end();
            let oom = view
                .at_oom
                .as_ref()
                .or_else(|| (s.reason == "oom").then_some(s))
                .and_then(|at| {
                    let facts = at.oom?;
                    let mut then = TensorHistory::new(at);
                    Some(OomAt {
                        device: facts.device,
                        requested: facts.requested,
                        device_free: facts.device_free,
                        live_bytes: then.live_at_end().iter().map(|l| l.bytes).sum(),
                    })
                });
            RecorderFacts {
                state: config.map_or(String::new(), |c| c.recorder.state.clone()),
                max_entries: s.max_entries.unwrap_or(0),
                snapshot: Some(s.reason.clone()),
                entries: s.traces.len() as u64,
                ring_full: s.ring_full(),
                window_start_ns: tensors.window_start_ns(),
                unmatched: tensors.unmatched(),
                live_tensors: lines.iter().map(|l| l.count).sum(),
                live_bytes: lines.iter().map(|l| l.bytes).sum(),
                by_line: lines
                    .iter()
                    .take(top)
                    .map(|l| TensorLine {
                        line: l.frame.map(|f| s.frames[f as usize].to_string()),
                        bytes: l.bytes,
                        count: l.count,
                        inferred_bytes: l.inferred_bytes,
                    })
                    .collect(),
                out_of_memory: oom,
            }
        });
        let recorder = recorder.or_else(|| {
            config.map(|c| RecorderFacts {
                state: c.recorder.state.clone(),
                max_entries: c.recorder.max_entries,
                snapshot: None,
                entries: 0,
                ring_full: false,
                window_start_ns: None,
                unmatched: 0,
                live_tensors: 0,
                live_bytes: 0,
                by_line: Vec::new(),
                out_of_memory: None,
            })
        });
        Some(AllocatorFacts {
            framework: "torch",
            torch_version: config.map(|c| c.torch_version.clone()),
            backend: config.and_then(|c| c.backend.clone()),
            alloc_conf: config.and_then(|c| c.alloc_conf.clone()),
            alloc_conf_variable: config.and_then(|c| c.alloc_conf_variable.clone()),
            tensor_view: view.tensor_view(),
            recorder,
            problems: view.problems.clone(),
        })
    }

    /// The report header's line: the configuration, then where tensors are seen.
    pub fn describe(&self) -> String {
        let backend = match self.backend.as_deref() {
            Some("native") => "caching allocator (native)",
            Some("cudaMallocAsync") => "cudaMallocAsync",
            Some(other) => other,
            None => "backend unknown",
        };
        let settings = match (&self.alloc_conf_variable, &self.alloc_conf) {
            (Some(name), Some(value)) => format!("{name}={value}"),
            _ => "default settings".to_string(),
        };
        let version = self.torch_version.as_deref().unwrap_or("?");
        let view = match (self.tensor_view, &self.recorder) {
            (Some(TensorView::Driver), _) => {
                "tensors: each one a driver allocation in this trace".to_string()
            }
            (Some(TensorView::Recorder), Some(r)) => {
                let window = if r.ring_full {
                    format!("last {} allocator actions", r.entries)
                } else {
                    format!("all {} allocator actions", r.entries)
                };
                format!(
                    "tensors: PyTorch's recorder ({window}), {} in {} tensors live at {}",
                    bytes(r.live_bytes),
                    r.live_tensors,
                    r.snapshot.as_deref().unwrap_or("the end")
                )
            }
            _ => {
                let state = self.recorder.as_ref().map(|r| r.state.as_str());
                let why = vramtrace_collector::torch::why_no_tensors(state);
                format!("tensors: not seen, the driver sees segments only ({why})")
            }
        };
        format!("PyTorch {version} {backend}, {settings}; {view}")
    }
}
