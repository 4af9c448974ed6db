//! The flags of `vramtrace diff`, and its help examples.

use std::path::PathBuf;

use clap::Args;
use vramtrace_collector::compare::Thresholds;

use vramtrace_collector::units::{parse_count, parse_rate, parse_size};

use crate::options::AnalysisArgs;

pub const EXAMPLES: &str = "\
EXAMPLES:
    Compare today's run with last week's; exit 1 if today's regressed:
        vramtrace diff last-week.vtrace today.vtrace

    The same, failing only on more than 256 MiB more left live, 4 MiB more growth per step or
    two more orphans:
        vramtrace diff --max-live 256MiB --max-growth 4MiB/step --max-orphans 2 before.vtrace after.vtrace

    A new steady growth fails above 1 MiB per step, or when it would fill the device within the
    report's horizon: here an 80 GiB device within 5,000 steps, however long they take:
        vramtrace diff --min-new-growth 1MiB/step --device-memory 80GiB --horizon-steps 5000 \
            --horizon 0s a.vtrace b.vtrace

    Two runs of a torchrun job, one directory of traces each, compared rank by rank:
        vramtrace diff runs/before/ runs/after/

    Rank 3 of a job against the median of the other ranks:
        vramtrace diff --rank 3 traces/

    Python sources from two checkouts (each run's file is the first version found whose
    functions start where the run's did; lines moved by an edit are matched by their text):
        vramtrace diff --source-dir ~/src/v1 --source-dir ~/src/v2 v1.vtrace v2.vtrace

    Machine-readable output (schema in docs/report-json.md, \"Diff\"):
        vramtrace diff --json a.vtrace b.vtrace > diff.json

REGRESSION:
    B regressed when, over A, it holds more than --max-live at the end, peaks more than
    --max-peak higher, grows more than --max-growth per step faster (both runs with steps), has
    more than --max-orphans more orphans or --max-orphan-bytes more orphaned memory, or fails
    more than --max-failures more calls; or when it has a new steady growth: a call site (or,
    with PyTorch's recorder, a Python line of its tensors) that grows steadily in B, surely (at
    least 3 rises along a line with R² of 0.9 or more, the report's own judgement), where A's
    does not grow at all, while B's growth in all rose with it; and at that rate B's device
    would be full within the report's horizon (--horizon-steps, --horizon; when the device's
    size is known: sampled by the tracer, or --device-memory), or the rate is above
    --min-new-growth (per step; per second for runs without steps).

EXIT STATUS:
    0 no regression beyond the thresholds, 1 regression, 2 error, or a trace that could not
    be compared in full (cut short, damaged, events the tracer lost): no verdict on it; also 2
    when A and B are the same trace (one file, a copy, or two segments of one trace: nothing
    could differ).";

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// Run A then run B, each a trace or a directory of traces (one per rank, compared rank by
    /// rank); with --rank or --pid, the traces of one job (files or directories).
    #[arg(value_name = "TRACES", required = true, num_args = 1..)]
    pub inputs: Vec<PathBuf>,
    /// Compare the trace of this rank with the median of the other traces given.
    #[arg(long, value_name = "N", conflicts_with = "pid")]
    pub rank: Option<i32>,
    /// Compare the trace of this process with the median of the other traces given (for
    /// traces without ranks, such as forked workers).
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// Print one JSON document instead of tables (schema: docs/report-json.md, "Diff").
    #[arg(long)]
    pub json: bool,
    /// How many changed call sites to list.
    #[arg(long, default_value_t = 10, value_name = "N", value_parser = crate::options::parse_top,
          allow_hyphen_values = true)]
    pub top: usize,
    /// Print every frame of the stacks; by default runs of frames inside the CUDA libraries and
    /// the tracer are collapsed into one line.
    #[arg(long)]
    pub full_stacks: bool,
    /// A directory to look for the Python sources the traces name, before their recorded paths
    /// (repeatable; VRAMTRACE_SOURCE_PATH adds more). A version is used for a run only when its
    /// functions start where the run's did. With both versions of a file found, moved lines are
    /// matched by their text and the changed lines are listed.
    #[arg(long = "source-dir", value_name = "DIR")]
    pub source_dirs: Vec<PathBuf>,
    #[command(flatten)]
    pub thresholds: ThresholdArgs,
    /// The growth analysis' settings, as `report` takes them: what a new growth is projected
    /// against.
    #[command(flatten)]
    pub analysis: AnalysisArgs,
}

/// How much B may exceed A: above any of these, B regressed (exit 1). The flags `check` shares
/// mean the same things here, as increases from A to B.
#[derive(Debug, Args)]
pub struct ThresholdArgs {
    /// Largest increase of device memory live at the end that is no regression.
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_size)]
    pub max_live: u64,
    /// Largest increase of the devices' peak.
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = parse_size)]
    pub max_peak: u64,
    /// Largest increase of steady growth per step [default: 1MiB/step]. Compared when both
    /// runs mark their steps alike (steps guessed from the allocation pattern are no size per
    /// step); given here, a pair that cannot compare it (a run without steps, or with guessed
    /// steps) gets no verdict (exit 2).
    #[arg(long, value_name = "SIZE/step", value_parser = parse_rate)]
    pub max_growth: Option<u64>,
    /// Largest increase of the number of orphans (memory whose owner is gone).
    #[arg(long, value_name = "N", default_value = "0", value_parser = parse_orphans)]
    pub max_orphans: u64,
    /// Largest increase of device memory held by orphans.
    #[arg(long, value_name = "SIZE", default_value = "0", value_parser = parse_size)]
    pub max_orphan_bytes: u64,
    /// Largest increase of failed calls.
    #[arg(long, value_name = "N", default_value = "0", value_parser = parse_count)]
    pub max_failures: u64,
    /// A steady growth B has where A has none is a regression above this rate per step (per
    /// second without steps), or when it would fill B's device within the horizon.
    #[arg(long, value_name = "SIZE/step", default_value = "64KiB/step", value_parser = parse_rate)]
    pub min_new_growth: u64,
}

impl ThresholdArgs {
    pub fn thresholds(&self) -> Thresholds {
        Thresholds {
            live_bytes: self.max_live,
            peak_bytes: self.max_peak,
            growth_per_step: (self.max_growth).unwrap_or(Thresholds::default().growth_per_step),
            orphans: self.max_orphans,
            orphan_bytes: self.max_orphan_bytes,
            failures: self.max_failures,
            new_growth: self.min_new_growth,
        }
    }
}

/// `--max-orphans`: a count, as in `check`. A size here meant the orphans' memory before
/// `--max-orphan-bytes` existed; it is refused with the flag to use, never read as a count.
fn parse_orphans(text: &str) -> Result<u64, String> {
    parse_count(text).map_err(|e| match parse_size(text) {
        Ok(_) => {
            "not a number of orphans (for the memory they hold, use --max-orphan-bytes)".into()
        }
        Err(_) => e,
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// `vramtrace diff`'s flags on their own.
    #[derive(Parser)]
    struct Diff {
        #[command(flatten)]
        args: DiffArgs,
    }

    #[test]
    fn the_default_limits_are_the_comparisons_own() {
        let args = Diff::parse_from(["diff", "a.vtrace", "b.vtrace"]).args;
        assert_eq!(args.thresholds.thresholds(), Thresholds::default());
        let args = Diff::parse_from(["diff", "--max-growth", "2MiB/step", "a", "b"]).args;
        assert_eq!(args.thresholds.max_growth, Some(2 << 20));
        assert_eq!(parse_orphans("3"), Ok(3));
        assert_eq!(
            parse_orphans("1MiB"),
            Err(
                "not a number of orphans (for the memory they hold, use --max-orphan-bytes)".into()
            )
        );
    }
}
