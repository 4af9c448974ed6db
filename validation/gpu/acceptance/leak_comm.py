"""Leak: a single-rank NCCL job that makes a new process group (and so a new NCCL communicator,
created at its first collective) every 5 steps for a "metrics" all-reduce and never destroys it.
At the end destroy_process_group() tears every group down, so the communicators' memory is
freed at exit: only the run itself shows the staircase. Default caching allocator, 100 steps.

Truth: a staircase from step 0 held by NCCL communicators, allocated at LEAK-LINE (PyTorch makes
a group's communicator at its first collective; new_group at LEAK-CAUSE makes no GPU call). Rate:
measured by the program from the driver's used memory (stderr: VT-FACT leak_comm
comm_bytes_per_step=…), device-wide, so run.sh runs this program alone."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn

from acc import DEVICE, StepClock, fact, out, steps, sync, used_device_bytes

TRUTH = {
    "kind": "leak",
    "steps": 100,
    "allocator": "default",
    "nccl": True,
    "serial": True,
    "leaks": [{"marker": "LEAK-LINE", "cause_marker": "LEAK-CAUSE", "bytes_per_step": "measured:comm_bytes_per_step", "from_step": 0, "what": "communicator per N steps"}],
}

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29543")
dist.init_process_group("nccl" if DEVICE.type == "cuda" else "gloo", rank=0, world_size=1)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)).to(DEVICE)
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
warm = torch.ones(1024, device=DEVICE)
dist.all_reduce(warm)  # the default group's communicator, and NCCL's kernels, before step 0
sync()
groups = []
clock = StepClock()
n_steps = steps(100)
used0 = used_device_bytes() - torch.cuda.memory_reserved() if DEVICE.type == "cuda" else 0
for step in range(n_steps):
    clock.start()
    x = torch.randn(64, 256, device=DEVICE)
    loss = model(x).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if step % 5 == 0:
        groups.append(dist.new_group([0]))  # LEAK-CAUSE
        metric = loss.detach().reshape(1).clone()
        dist.all_reduce(metric, group=groups[-1])  # LEAK-LINE
    clock.stop()
sync()
used1 = used_device_bytes() - torch.cuda.memory_reserved() if DEVICE.type == "cuda" else 0
fact("leak_comm", comm_bytes_per_step=(used1 - used0) // n_steps, comms=len(groups))
clock.report("leak_comm")
dist.destroy_process_group()
out("leak_comm", steps=n_steps, groups=len(groups))
