"""Runs a training program the way a user who wants a warning in time would: a SIGUSR1 handler
that "saves a checkpoint" (writes one line naming the optimizer step it was called at), so that
`VRAMTRACE_ALERT_SIGNAL=USR1` can be seen reaching the script while it trains.

    python3 checkpoint.py PROGRAM.py [ARGS...]"""
import os
import runpy
import signal
import sys

from torch.optim.optimizer import register_optimizer_step_post_hook

steps = 0


def count(*_):
    global steps
    steps += 1


def save_checkpoint(signum, frame):
    print(f"VT-CHECKPOINT saved at optimizer step {steps} (signal {signum})", file=sys.stderr, flush=True)


register_optimizer_step_post_hook(count)
signal.signal(signal.SIGUSR1, save_checkpoint)
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
runpy.run_path(sys.argv[0], run_name="__main__")
