"""Helpers for the acceptance programs that must not import torch (CuPy, JAX): result lines on
stdout (compared between the plain and the traced run), measured facts on stderr. acc.py builds
on these for the PyTorch programs."""
import os
import sys


def steps(default):
    """The program's number of steps (VT_ACC_STEPS overrides, for smoke tests)."""
    return int(os.environ.get("VT_ACC_STEPS", default))


def out(tag, **kv):
    """A result line, compared byte for byte between the plain and the traced run."""
    print(f"VT {tag} " + " ".join(f"{k}={v}" for k, v in kv.items()), flush=True)


def fact(tag, **kv):
    """A measured fact (timings, memory figures): differs between runs, so it goes to stderr."""
    print(f"VT-FACT {tag} " + " ".join(f"{k}={v}" for k, v in kv.items()), file=sys.stderr, flush=True)
