//! The traces a command was given: trace files, and directories of traces (one per rank or
//! process, as `torchrun` and forked workers write them), read in parallel, one trace per core,
//! with what the comparisons need besides the live state: the analyses, and a tally of every
//! call's allocations and failures taken on the way.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use indicatif::MultiProgress;
use rayon::prelude::*;
use vramtrace_collector::analysis::{Analysis, GrowthConfig};
use vramtrace_collector::compare::CallTally;
use vramtrace_collector::event::Event;
use vramtrace_collector::live::LiveState;
use vramtrace_collector::torch::TorchView;

use crate::load::{load_analyzed_observing, LoadedTrace, Observer, Progress};

/// The trace files named by `inputs`: each file as given, each directory's `*.vtrace` files in
/// name order.
pub fn expand(inputs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut traces = Vec::new();
    for input in inputs {
        if input.is_dir() {
            let found = traces_in(input)?;
            if found.is_empty() {
                return Err(anyhow!(
                    "{}: no trace files (*.vtrace) in this directory",
                    input.display()
                ));
            }
            traces.extend(found);
        } else {
            traces.push(input.clone());
        }
    }
    Ok(traces)
}

/// The `*.vtrace` files of `dir`, sorted by name.
fn traces_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        anyhow!(
            "{}: {}",
            dir.display(),
            crate::load::lower_first(e.to_string())
        )
    })?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "vtrace"))
        .collect();
    found.sort();
    Ok(found)
}

/// A trace read to its end, with its analyses and the tally of its calls.
pub struct Run {
    pub trace: LoadedTrace,
    /// What the trace holds of PyTorch, read once.
    pub torch: TorchView,
    /// Every analysis, with PyTorch's own view of its tensors beside the driver's, as the
    /// report makes them.
    pub analysis: Analysis,
    pub tally: CallTally,
}

/// The tally of every call, taken as the trace is read.
struct Tallying(CallTally);

impl Observer for Tallying {
    fn event(&mut self, _: &LiveState, e: &Event) {
        self.0.note(e);
    }
    fn finish(&mut self, _: &LiveState) {}
}

/// Reads the trace at `path` as [`crate::load::load_analyzed`] does (its steps decided the same
/// way), tallying its calls in the pass that counts, and analyzes it with PyTorch's view.
pub fn load_run(path: &Path, growth: GrowthConfig, progress: &Progress) -> Result<Run> {
    let (trace, Tallying(tally)) =
        load_analyzed_observing(path, growth, progress, || Tallying(CallTally::new()))?;
    let torch = trace.torch();
    Ok(Run {
        analysis: trace.analyze(&torch),
        trace,
        torch,
        tally,
    })
}

/// Reads every trace of `paths` in parallel, then hands each to `then` (also in parallel);
/// results keep the order of `paths`. The first trace that cannot be read is the error.
pub fn load_all<T: Send>(
    paths: &[PathBuf],
    growth: GrowthConfig,
    then: impl Fn(Run) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let group = MultiProgress::new();
    paths
        .par_iter()
        .map(|path| {
            let progress = Progress::in_group(&group, path, "reading");
            let run = load_run(path, growth, &progress)?;
            drop(progress);
            then(run).with_context(|| path.display().to_string())
        })
        .collect()
}
