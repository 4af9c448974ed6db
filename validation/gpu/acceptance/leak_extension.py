"""Leak: a small MLP trained for 120 steps (default caching allocator) that calls a custom CUDA
extension once per step (validation/gpu/ext/leaky.cu, `leaky_step`: cudaMalloc of 3 MiB, a kernel,
never freed — the extension keeps a raw device pointer for "statistics"). The extension's raw
cudaMalloc goes through its own statically linked CUDA runtime, outside PyTorch's allocator.

Truth: steady growth of 3 MiB per step from step 0, by the extension (libleaky.so, leaky_step),
called from LEAK-LINE."""
import ctypes
import sys

import torch
import torch.nn as nn

from acc import DEVICE, StepClock, out, steps

TRUTH = {
    "kind": "leak",
    "steps": 120,
    "allocator": "default",
    "args": ["{WORK}/libleaky.so"],
    "leaks": [{"marker": "LEAK-LINE", "bytes_per_step": 3145728, "from_step": 0, "what": "raw cudaMalloc in an extension", "module": "libleaky.so"}],
}

lib = ctypes.CDLL(sys.argv[1])
lib.leaky_step.restype = ctypes.c_int
lib.leaky_step.argtypes = [ctypes.c_size_t]
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 512)).to(DEVICE)
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
clock = StepClock()
n_steps = steps(120)
for step in range(n_steps):
    clock.start()
    x = torch.randn(128, 512, device=DEVICE)
    loss = model(x).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    rc = lib.leaky_step(3 << 20)  # LEAK-LINE
    assert rc == 0, rc
    clock.stop()
clock.report("leak_extension")
out("leak_extension", steps=n_steps)
