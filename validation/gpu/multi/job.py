"""One multi-rank training job for the multi-GPU validation, started by torchrun (one process a
GPU). Modes:
  ddp        DistributedDataParallel, 60 steps; nothing leaks
  fsdp       FSDP full sharding (fully_shard, PyTorch's ZeRO-3), 60 steps; nothing leaks
  ddp-leak   as ddp, but the LAST rank keeps 16 MiB of logits a step (LEAK-LINE): the rank that
             differs must be named first in the per-rank table
  pg         DDP, plus a new process group every 5 steps for a metrics all-reduce, never destroyed
             (destroy_process_group() at the end tears them all down)
Results (compared plain vs traced) go to stdout from rank 0; each rank's median step time goes to
stderr."""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

MODE = sys.argv[1]
STEPS = int(os.environ.get("VT_MULTI_STEPS", 60))
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dev = torch.device("cuda", local)
dist.init_process_group("nccl", device_id=dev)
torch.manual_seed(0)
VOCAB, D, SEQ, BATCH = 8192, 512, 256, 8


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(D, 8, 4 * D, batch_first=True, norm_first=True) for _ in range(4)
        )
        self.head = nn.Linear(D, VOCAB)

    def forward(self, x):
        h = self.embed(x)
        for b in self.blocks:
            h = b(h)
        return self.head(h)


model = Model().to(dev)
if MODE == "fsdp":
    from torch.distributed.fsdp import fully_shard

    for b in model.blocks:
        fully_shard(b)
    fully_shard(model)
else:
    model = nn.parallel.DistributedDataParallel(model, device_ids=[local])
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
kept, groups, times = [], [], []
for step in range(STEPS):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    x = torch.randint(0, VOCAB, (BATCH, SEQ), device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.float().view(-1, VOCAB), x.view(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if MODE == "ddp-leak" and rank == world - 1:
        kept.append(logits[:1].detach().float())  # LEAK-LINE
    if MODE == "pg" and step % 5 == 0:
        groups.append(dist.new_group(list(range(world))))
        metric = loss.detach().reshape(1).clone()
        dist.all_reduce(metric, group=groups[-1])
    torch.cuda.synchronize()
    times.append(time.perf_counter() - t0)
print(f"VT-TIME multi mode={MODE} rank={rank} median_ms={statistics.median(times[5:]) * 1e3:.2f}", file=sys.stderr, flush=True)
dist.barrier()
if rank == 0:
    print(f"VT multi mode={MODE} world={world} steps={STEPS} groups={len(groups)} params={sum(p.numel() for p in model.parameters())}", flush=True)
dist.destroy_process_group()
