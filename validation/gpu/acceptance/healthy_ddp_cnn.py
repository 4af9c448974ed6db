"""Healthy: a ResNet-18 (torchvision, built from scratch, 100 classes) trained for 100 steps under
DistributedDataParallel on a single-rank NCCL process group, with the cudaMallocAsync backend
(PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync: one allocation per tensor). The communicator
is made once and destroyed at the end; nothing leaks."""
import os

import torch
import torch.distributed as dist
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP

from acc import DEVICE, StepClock, out, steps

TRUTH = {
    "kind": "healthy",
    "steps": 100,
    "allocator": "async",
    "env": {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"},
    "nccl": True,
}

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29541")
backend = "nccl" if DEVICE.type == "cuda" else "gloo"
dist.init_process_group(backend, rank=0, world_size=1)
torch.manual_seed(0)
model = torchvision.models.resnet18(num_classes=100).to(DEVICE)
model = DDP(model, device_ids=[0] if DEVICE.type == "cuda" else None)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loss_fn = torch.nn.CrossEntropyLoss()
clock = StepClock()
n_steps = steps(100)
for step in range(n_steps):
    clock.start()
    images = torch.randn(64, 3, 64, 64, device=DEVICE)
    labels = torch.randint(0, 100, (64,), device=DEVICE)
    loss = loss_fn(model(images), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    clock.stop()
clock.report("healthy_ddp_cnn")
dist.destroy_process_group()
out("healthy_ddp_cnn", steps=n_steps)
