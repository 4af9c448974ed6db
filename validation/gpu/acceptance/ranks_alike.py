"""Four ranks on one GPU, every one leaking alike: the data-parallel job whose ranks all keep what
one line makes (the usual case: the same script runs on every rank). Started by torchrun with 4
processes on cuda:0, DDP over gloo (NCCL refuses two ranks on one device). A small language model
trained for 40 steps; each rank keeps 4 MiB of logits a step (1 x 128 x 8192 float32) at
LEAK-LINE. Rank 0 prints the results (compared plain vs traced).

Truth: every rank grows 4 MiB per step from step 0 at LEAK-LINE. No rank differs from the others,
so the rank table names none; the report of the directory says the shared cause in its headline
and prints one rank's report in full for all of them."""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

from plain import out, steps

TRUTH = {
    "kind": "ranks",
    "ranks": 4,
    "leaking_rank": "all",
    "steps": 40,
    "allocator": "default",
    "leaks": [{"marker": "LEAK-LINE", "bytes_per_step": 4194304, "from_step": 0, "what": "logits kept on every rank"}],
}

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dev = torch.device("cuda", 0)
torch.cuda.set_device(dev)
dist.init_process_group("gloo")
torch.manual_seed(0)
VOCAB, D, SEQ, BATCH = 8192, 256, 128, 8
layer = nn.TransformerEncoderLayer(D, 4, 4 * D, batch_first=True, norm_first=True)
model = nn.Sequential(nn.Embedding(VOCAB, D), nn.TransformerEncoder(layer, 2), nn.Linear(D, VOCAB)).to(dev)
model = nn.parallel.DistributedDataParallel(model, device_ids=[0])
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
kept = []
n_steps = steps(40)
for step in range(n_steps):
    x = torch.randint(0, VOCAB, (BATCH, SEQ), device=dev)
    logits = model(x)
    loss = nn.functional.cross_entropy(logits.view(-1, VOCAB), x.view(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    kept.append(logits[:1].detach().clone())  # LEAK-LINE
dist.barrier()
if rank == 0:
    out("ranks_alike", world=world, steps=n_steps)
print(f"VT-FACT ranks_alike rank={rank} kept={len(kept)}", file=sys.stderr, flush=True)
dist.destroy_process_group()
