"""CUDA's lazy initialisation, as torch.cuda does it: calls queued with `_lazy_call` run right
after the first use initialises CUDA."""

import traceback

from . import memory  # noqa: F401

_initialized = False
_queued_calls = []


class OutOfMemoryError(RuntimeError):
    pass


def is_initialized():
    return _initialized


def _lazy_call(callable, **kwargs):
    if _initialized:
        callable()
    else:
        _queued_calls.append((callable, traceback.format_stack()))


def _lazy_init():
    global _initialized
    if _initialized:
        return
    memory._init()
    for queued_call, _ in _queued_calls:
        queued_call()
    _initialized = True


def empty(nbytes):
    """A tensor of `nbytes` bytes on the device."""
    _lazy_init()
    return memory._allocator.tensor(nbytes)
