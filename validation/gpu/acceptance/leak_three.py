"""Three leaks in one loop: an MLP trained for 120 steps with the default caching allocator keeps
three things every step, each at its own line: a copy of a 4 MiB activation (ACT-LINE), the
8 MiB gradient of the first layer's weight (GRAD-LINE), and 1 MiB of the input (INPUT-LINE).
The caching allocator serves them from segments it asks the driver for at whichever line needs
one: the driver's view sees growth at other lines too, which is the same three causes.

Truth: three steady growths: 4 MiB/step at ACT-LINE, 8 MiB/step at GRAD-LINE, 1 MiB/step at
INPUT-LINE, each from step 0."""
import torch
import torch.nn as nn

from acc import DEVICE, StepClock, out, steps

TRUTH = {
    "kind": "leak",
    "steps": 120,
    "allocator": "default",
    "leaks": [
        {"marker": "ACT-LINE", "bytes_per_step": 4194304, "from_step": 0, "what": "activations kept"},
        {"marker": "GRAD-LINE", "bytes_per_step": 8388608, "from_step": 0, "what": "gradients kept"},
        {"marker": "INPUT-LINE", "bytes_per_step": 1048576, "from_step": 0, "what": "inputs kept"},
    ],
}

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 1024)).to(DEVICE)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
acts, grads, inputs = [], [], []
clock = StepClock()
n_steps = steps(120)
for step in range(n_steps):
    clock.start()
    x = torch.randn(512, 1024, device=DEVICE)
    h = model[1](model[0](x))
    loss = model[2](h).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    acts.append(h.detach().clone())  # ACT-LINE
    grads.append(model[0].weight.grad.clone())  # GRAD-LINE
    inputs.append(x[:256].clone())  # INPUT-LINE
    opt.step()
    clock.stop()
clock.report("leak_three")
out("leak_three", steps=n_steps, kept=len(acts) + len(grads) + len(inputs))
