"""Healthy under torch.compile: a small transformer language model compiled with torch.compile
(inductor, default mode) and trained for 100 steps with AdamW and the default caching allocator.
Compilation allocates while it autotunes and builds its kernels; training then settles. Nothing
leaks.

Truth: no growth."""
import torch
import torch.nn as nn

from acc import DEVICE, StepClock, out, steps

TRUTH = {"kind": "healthy", "steps": 100, "allocator": "default"}

torch.manual_seed(0)
VOCAB, D, SEQ, BATCH = 4096, 256, 128, 16
layer = nn.TransformerEncoderLayer(D, 4, 4 * D, batch_first=True, norm_first=True)
model = nn.Sequential(nn.Embedding(VOCAB, D), nn.TransformerEncoder(layer, 2), nn.Linear(D, VOCAB)).to(DEVICE)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
clock = StepClock()
n_steps = steps(100)
for step in range(n_steps):
    clock.start()
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), device=DEVICE)
    logits = compiled(tokens[:, :-1])
    loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    clock.stop()
clock.report("healthy_compile")
out("healthy_compile", steps=n_steps)
