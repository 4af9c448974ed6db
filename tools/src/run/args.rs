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

    Be warned while it runs, and save a checkpoint on the warning (a SIGUSR1 handler):
        VRAMTRACE_ALERT_SIGNAL=USR1 VRAMTRACE_ALERT_SNAPSHOT=1 vramtrace run -- python train.py

    Serve its live numbers to Prometheus on loopback:
        VRAMTRACE_METRICS_ADDR=127.0.0.1:9400 vramtrace run -- python train.py

LIVE ALERTS:
    While the program runs, the tracer judges its growth as `vramtrace report` does and prints
    `vramtrace: ALERT at step N: ...` on its stderr once a device grows steadily past the
    threshold (0.1% of its memory per step) or is due to be full within the horizon. The
    VRAMTRACE_ALERT_* variables set the threshold, horizon, confirmation, a signal to send
    (USR1, USR2) and a live-set snapshot; VRAMTRACE_METRICS_* export the numbers. All of them:
    docs/live.md.

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
