"""A small training loop run long enough to rotate a bounded trace (segments.sh): a 256-wide MLP
stepped VT_SEG_STEPS times (default 40,000) with SGD, and from the middle step on one 64 KiB
tensor kept a step at LEAK-LINE. Under `vramtrace run --per-tensor` every tensor is a driver
allocation, so each step writes some tens of records and the trace grows by megabytes.

Truth: steady growth of 65,536 B per optimizer step from step VT_SEG_STEPS / 2, at LEAK-LINE;
with VT_SEG_LEAK=0 nothing is kept (a healthy loop: no growth anywhere)."""
import os

import torch
import torch.nn as nn

steps = int(os.environ.get("VT_SEG_STEPS", "40000"))
leak = os.environ.get("VT_SEG_LEAK", "1") != "0"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 256)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
kept = []
for step in range(steps):
    x = torch.randn(64, 256, device="cuda")
    loss = model(x).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if leak and step >= steps // 2:
        kept.append(torch.zeros(16384, device="cuda"))  # LEAK-LINE
print(f"segments_loop: {steps} steps, {len(kept)} tensors kept, loss {loss.item():.6f}")
