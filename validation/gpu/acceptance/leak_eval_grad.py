"""Leak: an evaluation without `torch.no_grad()`. An MLP trained for 60 steps with the default
caching allocator evaluates every step on a fixed validation batch and keeps the validation loss
as a tensor (not `.item()`), so each kept loss holds its autograd graph and with it the
activations the evaluation's forward pass saved: about 32 MiB a step, allocated inside the
model's layers called from EVAL-LINE (the program's own line; nn.Sequential is library code) and
kept by the append at KEEP-LINE. The caching allocator serves those blocks from 20 MiB segments,
so the driver sees a new segment every step or two, at whichever line happened to need it.

Truth: steady growth of the measured bytes per step (the program measures
torch.cuda.memory_allocated() per step) from step 0, at EVAL-LINE."""
import torch
import torch.nn as nn

from acc import DEVICE, StepClock, fact, out, steps

TRUTH = {
    "kind": "leak",
    "steps": 60,
    "allocator": "default",
    "leaks": [{"marker": "EVAL-LINE", "cause_marker": "KEEP-LINE", "bytes_per_step": "measured:kept_bytes_per_step",
               "from_step": 0, "what": "an evaluation's autograd graph kept"}],
}

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 4096), nn.GELU(), nn.Linear(4096, 10)).to(DEVICE)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
loss_fn = nn.CrossEntropyLoss()
val_x = torch.randn(512, 1024, device=DEVICE)
val_y = torch.randint(0, 10, (512,), device=DEVICE)
val_losses = []
allocated = []
clock = StepClock()
n_steps = steps(60)
for step in range(n_steps):
    clock.start()
    x = torch.randn(256, 1024, device=DEVICE)
    y = torch.randint(0, 10, (256,), device=DEVICE)
    loss = loss_fn(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    val_loss = loss_fn(model(val_x), val_y)  # EVAL-LINE
    val_losses.append(val_loss)  # KEEP-LINE
    clock.stop()
    if DEVICE.type == "cuda":
        allocated.append(torch.cuda.memory_allocated())
clock.report("leak_eval_grad")
if len(allocated) > 20:
    fact("leak_eval_grad", kept_bytes_per_step=(allocated[-1] - allocated[9]) // (len(allocated) - 10))
out("leak_eval_grad", steps=n_steps, kept=len(val_losses))
