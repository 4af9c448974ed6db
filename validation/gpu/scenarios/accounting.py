"""Where device memory goes that no allocation call explains: the driver's used memory
(torch.cuda.mem_get_info) and PyTorch's reserved bytes at each stage — context creation, the
first matrix product (cuBLAS handle and kernels), a handful of other kernels. Run once with the
default lazy module loading and once with CUDA_MODULE_LOADING=EAGER: memory that moves from the
later stages into the first under EAGER is kernel code loaded on first use."""
import sys

import torch
from common import mark_step, out


def used():
    free, total = torch.cuda.mem_get_info()
    return total - free


def stage(name):
    torch.cuda.synchronize()
    mark_step()
    print(
        f"VT-MEM {name} used={used()} reserved={torch.cuda.memory_reserved()}",
        file=sys.stderr,
        flush=True,
    )


torch.zeros(1, device="cuda")
stage("context")
a = torch.randn(4096, 4096, device="cuda")
b = a @ a
stage("matmul")
c = torch.softmax(a, -1) + torch.nn.functional.gelu(a) + torch.nn.functional.layer_norm(a, (4096,))
d = torch.nn.functional.conv2d(a.view(1, 1, 4096, 4096)[:, :, :512, :512], torch.randn(8, 1, 3, 3, device="cuda"))
stage("kernels")
out("accounting", ok=bool(torch.isfinite(b).all() and torch.isfinite(c).all() and torch.isfinite(d).all()))
