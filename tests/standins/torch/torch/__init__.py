"""A stand-in for PyTorch: the entry points vramtrace's Python hooks use, and a CUDA caching
allocator behind them, on the CPU stand-in of the CUDA runtime (tests/standins/README.md).

- `torch.optim.optimizer.register_optimizer_step_post_hook` and an `Optimizer` whose `step()`
  runs the global post-hooks, as torch's does;
- `torch.nn.Module`, whose calls run the global forward hooks
  (`torch.nn.modules.module.register_module_forward_pre_hook` / `_forward_hook`);
- `torch.cuda`: lazy initialisation with `_lazy_call` queues, `torch.cuda.memory`'s
  `get_allocator_backend`, `_record_memory_history` and `_snapshot` (torch's layout), and
  `torch._C._cuda_attach_out_of_memory_observer`;
- `torch.empty(nbytes)`: a tensor from the allocator chosen by `PYTORCH_ALLOC_CONF` /
  `PYTORCH_CUDA_ALLOC_CONF` (`backend:cudaMallocAsync`: one `cudaMallocAsync` per tensor; else
  blocks carved from 8 MiB `cudaMalloc` segments, never given back), its CUDA calls made from
  the framework stand-in's library (`libtorch_standin.so`), as PyTorch's are from libc10_cuda.

Install it as `<dir>/site-packages/torch` so that its own frames count as a library's.
"""

__version__ = "2.11.0+standin"

from . import _C, version  # noqa: E402,F401
from . import cuda  # noqa: E402,F401
from . import nn  # noqa: E402,F401
from . import optim  # noqa: E402,F401
from .cuda import empty  # noqa: E402,F401
