"""A PyTorch loop for the live alerts, metrics and the CI gate on the GPU (validation/gpu/live).

`leak`: each step keeps its 4 MiB output in a list (the planted leak, at the `kept.append` line);
`healthy`: the same step without keeping anything. 60 steps, optimizer steps mark them (the
Python hooks of `vramtrace run`). A SIGUSR1 handler records the step it arrived at, as a
checkpointing script would; the last line says whether it ran.
"""
import signal
import sys
import time

import torch

got = []
signal.signal(signal.SIGUSR1, lambda *_: got.append(step))

shape = sys.argv[1]
model = torch.nn.Linear(1024, 1024).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
kept = []
step = 0
for step in range(1, 61):
    x = torch.randn(1024, 1024, device="cuda")
    y = model(x)
    y.sum().backward()
    opt.step()
    opt.zero_grad()
    if shape == "leak":
        kept.append(y.detach())  # the planted leak: 4 MiB a step
    torch.cuda.synchronize()
    time.sleep(0.02)
deadline = time.time() + 3
while shape == "leak" and not got and time.time() < deadline:
    time.sleep(0.05)
print("SIGUSR1 at step %d" % got[0] if got else "no SIGUSR1")
