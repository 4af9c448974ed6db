//! PyTorch's caching allocator seen from inside, beside the driver-level trace.
//!
//! With PyTorch's default (native) caching allocator the driver sees segments — large
//! `cudaMalloc`s the allocator carves tensors from and keeps — not tensors. PyTorch's own memory
//! history recorder sees every tensor block with its Python stack. The Python bootstrap that
//! `vramtrace run` installs (`tools/python/vramtrace_hooks.py`, `docs/pytorch.md`) hands the
//! tracer two payloads (`crate::attached`):
//!
//! - `torch.allocator`, when torch initialises CUDA: the allocator configuration
//!   ([`AllocatorConfig`]: `PYTORCH_ALLOC_CONF` / `PYTORCH_CUDA_ALLOC_CONF`, the backend torch
//!   uses, the recorder's settings);
//! - `torch.memory_snapshot`, at exit and at the first out-of-memory error: the recorder's
//!   snapshot ([`AllocatorSnapshot`]: segments and blocks now, and the ring of the last allocator
//!   actions with their times and Python stacks), with a clock anchor that puts the allocator's
//!   times on the trace's clock.
//!
//! [`TensorHistory`] rebuilds every tensor's life from a snapshot and answers per Python line:
//! tensor bytes live at the end, live over time or at step boundaries, and the per-step growth of
//! the tensors still live at the end. It is a second source of line evidence beside the driver
//! view; [`View`] names which one a finding rests on.

pub mod alerts;
mod cache;
mod config;
mod lines;
mod snapshot;
mod tensors;

use serde::Serialize;

pub(crate) use cache::cache_use;
pub use cache::oom_relief;
pub(crate) use config::AllocatorConfig;
pub(crate) use lines::step_lines;
pub use lines::VIEW;
#[cfg(feature = "symbols")]
pub(crate) use lines::VIEW_NAME;
pub(crate) use snapshot::AllocatorSnapshot;
pub use snapshot::ClockAnchor;
#[cfg(feature = "symbols")]
pub(crate) use snapshot::SnapshotFrame;
#[cfg(feature = "symbols")]
pub(crate) use tensors::LineGrowth;
pub use tensors::{Tensor, TensorHistory};

use crate::analysis::Framework;
use crate::attached::Attachments;
use crate::live::LiveState;

/// The payload kind of the allocator configuration.
pub(crate) use crate::attached::KIND_TORCH_ALLOCATOR as KIND_ALLOCATOR;
/// The payload kind of a recorder snapshot.
pub const KIND_SNAPSHOT: &str = "torch.memory_snapshot";

/// Which view of memory a finding rests on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum View {
    /// The driver-level trace: every CUDA, driver and NCCL allocation the process made. With
    /// PyTorch's caching allocator these are segments, not tensors.
    Driver,
    /// PyTorch's recorder: the tensor blocks of the caching allocator, with their Python stacks.
    AllocatorTensors,
}

/// Where a PyTorch program's tensors can be seen one by one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TensorView {
    /// The `cudaMallocAsync` backend: every tensor is one driver allocation in the trace.
    Driver,
    /// The native caching allocator with PyTorch's recorder: tensors come from its snapshot.
    Recorder,
    /// The native caching allocator without a recorder snapshot: the trace holds segments only.
    SegmentsOnly,
}

/// What a trace says about PyTorch's allocator.
#[derive(Debug, Default)]
pub struct TorchView {
    /// The configuration torch reported when it initialised CUDA (the last one, if several).
    pub config: Option<AllocatorConfig>,
    /// The last recorder snapshot (the one taken at exit, when the process got there).
    pub snapshot: Option<AllocatorSnapshot>,
    /// The snapshot taken at the first out-of-memory error, when a later one followed it (when
    /// the process died of that error, it is [`TorchView::snapshot`], with reason `oom`).
    pub at_oom: Option<AllocatorSnapshot>,
    /// The last event sequence number when each of the two snapshots reached the tracer.
    pub snapshot_after_seq: u64,
    pub at_oom_after_seq: u64,
    /// Where the reading these payloads serve stopped (the last event applied), for a replay to
    /// a point: a snapshot handed over after it says nothing of the allocator at the point.
    /// `None`: read to the end.
    pub until_seq: Option<u64>,
    /// Payloads that could not be read, one line each.
    pub problems: Vec<String>,
}

/// Why a trace whose recorder was in `state` (`None`: PyTorch said nothing) holds no tensors of
/// it, in words ([`TorchView::why_no_tensors`]).
pub fn why_no_tensors(state: Option<&str>) -> String {
    match state {
        Some("on") => "the recorder was on, but no snapshot reached the trace".to_string(),
        Some("") | None => "no recorder".to_string(),
        Some(state) => format!("recorder {state}"),
    }
}

impl TorchView {
    /// Reads the PyTorch payloads of a trace; `fallback` places allocator times on the trace's
    /// clock for a snapshot without its own anchor (the trace header's start times).
    pub fn read(attachments: &Attachments, fallback: Option<ClockAnchor>) -> TorchView {
        let mut view = TorchView::default();
        if let Some(last) = attachments.of_kind(KIND_ALLOCATOR).last() {
            match AllocatorConfig::parse(&last.data) {
                Ok(c) => view.config = Some(c),
                Err(e) => view.problems.push(format!("{KIND_ALLOCATOR}: {e}")),
            }
        }
        let snapshots = attachments.of_kind(KIND_SNAPSHOT);
        let mut parse =
            |a: &crate::attached::Attached| match AllocatorSnapshot::parse(&a.data, fallback) {
                Ok(s) => Some(s),
                Err(e) => {
                    view.problems.push(format!("{KIND_SNAPSHOT} {}: {e}", a.id));
                    None
                }
            };
        let last = snapshots.last();
        let oom = snapshots
            .iter()
            .take(snapshots.len().saturating_sub(1))
            .find(|a| snapshot::reason_of(&a.data) == Some("oom"));
        view.snapshot_after_seq = last.map_or(0, |a| a.after_seq);
        view.at_oom_after_seq = oom.map_or(0, |a| a.after_seq);
        view.snapshot = last.and_then(&mut parse);
        view.at_oom = oom.and_then(&mut parse);
        view
    }

    /// Why the trace holds no tensors of PyTorch's recorder, in words, where it holds none:
    /// the program's recorder was on, but no snapshot reached the trace (cut short, or the
    /// program ended before its hooks handed one over); its state as the program's PyTorch said
    /// it (`off`, `failed: …`); or no recorder at all.
    pub fn why_no_tensors(&self) -> String {
        why_no_tensors(self.config.as_ref().map(|c| c.recorder.state.as_str()))
    }

    /// Whether the trace says anything about PyTorch.
    pub fn is_empty(&self) -> bool {
        self.config.is_none() && self.snapshot.is_none() && self.problems.is_empty()
    }

    /// The allocator backend torch used (`native`, `cudaMallocAsync`), when known.
    pub fn backend(&self) -> Option<&str> {
        self.config.as_ref().and_then(|c| c.backend.as_deref())
    }

    /// What the analyses take from this view: the tensor bytes per Python line at each step of
    /// `state` (see [`step_lines`]) and the allocator backend.
    ///
    /// The cache is the allocator's state when the last snapshot was taken: at a point before
    /// it (a replay), it is not known and left out. The out-of-memory relief is of the failure
    /// the hooks' snapshot followed: at a point before that failure, left out too.
    pub fn framework(&self, state: &LiveState) -> Framework {
        let reached = |after_seq: u64| self.until_seq.is_none_or(|until| until >= after_seq);
        let last = self
            .snapshot
            .as_ref()
            .filter(|_| reached(self.snapshot_after_seq));
        let failed_before = |after_seq: u64| {
            reached(after_seq)
                || state
                    .ooms()
                    .iter()
                    .next()
                    .is_some_and(|o| o.failure.seq <= after_seq)
        };
        let oom = match (&self.at_oom, &self.snapshot) {
            (Some(s), _) => Some(s).filter(|_| failed_before(self.at_oom_after_seq)),
            (None, Some(s)) if s.reason == "oom" => {
                Some(s).filter(|_| failed_before(self.snapshot_after_seq))
            }
            _ => None,
        };
        Framework {
            lines: step_lines(self, state),
            torch_backend: self.backend().map(str::to_string),
            cache: last.map(cache_use).unwrap_or_default(),
            oom_relief: oom.and_then(oom_relief),
        }
    }

    /// Where the tensors can be seen one by one; `None` for a trace without PyTorch payloads.
    pub fn tensor_view(&self) -> Option<TensorView> {
        match self.backend() {
            Some("cudaMallocAsync") => Some(TensorView::Driver),
            _ if self.snapshot.is_some() => Some(TensorView::Recorder),
            Some(_) => Some(TensorView::SegmentsOnly),
            None => None,
        }
    }
}
