"""Leak through a shared helper: every tensor of the training step comes from one helper
function (`scratch`), called from several lines; a few activations of varying size each step
(temporaries, dropped within the step), and from step 60 on one more call, at LEAK-LINE, whose
2 MiB tensor is appended to a list every step. The helper's own line is shared by every
allocation, the leak's and the temporaries'; the line that keeps the memory is LEAK-LINE.

Truth: steady growth of 2 MiB per step from step 60, at LEAK-LINE. With LEAK_HELPER_KEEP=0 the
program keeps nothing (its "fixed" run): `diff` of that run against this one names LEAK-LINE's
path first."""
import os

import torch
import torch.nn as nn

from acc import DEVICE, StepClock, out, steps

TRUTH = {
    "kind": "leak",
    "steps": 120,
    "leaks": [{"marker": "LEAK-LINE", "bytes_per_step": 2097152, "from_step": 60, "what": "tensors kept across steps"}],
    "fixed_env": {"LEAK_HELPER_KEEP": "0"},
}
KEEP = os.environ.get("LEAK_HELPER_KEEP", "1") != "0"


def scratch(rows, cols=1024):
    return torch.empty(rows, cols, device=DEVICE)


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 1024)).to(DEVICE)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
gen = torch.Generator().manual_seed(1)
kept = []
clock = StepClock()
n_steps = steps(120)
for step in range(n_steps):
    clock.start()
    rows = int(torch.randint(64, 1024, (1,), generator=gen))
    x = scratch(rows).normal_()
    noise = scratch(int(torch.randint(64, 2048, (1,), generator=gen))).uniform_()
    loss = model(x).pow(2).mean() + noise.mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if KEEP and step >= n_steps // 2:
        kept.append(scratch(512).fill_(step))  # LEAK-LINE
    del x, noise, loss
    clock.stop()
clock.report("leak_helper")
out("leak_helper", steps=n_steps, kept=len(kept))
