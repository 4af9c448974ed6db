"""A small GPT-style training loop (8 layers, d=1024, seq 1024, batch 8, bf16 autocast, AdamW),
the same shape as the anchor overheads in cuda-interception.md; prints the median step time to
stderr and the final loss to stdout."""
import statistics
import sys
import time

import torch
from common import mark_step, out, timing

torch.manual_seed(0)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
d, layers, seq, batch = 1024, 8, 1024, 8
layer = lambda: torch.nn.TransformerEncoderLayer(d, 16, 4 * d, batch_first=True, norm_first=True)
model = torch.nn.Sequential(*[layer() for _ in range(layers)]).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(batch, seq, d, device="cuda")
times = []
for i in range(steps):
    mark_step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    torch.cuda.synchronize()
    times.append(time.perf_counter() - t0)
timing("train", median_ms=f"{statistics.median(times[5:]) * 1e3:.2f}", steps=steps)
out("train", steps=steps, reserved=torch.cuda.memory_reserved())
