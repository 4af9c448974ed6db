"""Leak inside a shared helper that caches what it makes: `features` makes every tensor of the
step and keeps each in a dictionary keyed by its name and step (a memo that is never cleared),
called from three lines a step for 1, 2 and 4 MiB. The helper's own line keeps the memory on
every path it is reached by; no caller keeps anything.

Truth: steady growth of 7 MiB per step at LEAK-LINE (the helper's line: the three paths
together, one cause). With LEAK_CACHE=0 the helper keeps nothing (its "fixed" run): `diff` of
that run against this one names LEAK-LINE first, the line compared as one place in both runs."""
import os

import torch
import torch.nn as nn

from acc import DEVICE, StepClock, out, steps

TRUTH = {
    "kind": "leak",
    "steps": 120,
    "leaks": [{"marker": "LEAK-LINE", "bytes_per_step": 7340032, "what": "a memo kept by the helper"}],
    "fixed_env": {"LEAK_CACHE": "0"},
}
KEEP = os.environ.get("LEAK_CACHE", "1") != "0"
MEMO = {}


def features(name, step, rows, cols=1024):
    t = torch.empty(rows, cols, device=DEVICE)  # LEAK-LINE
    if KEEP:
        MEMO[(name, step)] = t
    return t


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 1024)).to(DEVICE)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
clock = StepClock()
n_steps = steps(120)
for step in range(n_steps):
    clock.start()
    x = features("inputs", step, 256).normal_()
    y = features("targets", step, 512).normal_()
    m = features("masks", step, 1024).uniform_()
    loss = model(x).pow(2).mean() + y.mean() + m.mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    del x, y, m, loss
    clock.stop()
clock.report("leak_cache_helper")
out("leak_cache_helper", steps=n_steps, kept=len(MEMO))
