"""Healthy under FSDP: a small transformer sharded with fully_shard (FSDP2, PyTorch's ZeRO-3) on
a single-rank NCCL process group, trained for 60 steps with AdamW. FSDP all-gathers each block's
parameters before its forward and backward and frees them after; nothing leaks.

Truth: no growth."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard

from acc import DEVICE, StepClock, out, steps

TRUTH = {"kind": "healthy", "steps": 60, "allocator": "default", "nccl": True}

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29543")
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
torch.manual_seed(0)
VOCAB, D, SEQ, BATCH = 8192, 512, 256, 8


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(D, 8, 4 * D, batch_first=True, norm_first=True) for _ in range(4))
        self.head = nn.Linear(D, VOCAB)

    def forward(self, x):
        h = self.embed(x)
        for b in self.blocks:
            h = b(h)
        return self.head(h)


model = Model().to(DEVICE)
for block in model.blocks:
    fully_shard(block)
fully_shard(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
clock = StepClock()
n_steps = steps(60)
for step in range(n_steps):
    clock.start()
    x = torch.randint(0, VOCAB, (BATCH, SEQ), device=DEVICE)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.float().view(-1, VOCAB), x.view(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    clock.stop()
clock.report("healthy_fsdp")
dist.destroy_process_group()
out("healthy_fsdp", steps=n_steps)
