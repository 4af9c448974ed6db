"""vramtrace from Python: finds GPU memory leaks in deep-learning training.

The wheel installs the `vramtrace` command and the tracer library `libvramtrace.so` (in
`<prefix>/bin` and `<prefix>/lib`, where `vramtrace run` looks for it); this module finds both
and speaks to the tracer when a program runs under it:

    import vramtrace

    for batch in loader:
        vramtrace.mark_step()        # a no-op when not traced
        ...

Run a program traced with `vramtrace run -- python train.py` (or `python -m vramtrace run ...`).
Every function here is safe to call without the tracer: nothing raises, nothing is loaded.

A trace, or a directory of them, read back as pyarrow tables (needs pyarrow):

    data = vramtrace.load("traces/")
    data.findings.to_pylist()        # the report's findings of each trace, headline first
    frames = data.to_pandas()        # every table as a DataFrame
"""

import ctypes
import importlib.metadata
import os
import shutil
import threading

from .data import Error, Tables, TablesIncomplete, load

__all__ = [
    "enabled",
    "mark_step",
    "library_path",
    "executable",
    "load",
    "Tables",
    "Error",
    "TablesIncomplete",
]

#: The tracer's file name (tools/src/run: `run` looks for it beside itself and in `../lib/`).
LIBRARY_NAME = "libvramtrace.so"
#: The distribution whose installed files hold the command and the library.
DISTRIBUTION = "vramtrace"

_lock = threading.Lock()
#: The tracer's `vramtrace_mark_step`, None when the tracer is not loaded; unset until first asked.
_mark = ...


def _tracer_mark():
    """The tracer's `vramtrace_mark_step` from the process's global scope (where LD_PRELOAD puts
    the tracer), or None. Looked up once: the tracer is preloaded or not for the whole run."""
    global _mark
    mark = _mark
    if mark is not ...:
        return mark
    with _lock:
        if _mark is ...:
            try:
                mark = ctypes.CDLL(None).vramtrace_mark_step
                mark.restype = ctypes.c_uint64
                mark.argtypes = []
            except (OSError, AttributeError):
                mark = None
            _mark = mark
        return _mark


def enabled():
    """Whether the tracer is loaded in this process (under `vramtrace run` or
    `LD_PRELOAD=libvramtrace.so`)."""
    return _tracer_mark() is not None


def mark_step():
    """Marks the start of a training step; returns the step number (1 for the first mark), or
    None when the tracer is not loaded. Call it at the top of each step: `report` then measures
    growth per step from these marks (PyTorch programs under `vramtrace run` get marks from
    optimizer steps without it)."""
    mark = _tracer_mark()
    if mark is None:
        return None
    return int(mark())


def _installed(name, folder):
    """The installed file `folder/name` of the distribution, from its RECORD; None if the
    distribution is not installed or does not list it."""
    try:
        files = importlib.metadata.files(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files or ():
        if f.name != name:
            continue
        # RECORD lists data and scripts relative to site-packages (`../../libvramtrace.so`).
        path = os.path.realpath(f.locate())
        if os.path.basename(os.path.dirname(path)) == folder and os.path.isfile(path):
            return path
    return None


def library_path():
    """The path of the tracer library `libvramtrace.so`: `VRAMTRACE_LIB` when set (as
    `vramtrace run` reads it), else the one this package installed. Raises FileNotFoundError when
    there is none."""
    explicit = os.environ.get("VRAMTRACE_LIB")
    if explicit:
        if not os.path.isfile(explicit):
            raise FileNotFoundError("VRAMTRACE_LIB %s: no such file" % explicit)
        return os.path.realpath(explicit)
    path = _installed(LIBRARY_NAME, "lib")
    if path is None:
        raise FileNotFoundError(
            "%s is not installed with the %s package; set VRAMTRACE_LIB"
            % (LIBRARY_NAME, DISTRIBUTION)
        )
    return path


def executable():
    """The path of the `vramtrace` command this package installed, else the one on PATH. Raises
    FileNotFoundError when there is none."""
    path = _installed("vramtrace", "bin") or shutil.which("vramtrace")
    if path is None:
        raise FileNotFoundError(
            "the vramtrace command is not installed: not in this package's files (the wheel puts "
            "it in <prefix>/bin) nor on PATH; install the wheel, or put a built `vramtrace` on PATH"
        )
    return path
