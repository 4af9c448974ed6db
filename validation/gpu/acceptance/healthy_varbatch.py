"""Healthy, and fragmenting: an MLP trained for 150 steps with the default caching allocator on
batches of varying size (drawn from five sizes, 128 to 3072 rows of 2048 features, seeded), as a
loader with variable-length buckets produces them. Nothing leaks; the allocator keeps segments of
every size it needed, so at the end much more is reserved than allocated: cached, free, and in
part too small or split for the requests that came. The program states what torch says it holds
(reserved, allocated) at the end.

Truth: no growth."""
import random

import torch
import torch.nn as nn

from acc import DEVICE, StepClock, fact, out, steps

TRUTH = {"kind": "healthy", "steps": 150, "allocator": "default"}

torch.manual_seed(0)
rng = random.Random(0)
model = nn.Sequential(nn.Linear(2048, 4096), nn.ReLU(), nn.Linear(4096, 2048), nn.ReLU(), nn.Linear(2048, 16)).to(DEVICE)
opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
clock = StepClock()
n_steps = steps(150)
rows_seen = 0
for step in range(n_steps):
    clock.start()
    rows = rng.choice([128, 384, 1024, 1536, 3072])
    x = torch.randn(rows, 2048, device=DEVICE)
    y = torch.randint(0, 16, (rows,), device=DEVICE)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    rows_seen += rows
    clock.stop()
clock.report("healthy_varbatch")
if DEVICE.type == "cuda":
    fact("healthy_varbatch", reserved=torch.cuda.memory_reserved(), allocated=torch.cuda.memory_allocated())
out("healthy_varbatch", steps=n_steps, rows=rows_seen)
