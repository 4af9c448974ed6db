#!/usr/bin/env python3
"""Which imports PyTorch's first `torch.cuda.memory._snapshot()` of a process makes, and from
where (docs/pytorch.md: the hand-over's one-time cost). With the recorder on as `vramtrace run`'s
hooks set it, a finder placed first on `sys.meta_path` prints the stack that imports
`torch._dynamo`, `torch._higher_order_ops` or `torch.distributed.fsdp`; then the snapshot's time
and the modules it imported. No tracer is involved. One device call:

  run(command="python3 validation/gpu/harm/snapshot_imports.py")
"""
import sys
import time
import traceback

import torch

WATCHED = ("torch._dynamo", "torch._higher_order_ops", "torch.distributed.fsdp")


class Spy:
    """Says who imports a watched module; finds nothing itself."""

    def find_spec(self, name, path=None, target=None):
        if name in WATCHED:
            print("== import", name, "from:", flush=True)
            print("".join(traceback.format_stack(limit=25)[:-1]), flush=True)
        return None


def main():
    torch.cuda.memory._record_memory_history(
        enabled="all", context="alloc", stacks="python", max_entries=1000
    )
    x = torch.empty(10, device="cuda")
    del x
    before = set(sys.modules)
    sys.meta_path.insert(0, Spy())
    t0 = time.perf_counter()
    torch.cuda.memory._snapshot()
    print("snapshot %.0f ms" % ((time.perf_counter() - t0) * 1e3))
    new = sorted(set(sys.modules) - before)
    print(len(new), "modules imported; first 15:", new[:15])


if __name__ == "__main__":
    main()
