"""Slow leak: an MLP trained for 200 steps with the default caching allocator keeps half a MiB a
step (the first 128 rows of its output, 128 x 1024 float32, copied for "monitoring") at
LEAK-LINE. The caching allocator serves such small blocks from 2 MiB segments, so the device sees
a new segment every four steps.

Truth: steady growth of 0.5 MiB per step from step 0, at LEAK-LINE."""
import torch
import torch.nn as nn

from acc import DEVICE, StepClock, out, steps

TRUTH = {
    "kind": "leak",
    "steps": 200,
    "allocator": "default",
    "leaks": [{"marker": "LEAK-LINE", "bytes_per_step": 524288, "from_step": 0, "what": "tensors kept across steps"}],
}

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 1024)).to(DEVICE)
opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
monitor = []
clock = StepClock()
n_steps = steps(200)
for step in range(n_steps):
    clock.start()
    x = torch.randn(256, 1024, device=DEVICE)
    y = model(x)
    loss = y.pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    monitor.append(y[:128].detach().clone())  # LEAK-LINE
    clock.stop()
clock.report("leak_slow")
out("leak_slow", steps=n_steps, kept=len(monitor))
