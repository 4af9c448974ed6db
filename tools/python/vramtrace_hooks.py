"""vramtrace's PyTorch hooks: training steps from optimizer steps, and PyTorch's own view of its
allocator (settings, and the history of every tensor block) handed to the tracer
(docs/pytorch.md).

`vramtrace run` installs them through its `sitecustomize`. Without it (a bare
`LD_PRELOAD=libvramtrace.so`), put this directory on PYTHONPATH, or call
`vramtrace_hooks.install()` at the top of the program.

Both only put a finder on `sys.meta_path` that waits for `import torch`; a program that never
imports torch pays one string comparison per import. Once torch is imported (and the finder has
removed itself), and only if the tracer is loaded in the process, the hooks:

- mark one training step per iteration from a global optimizer step post-hook: an optimizer
  marks a step when it steps again before the others that stepped since the last mark (so a GAN's
  two optimizers, or parameter groups split over several, make one step per iteration);
- until an optimizer steps, mark an iteration at each outermost `nn.Module` call (global
  forward hooks, removed at the first optimizer step): the step of a loop without an optimizer,
  such as an inference server's (one request, one model call);
- when the tracer's live analysis raises an alert and waits for PyTorch's own view
  (`vramtrace_alert_pending`), hand it a snapshot of the memory history recorder at the next
  step, so the alert names the line whose tensors stay live;
- when torch initialises CUDA (a call queued with `torch.cuda._lazy_call`, so CUDA is never
  initialised by us), record the allocator configuration (`PYTORCH_ALLOC_CONF` /
  `PYTORCH_CUDA_ALLOC_CONF` and the backend torch actually uses) and, with the native caching
  allocator, start PyTorch's memory history recorder (bounded ring, Python stacks, stacks of
  allocations only); its snapshot goes to the tracer at exit and at the first out-of-memory error.

Nothing here imports torch, and nothing here raises into the program: trouble is one warning line
on stderr (none with VRAMTRACE_QUIET=1).

Settings (environment):
- VRAMTRACE_TORCH_STEPS: 1 (default) marks steps from optimizer steps; 0 does not.
- VRAMTRACE_TORCH_HISTORY: entries in the recorder's ring (default 100000); 0 leaves the
  recorder off.
"""

import collections
import sys
import time

#: Entries kept by PyTorch's memory history recorder unless VRAMTRACE_TORCH_HISTORY says.
DEFAULT_HISTORY = 100000
#: Payload kinds (collector/src/torch/).
KIND_ALLOCATOR = b"torch.allocator"
KIND_SNAPSHOT = b"torch.memory_snapshot"
#: The compact snapshot's format (collector/src/torch/snapshot.rs).
SNAPSHOT_FORMAT = "vramtrace-torch-snapshot/1"
#: The allocator settings variables, in the order torch reads them (the first set wins).
ALLOC_CONF_VARIABLES = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")

#: Step marks kept with their wall-clock time (the last ones), handed over with the history:
#: torch stamps its actions with the same clock, so steps and actions line up to the microsecond.
MARKS_KEPT = 100000

_installed = False
_hooked = False
#: (step number, time.time_ns()) of the marks made here: iteration marks until the first
#: optimizer step, then step marks only (the tracer's reader does the same).
_marks = collections.deque(maxlen=MARKS_KEPT)
#: The allocator view, once torch initialised CUDA (to hand its history over for an alert).
_view = None
#: The iteration clock while it runs (stopped at the first optimizer step).
_iterations = None
#: Seconds between two snapshots handed over for alerts, at least (the tracer waits as long for
#: the next one: `VIEW_EVERY` in preload/src/monitor/mod.rs).
ALERT_SNAPSHOT_EVERY = 30.0


def install():
    """Installs the hooks: now if torch is already imported, else when it is. Idempotent (and a
    no-op beside the watch `vramtrace run`'s sitecustomize installs)."""
    global _installed
    if _installed:
        return
    _installed = True
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "optim", None) is not None:
        _torch_imported(torch)
        return
    sys.meta_path.insert(0, _TorchWatch())


class _TorchWatch:
    """Waits for `import torch` (see find_torch_spec)."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        return find_torch_spec(self, name, path, target)


def find_torch_spec(watch, name, path, target):
    """torch's spec, found by the finders after `watch` on `sys.meta_path`, with torch's own
    loader made to run the hooks once torch's module has executed, and `watch` removed then. The
    loader object stays the one the import system would have used (`torch.__loader__` and
    `__spec__` are unchanged); only its `exec_module` is wrapped, for this one call."""
    meta_path = sys.meta_path
    try:
        later = meta_path[meta_path.index(watch) + 1 :]
    except ValueError:
        return None
    for finder in later:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        spec = find(name, path, target)
        if spec is not None:
            break
    else:
        return None
    loader = spec.loader
    original = getattr(loader, "exec_module", None)
    if original is None:
        return spec

    def exec_module(module):
        try:
            original(module)
        finally:
            try:
                del loader.exec_module
            except AttributeError:
                pass
        # torch is whole: stop watching imports, then hook it.
        try:
            sys.meta_path.remove(watch)
        except ValueError:
            pass
        _torch_imported(module)

    try:
        loader.exec_module = exec_module
    except (AttributeError, TypeError):
        _warn("cannot watch torch's import (its loader takes no attributes); no torch hooks")
        try:
            sys.meta_path.remove(watch)
        except ValueError:
            pass
    return spec


def _warn(message):
    import os

    if not _truthy(os.environ.get("VRAMTRACE_QUIET", "0")):
        try:
            sys.stderr.write("vramtrace: warning: " + message + "\n")
        except Exception:
            pass


def _say(message):
    """One line on stderr (diagnostics the user asked for)."""
    try:
        sys.stderr.write("vramtrace: " + message + "\n")
    except Exception:
        pass


def _truthy(value):
    return value.strip().lower() in ("1", "true", "yes", "on")


def _setting(name, default):
    """A non-negative integer setting; a bad value is one warning and the default."""
    import os

    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
        if value < 0:
            raise ValueError
        return value
    except ValueError:
        _warn("%s=%r is not a non-negative integer; using %d" % (name, raw, default))
        return default


def _tracer():
    """The tracer's C API, or None when the tracer is not loaded in this process."""
    import ctypes

    try:
        lib = ctypes.CDLL(None)
        mark = lib.vramtrace_mark_step
    except (OSError, AttributeError):
        return None
    mark.restype = ctypes.c_uint64
    mark.argtypes = []
    attach = getattr(lib, "vramtrace_attach", None)
    if attach is not None:
        attach.restype = ctypes.c_int
        attach.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    iteration = getattr(lib, "vramtrace_mark_iteration", None)
    if iteration is not None:
        iteration.restype = ctypes.c_uint64
        iteration.argtypes = []
    pending = getattr(lib, "vramtrace_alert_pending", None)
    if pending is not None:
        pending.restype = ctypes.c_int
        pending.argtypes = []
    return _Tracer(mark, attach, iteration, pending)


class _Tracer:
    def __init__(self, mark, attach, iteration=None, pending=None):
        self.mark = mark
        self.mark_iteration = iteration
        self.alert_pending = pending
        self._attach = attach
        self._last_alert_snapshot = None

    def attach(self, kind, payload):
        """Hands `payload` (bytes) to the tracer; whether it was taken."""
        if self._attach is None:
            return False
        return self._attach(kind, payload, len(payload)) == 0

    def poll_alert(self):
        """At a step: when an alert waits for PyTorch's view, hands it the recorder's snapshot
        (at most once per ALERT_SNAPSHOT_EVERY seconds)."""
        if self.alert_pending is None or _view is None or not self.alert_pending():
            return
        now = time.monotonic()
        last = self._last_alert_snapshot
        if last is not None and now - last < ALERT_SNAPSHOT_EVERY:
            return
        self._last_alert_snapshot = now
        _view.hand_over("alert", None)


def _torch_imported(torch):
    global _hooked
    if _hooked:
        return
    _hooked = True
    try:
        tracer = _tracer()
        if tracer is None:
            return
        if _setting("VRAMTRACE_TORCH_STEPS", 1) != 0:
            _install_step_clock(torch, tracer)
            _install_iteration_clock(torch, tracer)
        _install_allocator_view(torch, tracer)
    except Exception as e:
        _warn("torch hooks failed: %r" % (e,))


class StepClock:
    """Marks one training step per iteration from optimizer steps.

    The rule: an optimizer that steps while it is among those that stepped since the last mark
    starts a new iteration, and marks it; any other optimizer joins the current iteration. The
    first step ever marks too. So one optimizer marks each of its steps; optimizers that each
    step once an iteration (a GAN's discriminator and generator, parameter groups split over two
    optimizers) mark once an iteration, whatever their order; an optimizer replaced by a new one
    loses one mark at the switch. An optimizer that steps k times per iteration of another (a
    WGAN critic) marks k times: its steps are the finest loop there is.
    """

    def __init__(self, tracer):
        self._tracer = tracer
        self._since_mark = set()
        self._marked = False

    def __call__(self, optimizer, args=None, kwargs=None):
        key = id(optimizer)
        if not self._since_mark or key in self._since_mark:
            self._since_mark = {key}
            if not self._marked:
                # The program steps an optimizer: its steps are these, not model calls.
                self._marked = True
                _stop_iteration_clock()
            step = self._tracer.mark()
            _marks.append((step, time.time_ns()))
            self._tracer.poll_alert()
        else:
            self._since_mark.add(key)


def _install_step_clock(torch, tracer):
    # torch.optim deletes its `optimizer` attribute; the module stays in sys.modules.
    optimizer = sys.modules.get("torch.optim.optimizer")
    if optimizer is None:
        import importlib

        optimizer = importlib.import_module("torch.optim.optimizer")
    register = getattr(optimizer, "register_optimizer_step_post_hook", None)
    if register is None:
        _warn("this torch has no global optimizer step hook; steps come from the trace alone")
        return
    register(StepClock(tracer))


class IterationClock:
    """Marks one iteration per outermost `nn.Module` call, for a program that steps no
    optimizer: the model call of an inference loop is its step.

    Global forward hooks count how deep module calls are nested on each thread; the outermost
    call marks an iteration. They run on every module call, so they are removed at the first
    optimizer step (the step clock's marks are then the steps, and the iterations marked before
    are ignored by the tracer's reader). A hook never raises into the program.
    """

    def __init__(self, tracer):
        import threading

        self._tracer = tracer
        self._depth = threading.local()
        self._handles = []

    def install(self, module):
        self._handles.append(module.register_module_forward_pre_hook(self._enter))
        try:
            self._handles.append(module.register_module_forward_hook(self._leave, always_call=True))
        except TypeError:
            self._handles.append(module.register_module_forward_hook(self._leave))

    def stop(self):
        for h in self._handles:
            try:
                h.remove()
            except Exception:
                pass
        self._handles = []

    def _enter(self, module, args):
        try:
            depth = getattr(self._depth, "n", 0)
            self._depth.n = depth + 1
            if depth == 0 and self._handles:
                n = self._tracer.mark_iteration()
                _marks.append((n, time.time_ns()))
                self._tracer.poll_alert()
        except Exception:
            pass

    def _leave(self, module, args, output):
        try:
            self._depth.n = max(0, getattr(self._depth, "n", 0) - 1)
        except Exception:
            pass


def _install_iteration_clock(torch, tracer):
    global _iterations
    if tracer.mark_iteration is None:
        return
    module = sys.modules.get("torch.nn.modules.module")
    if module is None or not hasattr(module, "register_module_forward_pre_hook"):
        return
    clock = IterationClock(tracer)
    clock.install(module)
    _iterations = clock


def _stop_iteration_clock():
    """The first optimizer step: model calls are no longer steps, and the marks kept for the
    recorder's history are the optimizer's from now on."""
    global _iterations
    if _iterations is not None:
        _iterations.stop()
        _iterations = None
        _marks.clear()


class _AllocatorView:
    """PyTorch's allocator, seen from inside: its settings and its recorder's history."""

    def __init__(self, torch, tracer):
        self.torch = torch
        self.tracer = tracer
        self.history = _setting("VRAMTRACE_TORCH_HISTORY", DEFAULT_HISTORY)
        self.recording = False
        self.pid = None
        self.ooms = 0

    def on_cuda_init(self):
        try:
            self._on_cuda_init()
        except Exception as e:
            _warn("reading torch's allocator failed: %r" % (e,))

    def _on_cuda_init(self):
        import json
        import os

        torch = self.torch
        memory = torch.cuda.memory
        backend = None
        try:
            backend = memory.get_allocator_backend()
        except Exception as e:
            _warn("torch.cuda.memory.get_allocator_backend() failed: %r" % (e,))
        recorder = {"max_entries": self.history, "context": "alloc", "stacks": "python"}
        if self.history == 0:
            recorder["state"] = "off"
        elif backend != "native":
            # cudaMallocAsync has no recorder: every tensor is a driver call the tracer sees.
            recorder["state"] = "not available with this backend"
        else:
            try:
                memory._record_memory_history(
                    enabled="all",
                    context="alloc",
                    stacks="python",
                    max_entries=self.history,
                )
                self.recording = True
                self.pid = os.getpid()
                recorder["state"] = "on"
            except Exception as e:
                recorder["state"] = "failed: %r" % (e,)
        if self.recording:
            import atexit

            atexit.register(self.at_exit)
            attach_observer = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
            if attach_observer is not None:
                try:
                    attach_observer(self.on_oom)
                except Exception as e:
                    _warn("cannot watch out-of-memory errors: %r" % (e,))
        facts = {
            "torch_version": str(getattr(torch, "__version__", "")),
            "cuda_version": str(getattr(getattr(torch, "version", None), "cuda", None) or ""),
            "backend": backend,
            "env": {name: os.environ.get(name) for name in ALLOC_CONF_VARIABLES},
            "recorder": recorder,
            "pid": os.getpid(),
        }
        self.tracer.attach(KIND_ALLOCATOR, json.dumps(facts).encode())

    def at_exit(self):
        self.hand_over("exit", None)

    def on_oom(self, device, alloc, device_allocated, device_free):
        # The allocator calls this before it raises, without its lock held; only the first
        # error's state is handed over (a program that catches OOMs to probe batch sizes would
        # otherwise hand over one history per probe).
        self.ooms += 1
        if self.ooms == 1:
            oom = {
                "device": device,
                "requested": alloc,
                "device_allocated": device_allocated,
                "device_free": device_free,
            }
            self.hand_over("oom", oom)

    def hand_over(self, reason, oom):
        import os

        if not self.recording or os.getpid() != self.pid:
            return
        started = time.perf_counter()
        taken = started
        entries = 0
        try:
            snapshot = self.torch.cuda.memory._snapshot()
            taken = time.perf_counter()
            entries = sum(len(t) for t in snapshot.get("device_traces", ()))
            payload = compact_snapshot(snapshot, reason, self.history, oom, list(_marks))
            if not self.tracer.attach(KIND_SNAPSHOT, payload):
                _warn("the tracer did not take torch's memory history (%s)" % reason)
        except Exception as e:
            _warn("handing over torch's memory history failed (%s): %r" % (reason, e))
        if _truthy(os.environ.get("VRAMTRACE_SELF_PROFILE", "0")):
            done = time.perf_counter()
            _say("self-profile: torch's memory history handed over (%s): %d entries in %.0f ms "
                 "(snapshot %.0f ms, compact and attach %.0f ms)"
                 % (reason, entries, (done - started) * 1e3, (taken - started) * 1e3,
                    (done - taken) * 1e3))


def _install_allocator_view(torch, tracer):
    global _view
    cuda = getattr(torch, "cuda", None)
    if cuda is None:
        return
    view = _AllocatorView(torch, tracer)
    _view = view
    lazy_call = getattr(cuda, "_lazy_call", None)
    if lazy_call is not None:
        # Runs right after torch initialises CUDA, or now if it already has.
        lazy_call(view.on_cuda_init)
    elif cuda.is_initialized():
        view.on_cuda_init()


def _scalar(value):
    """Whether JSON carries `value` as it is (NaN and infinities it does not)."""
    if isinstance(value, float):
        return value - value == 0.0
    return value is None or isinstance(value, (bool, int, str))


#: The columns of a compact trace entry (torch keeps an out-of-memory entry's `device_free` in
#: the same field as other entries' `addr`, and so does this).
TRACE_COLUMNS = ("action", "addr", "size", "stream", "time_us", "stack")


def compact_snapshot(snapshot, reason, max_entries, oom=None, marks=()):
    """`torch.cuda.memory._snapshot()` as compact JSON bytes: segments and blocks keep their
    keys (scalar values only), trace entries become rows of TRACE_COLUMNS, and every `frames`
    list becomes `stack`, a 1-based index into a table of interned stacks of interned frames
    (0: none). `marks` are the step marks made here, as (step number, time.time_ns()).

    Torch shares one dict per distinct frame and one list per distinct stack between entries,
    so stacks are interned by object first (one lookup per entry) and by content only once per
    distinct list.
    """
    import json

    frames = []  # [filename, line, name]
    frame_ids = {}
    frame_by_object = {}
    stacks = []  # lists of frame indexes, innermost first
    stack_ids = {}
    stack_by_object = {}

    def stack_of(frame_list):
        if not frame_list:
            return 0
        sid = stack_by_object.get(id(frame_list))
        if sid is not None:
            return sid
        ids = []
        for f in frame_list:
            fid = frame_by_object.get(id(f))
            if fid is None:
                key = (f.get("filename"), f.get("line"), f.get("name"))
                fid = frame_ids.get(key)
                if fid is None:
                    fid = len(frames)
                    frames.append(list(key))
                    frame_ids[key] = fid
                frame_by_object[id(f)] = fid
            ids.append(fid)
        key = tuple(ids)
        sid = stack_ids.get(key)
        if sid is None:
            stacks.append(ids)
            sid = len(stacks)
            stack_ids[key] = sid
        stack_by_object[id(frame_list)] = sid
        return sid

    def plain(entry):
        out = {}
        for k, v in entry.items():
            if k == "frames":
                out["stack"] = stack_of(v)
            elif _scalar(v):
                out[k] = v
            elif isinstance(v, (list, tuple)) and all(_scalar(x) for x in v):
                out[k] = list(v)
        return out

    def row(entry):
        get = entry.get
        addr = get("addr")
        if addr is None:
            addr = get("device_free")
        return [
            get("action"),
            addr,
            get("size"),
            get("stream"),
            get("time_us"),
            stack_of(get("frames")),
        ]

    segments = []
    for segment in snapshot.get("segments", ()):
        s = plain(segment)
        s["blocks"] = [plain(b) for b in segment.get("blocks", ())]
        segments.append(s)
    traces = [[row(e) for e in trace] for trace in snapshot.get("device_traces", ())]
    settings = snapshot.get("allocator_settings")
    unix_ns = time.time_ns()
    monotonic_ns = time.monotonic_ns()
    document = {
        "format": SNAPSHOT_FORMAT,
        "reason": reason,
        "clock": {"unix_ns": unix_ns, "monotonic_ns": monotonic_ns},
        "max_entries": max_entries,
        "frames": frames,
        "stacks": stacks,
        "segments": segments,
        "trace_columns": TRACE_COLUMNS,
        "device_traces": traces,
        "allocator_settings": plain(settings) if isinstance(settings, dict) else None,
        "oom": oom,
        "step_marks": [list(m) for m in marks],
    }
    return json.dumps(document, separators=(",", ":"), default=str).encode()
