//! The command line: the subcommands and their help. Each command's flags live with the command
//! (`check`, `diff`, `export`, `replay`, `run`), or in [`crate::options`] when several commands
//! read them.

use clap::{Parser, Subcommand};

/// Finds GPU memory leaks: records every CUDA, driver and NCCL memory call of a program and
/// reports what is still live.
#[derive(Debug, Parser)]
#[command(name = "vramtrace", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Report what a trace holds live at its end, and what went wrong on the way.
    #[command(after_help = crate::options::REPORT_EXAMPLES)]
    Report(crate::options::ReportArgs),
    /// Replay a trace to a moment (a step, an event, a time, the peak, an out-of-memory failure)
    /// and report what was live then.
    #[command(after_help = crate::replay::EXAMPLES)]
    Replay(crate::replay::ReplayArgs),
    /// Compare two runs call site by call site (or one rank of a job with the median of the
    /// others), and say whether the second regressed.
    #[command(after_help = crate::diff::EXAMPLES)]
    Diff(crate::diff::DiffArgs),
    /// Write a trace in the formats other tools read: Perfetto / Chrome trace JSON, a flame
    /// graph SVG, a PyTorch memory snapshot pickle, CSV, or a Parquet dataset of a trace or a
    /// job's traces for DuckDB, Spark and pandas.
    #[command(after_help = crate::export::EXAMPLES)]
    Export(crate::export::ExportArgs),
    /// Run a program under the tracer and summarise the traces it wrote.
    #[command(after_help = crate::run::EXAMPLES)]
    Run(crate::run::RunArgs),
    /// Run a program under the tracer and fail when its traces exceed the limits (a CI gate):
    /// growth, memory live at the end, orphans, out-of-memory failures.
    #[command(after_help = crate::check::EXAMPLES)]
    Check(crate::check::CheckArgs),
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_takes_everything_after_the_command() {
        let cli = Cli::parse_from(["vramtrace", "run", "-o", "x", "--", "python", "-m", "t"]);
        let Command::Run(args) = cli.command else {
            panic!("not run")
        };
        assert_eq!(args.tracer.output, Some(PathBuf::from("x")));
        assert_eq!(args.command, ["python", "-m", "t"]);
    }
}
