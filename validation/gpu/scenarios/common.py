"""Helpers shared by the GPU validation scenarios: deterministic result lines on stdout (compared
with and without the tracer), timings on stderr (not compared), and step marks for the tracer."""
import ctypes
import sys

_mark = None
try:
    # Provided by libvramtrace.so when it is preloaded; absent otherwise.
    _mark = ctypes.CDLL(None).vramtrace_mark_step
    _mark.restype = ctypes.c_uint64
except (AttributeError, OSError):
    _mark = None


def mark_step():
    """Tells the tracer a training step starts (no-op without the tracer)."""
    if _mark is not None:
        _mark()


def out(tag, **kv):
    """A result line: compared byte for byte between the plain and the traced run."""
    fields = " ".join(f"{k}={v}" for k, v in kv.items())
    print(f"VT {tag} {fields}", flush=True)


def timing(tag, **kv):
    """A timing line: differs between runs by nature, so it goes to stderr."""
    fields = " ".join(f"{k}={v}" for k, v in kv.items())
    print(f"VT-TIME {tag} {fields}", file=sys.stderr, flush=True)
