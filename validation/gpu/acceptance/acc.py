"""Small helpers shared by the acceptance programs. The programs themselves are written as a user
would write them: no step marks, no tracer calls. Result lines go to stdout (compared between the
plain and the traced run), timings and measured facts to stderr.

VT_ACC_DEVICE=cpu runs a program on the CPU (a smoke test of the script itself, off the GPU
machine); VT_ACC_STEPS overrides the number of steps for the same purpose."""
import os
import time

import torch

from plain import fact, out, steps  # noqa: F401 (re-exported for the programs)

DEVICE = torch.device(os.environ.get("VT_ACC_DEVICE", "cuda"))


def sync():
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


class StepClock:
    """Median step time of the steady part of a run, reported on stderr at the end."""

    def __init__(self):
        self.times = []
        self.t0 = None

    def start(self):
        sync()
        self.t0 = time.perf_counter()

    def stop(self):
        sync()
        self.times.append(time.perf_counter() - self.t0)

    def report(self, tag):
        t = sorted(self.times[len(self.times) // 10:]) or [0.0]
        fact(tag, median_ms=f"{t[len(t) // 2] * 1e3:.2f}", steps=len(self.times))


def used_device_bytes():
    """What the driver says is in use on the device (0 on the CPU)."""
    if DEVICE.type != "cuda":
        return 0
    free, total = torch.cuda.mem_get_info()
    return total - free
