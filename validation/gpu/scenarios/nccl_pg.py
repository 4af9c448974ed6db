"""A single-rank NCCL process group: all-reduces of a few sizes, then destroy_process_group.
Run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ALLOC NCCL_DEBUG_FILE=... so NCCL writes its own
allocations (with pointers) to a file, which the check compares with the trace."""
import os

import torch
import torch.distributed as dist
from common import mark_step, out

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29531")
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
total = 0.0
for n in (1 << 10, 1 << 16, 1 << 22):
    t = torch.ones(n, device="cuda") * 3
    dist.all_reduce(t)
    total += t.sum().item()
torch.cuda.synchronize()
out("allreduce", total=f"{total:.1f}")
mark_step()  # step 1: every NCCL buffer is live here
dist.destroy_process_group()
torch.cuda.synchronize()
out("end", reserved=torch.cuda.memory_reserved())
mark_step()  # step 2: after destroy_process_group()
