"""Runs a program with PyTorch's own allocator recorder on (Python stacks) and dumps its snapshot
at the end: the reference for what the recorder sees of the same run.

    python3 record_snapshot.py OUT.pickle MAX_ENTRIES PROGRAM.py [ARGS...]"""
import os
import runpy
import sys

import torch

out, max_entries = sys.argv[1], int(sys.argv[2])
torch.cuda.memory._record_memory_history(max_entries=max_entries, stacks="python")
sys.argv = sys.argv[3:]
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    torch.cuda.memory._dump_snapshot(out)
