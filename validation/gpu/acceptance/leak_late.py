"""Leak that starts late: an MLP trained for 160 steps with the cudaMallocAsync backend; from
step 80 on, a "feature cache" keeps a copy of one activation every step (512 x 1024 float32 =
2 MiB) at LEAK-LINE. Before step 80 the run is flat.

Truth: steady growth of 2 MiB per step from step 80, at LEAK-LINE."""
import torch
import torch.nn as nn

from acc import DEVICE, StepClock, out, steps

TRUTH = {
    "kind": "leak",
    "steps": 160,
    "allocator": "async",
    "env": {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"},
    "leaks": [{"marker": "LEAK-LINE", "bytes_per_step": 2097152, "from_step": 80, "what": "tensors kept across steps"}],
}

torch.manual_seed(0)
encoder = nn.Sequential(nn.Linear(1024, 1024), nn.GELU())
head = nn.Linear(1024, 1024)
model = nn.Sequential(encoder, head).to(DEVICE)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
cache = []
clock = StepClock()
n_steps = steps(160)
for step in range(n_steps):
    clock.start()
    x = torch.randn(512, 1024, device=DEVICE)
    h = encoder(x)
    loss = head(h).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if step >= n_steps // 2:
        cache.append(h.detach().clone())  # LEAK-LINE
    clock.stop()
clock.report("leak_late")
out("leak_late", steps=n_steps, cached=len(cache))
