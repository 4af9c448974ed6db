"""Runs a program with a step mark at every optimizer step, the way vramtrace's Python bootstrap
does under `vramtrace run` (used to compare traces with and without marks):

    python3 stepmark.py PROGRAM.py [ARGS...]"""
import ctypes
import os
import runpy
import sys

from torch.optim.optimizer import register_optimizer_step_post_hook

try:
    _mark = ctypes.CDLL(None).vramtrace_mark_step
except AttributeError:
    _mark = None
if _mark is not None:
    # (torch.optim deletes its submodules' names: reach the function by a from-import)
    register_optimizer_step_post_hook(lambda *_: _mark())
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
runpy.run_path(sys.argv[0], run_name="__main__")
