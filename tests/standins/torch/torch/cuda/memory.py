"""The allocator and its memory history recorder, with torch's snapshot layout."""

import collections
import ctypes
import os
import sys
import time

import torch

_allocator = None

SEGMENT_BYTES = 8 << 20
#: Requests above this many bytes fail with an out-of-memory error.
LIMIT_BYTES = 1 << 30


def _settings():
    for name in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"):
        if name in os.environ:
            return os.environ[name]
    return ""


def _init():
    global _allocator
    _allocator = _Allocator()


def _frames():
    """Python frames, innermost first, from the caller of the allocator's entry point."""
    out = []
    f = sys._getframe(2)
    while f is not None:
        out.append({"filename": f.f_code.co_filename, "line": f.f_lineno, "name": f.f_code.co_name})
        f = f.f_back
    return out


class Tensor:
    def __init__(self, allocator, addr, nbytes):
        self._allocator = allocator
        self.addr = addr
        self.nbytes = nbytes

    def __del__(self):
        self._allocator.free(self)


class _Allocator:
    def __init__(self):
        self.settings = _settings()
        compact = self.settings.replace(" ", "")
        self.backend = "cudaMallocAsync" if "backend:cudaMallocAsync" in compact else "native"
        # The CUDA calls come from the framework's native library, as libc10_cuda's do.
        self.fw = ctypes.CDLL("libtorch_standin.so")
        self.fw.fw_raw_malloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        self.fw.fw_raw_malloc_async.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        self.fw.fw_raw_free_async.argtypes = [ctypes.c_void_p]
        self.segments = []
        self.blocks = {}
        self.history = None
        self.context = "all"
        self.allocated = 0

    def record(self, action, addr, size, frames=None, key="addr"):
        if self.history is None:
            return
        entry = {
            "action": action,
            key: addr,
            "size": size,
            "stream": 0,
            "time_us": time.time_ns() // 1000,
            "compile_context": "N/A",
            "user_metadata": "",
            "pool_id": (0, 0),
        }
        if frames is not None:
            entry["frames"] = frames
        self.history.append(entry)

    def tensor(self, nbytes):
        frames = _frames()
        if nbytes > LIMIT_BYTES:
            self.record("oom", 1 << 20, nbytes, key="device_free")
            for observer in torch._C._oom_observers:
                observer(0, nbytes, self.allocated, 1 << 20)
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate %d bytes" % nbytes)
        if self.backend == "cudaMallocAsync":
            ptr = ctypes.c_void_p()
            rc = self.fw.fw_raw_malloc_async(ctypes.byref(ptr), nbytes)
            assert rc == 0, rc
            self.allocated += nbytes
            return Tensor(self, ptr.value, nbytes)
        size = (nbytes + 511) // 512 * 512
        segment = next((s for s in self.segments if s["total_size"] - s["used"] >= size), None)
        if segment is None:
            total = max(SEGMENT_BYTES, (size + (2 << 20) - 1) // (2 << 20) * (2 << 20))
            ptr = ctypes.c_void_p()
            rc = self.fw.fw_raw_malloc(ctypes.byref(ptr), total)
            assert rc == 0, rc
            segment = {"address": ptr.value, "total_size": total, "used": 0, "blocks": [], "frames": frames}
            self.segments.append(segment)
            self.record("segment_alloc", ptr.value, total, frames if self.context != "state" else None)
        addr = segment["address"] + segment["used"]
        segment["used"] += size
        block = {"address": addr, "size": size, "requested_size": nbytes, "state": "active_allocated", "frames": frames}
        segment["blocks"].append(block)
        self.blocks[addr] = block
        self.allocated += nbytes
        self.record("alloc", addr, nbytes, frames)
        return Tensor(self, addr, nbytes)

    def free(self, tensor):
        self.allocated -= tensor.nbytes
        if self.backend == "cudaMallocAsync":
            self.fw.fw_raw_free_async(tensor.addr)
            return
        block = self.blocks.pop(tensor.addr)
        block["state"] = "inactive"
        block["frames"] = []
        free_frames = _frames() if self.context == "all" else None
        self.record("free_requested", tensor.addr, tensor.nbytes, free_frames)
        self.record("free_completed", tensor.addr, tensor.nbytes, free_frames)


def get_allocator_backend():
    return _allocator.backend


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize, device=None):
    if _allocator.backend != "native":
        raise RuntimeError("cudaMallocAsync does not yet support recordHistory")
    _allocator.history = collections.deque(maxlen=max_entries) if enabled else None
    _allocator.context = context


def _snapshot(device=None):
    a = _allocator
    segments = []
    for s in a.segments:
        blocks = [dict(b) for b in s["blocks"]]
        free = s["total_size"] - s["used"]
        if free:
            blocks.append({"address": s["address"] + s["used"], "size": free, "requested_size": 0, "state": "inactive", "frames": []})
        allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
        segments.append({
            "device": 0,
            "address": s["address"],
            "total_size": s["total_size"],
            "allocated_size": allocated,
            "active_size": allocated,
            "requested_size": sum(b["requested_size"] for b in blocks if b["state"] == "active_allocated"),
            "stream": 0,
            "segment_type": "large",
            "segment_pool_id": (0, 0),
            "is_expandable": False,
            "frames": s["frames"],
            "blocks": blocks,
        })
    traces = [list(a.history or ())]
    a.record("snapshot", 0, 0)
    return {
        "segments": segments,
        "device_traces": traces,
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": a.settings, "expandable_segments": False, "roundup_power2_divisions": {"1": 0}},
        "external_annotations": [],
        "host_segments": [],
        "host_traces": [],
    }
