"""Leak to out-of-memory, with a warning in time: a training loop keeps a 1 GiB buffer every step
(LEAK-LINE) until the device is full and PyTorch raises OutOfMemoryError, uncaught: the program
dies with exit code 1, traced or not. Each step also sleeps 25 ms (the rest of a real step's
work), so the ~130 steps take a few seconds. A SIGUSR1 handler "saves a checkpoint" (one line on
stderr naming the step) the way a job that wants a warning in time would, and the traced run asks
for the signal (VRAMTRACE_ALERT_SIGNAL=USR1): the live alert must reach it before the crash.

Truth: steady growth of 1 GiB per step from step 0 at LEAK-LINE, an out-of-memory failure at
LEAK-LINE, and a checkpoint saved before it."""
import signal
import sys
import time

import torch
import torch.nn as nn

from acc import DEVICE, out, steps

TRUTH = {
    "kind": "leak",
    "serial": True,
    "steps": 0,
    "allocator": "default",
    "oom": True,
    "checkpoint": True,
    "env": {"VRAMTRACE_ALERT_SIGNAL": "USR1", "VRAMTRACE_ALERT_INTERVAL_MS": "200"},
    "leaks": [{"marker": "LEAK-LINE", "bytes_per_step": 1073741824, "from_step": 0, "what": "buffers kept until out of memory"}],
}

step = 0


def save_checkpoint(signum, frame):
    print(f"VT-CHECKPOINT saved at step {step} (signal {signum})", file=sys.stderr, flush=True)


signal.signal(signal.SIGUSR1, save_checkpoint)
torch.manual_seed(0)
model = nn.Linear(1024, 1024).to(DEVICE)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
kept = []
out("leak_oom", starting=True)
for step in range(steps(100000)):
    x = torch.randn(512, 1024, device=DEVICE)
    loss = model(x).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    kept.append(torch.empty(1 << 30, dtype=torch.uint8, device=DEVICE))  # LEAK-LINE
    time.sleep(0.025)
