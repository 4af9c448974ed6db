"""Healthy, but for one request it cannot serve: an MLP trained for 60 steps with the default
caching allocator; at step 30 an evaluation asks for a buffer twice the device's memory, which
fails with torch.OutOfMemoryError; the program catches it and goes on, as a batch-size probe
does. Nothing grows: the run's out-of-memory failure is one request too large, not a leak, and
the report's verdict must say it ran out of memory while finding no leak."""
import torch
import torch.nn as nn

from acc import DEVICE, StepClock, out, steps

TRUTH = {"kind": "healthy", "steps": 60, "allocator": "default", "oom": True}

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 10)).to(DEVICE)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
clock = StepClock()
n_steps = steps(60)
too_large = 2 * (torch.cuda.get_device_properties(DEVICE).total_memory if DEVICE.type == "cuda" else 1 << 40)
refused = 0
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
        try:
            probe = torch.empty(too_large, dtype=torch.uint8, device=DEVICE)
            del probe
        except torch.OutOfMemoryError:
            refused += 1
clock.report("healthy_oom_peak")
out("healthy_oom_peak", steps=n_steps, refused=refused)
