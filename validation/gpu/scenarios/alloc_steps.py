"""PyTorch allocations over six steps with a planted leak of 3 MiB per step; prints the caching
allocator's own numbers (reserved, allocated) at every step. Run under the default allocator,
expandable segments and the cudaMallocAsync backend (PYTORCH_CUDA_ALLOC_CONF).

A step mark follows every printed line (and the synchronize before it), so the live set the trace
holds at step mark k+1 can be compared with what PyTorch printed at step k; the mark after the
last line is the end of the run."""
import torch
from common import mark_step, out

torch.manual_seed(0)
keep = []
for step in range(6):
    mark_step()
    a = torch.randn(1024, 1024, device="cuda")
    b = torch.randn(256, 4096, device="cuda")
    c = (a @ a).sum() + b.sum()
    keep.append(torch.empty(3 << 20, dtype=torch.uint8, device="cuda"))
    del a, b
    torch.cuda.synchronize()
    out(
        "step",
        step=step,
        reserved=torch.cuda.memory_reserved(),
        allocated=torch.cuda.memory_allocated(),
        checksum=f"{c.item():.2f}",
    )
mark_step()
torch.cuda.synchronize()
out("end", reserved=torch.cuda.memory_reserved(), allocated=torch.cuda.memory_allocated())
mark_step()
