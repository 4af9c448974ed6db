"""cuBLAS and cuBLASLt matrix products of a few shapes and types: their workspaces are allocated
by the libraries themselves."""
import torch
from common import out

torch.manual_seed(0)
acc = 0.0
for m, n, k, dt in [(512, 512, 512, torch.float32), (2048, 1024, 4096, torch.bfloat16),
                    (4096, 4096, 4096, torch.float16), (333, 777, 555, torch.float32)]:
    a = torch.randn(m, k, device="cuda", dtype=dt)
    b = torch.randn(k, n, device="cuda", dtype=dt)
    acc += (a @ b).float().abs().mean().item()
    lin = torch.nn.Linear(k, n, device="cuda", dtype=dt)
    acc += lin(a).float().abs().mean().item()
torch.cuda.synchronize()
out("matmul", acc=f"{acc:.3f}")
