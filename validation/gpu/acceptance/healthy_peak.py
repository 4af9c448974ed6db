"""Healthy: an MLP trained for 120 steps with the default caching allocator; at step 60 one large
validation pass (a batch 64 times the training batch, about 1 GiB of activations) runs once. The
caching allocator keeps the segments it took for that pass until the end: a one-off peak and a
one-off rise in reserved memory, not growth. Nothing leaks."""
import torch
import torch.nn as nn

from acc import DEVICE, StepClock, out, steps

TRUTH = {"kind": "healthy", "steps": 120, "allocator": "default", "one_off_peak_step": 60}

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 4096), nn.GELU(), nn.Linear(4096, 10)).to(DEVICE)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
clock = StepClock()
n_steps = steps(120)
big = None
for step in range(n_steps):
    clock.start()
    x = torch.randn(256, 1024, device=DEVICE)
    y = torch.randint(0, 10, (256,), device=DEVICE)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    clock.stop()
    if step == n_steps // 2:
        with torch.no_grad():
            vx = torch.randn(256 * 64, 1024, device=DEVICE)
            big = model(vx).argmax(-1).float().mean().item()
            del vx
clock.report("healthy_peak")
out("healthy_peak", steps=n_steps, big=big is not None)
