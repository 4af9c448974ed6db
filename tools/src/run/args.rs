//! The flags of `vramtrace run`.

use std::ffi::OsString;

use clap::Args;

use crate::options::TracerArgs;

/// The help's examples.
pub const EXAMPLES: &str = "\
EXAMPLES:
    Trace a training script; one trace per process lands in the current directory:
        vramtrace run -- python train.py --epochs 1

    One trace per rank and process in a new directory, with deeper stacks:
        vramtrace run -o traces/job-rank%r-%p.vtrace --stack-depth 64 -- torchrun train.py

    Use a tracer library from elsewhere, and skip the summary:
        vramtrace run --lib ./target/release/libvramtrace.so --no-summary -- ./app

    See every PyTorch tensor as a driver allocation (the cudaMallocAsync backend):
        vramtrace run --per-tensor -- python train.py

EXIT STATUS:
    The program's own exit code (128 + the signal that killed it); 127 when the program is not
    found and 126 when it cannot be run, as a shell says it; 2 for vramtrace's own errors.";

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub tracer: TracerArgs,
    /// Do not summarise the traces after the program exits.
    #[arg(long)]
    pub no_summary: bool,
    /// The program to run and its arguments.
    #[arg(value_name = "CMD", required = true, trailing_var_arg = true)]
    pub command: Vec<OsString>,
}
