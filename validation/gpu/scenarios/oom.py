"""Runs out of memory on purpose: a 4 TiB request fails; the script catches it and carries on."""
import torch
from common import out

keep = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
try:
    torch.empty(4 << 40, dtype=torch.uint8, device="cuda")
    out("oom", caught=False)
except torch.OutOfMemoryError:
    out("oom", caught=True)
after = torch.empty(1 << 20, device="cuda")
out("after", reserved=torch.cuda.memory_reserved())
