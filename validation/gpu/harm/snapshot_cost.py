#!/usr/bin/env python3
"""What `torch.cuda.memory._snapshot()` costs, the call `vramtrace run`'s hand-over makes at exit
(docs/pytorch.md): with PyTorch's recorder set as the hooks set it (context="alloc",
stacks="python", max_entries=100000), time the snapshot of a full ring

  busy     while a thread still allocates and frees in a Python loop (job.py exitbusy's thread),
  idle     after that thread has stopped (the same ring, nothing else running),
  half     idle, with a ring of 50,000 entries (is the cost the entry count?),

three times each, and print one line per measurement; the first call of a process is profiled
(cProfile, the 12 entries of most cumulative time). Each order runs in a fresh process:

  busy-first   busy, idle, half (the hand-over at exit beside a thread still allocating)
  idle-first   the ring filled, the thread stopped, then idle, busy-less repeats
  warm-first   one snapshot of an almost empty ring first, then busy, idle, half

No tracer is involved. One device call:

  run(command="python3 validation/gpu/harm/snapshot_cost.py")
"""
import cProfile
import io
import pstats
import subprocess
import sys
import threading
import time

import torch


def fill(max_entries, seconds):
    torch.cuda.memory._record_memory_history(None)
    torch.cuda.memory._record_memory_history(
        enabled="all", context="alloc", stacks="python", max_entries=max_entries
    )
    stop = threading.Event()

    def busy():
        while not stop.is_set():
            x = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
            del x

    thread = threading.Thread(target=busy, daemon=True)
    thread.start()
    time.sleep(seconds)
    return stop, thread


FIRST = [True]


def snapshot():
    if not FIRST[0]:
        return torch.cuda.memory._snapshot()
    FIRST[0] = False
    prof = cProfile.Profile()
    snap = prof.runcall(torch.cuda.memory._snapshot)
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(12)
    print("\n".join(l for l in out.getvalue().splitlines() if l.strip())[:3000], flush=True)
    return snap


def timed(label, runs=3):
    for i in range(runs):
        t0 = time.perf_counter()
        snap = snapshot()
        ms = (time.perf_counter() - t0) * 1e3
        entries = sum(len(t) for t in snap["device_traces"])
        print(f"{label} run {i + 1}: {entries} entries, snapshot {ms:.0f} ms", flush=True)


def main():
    if len(sys.argv) == 1:
        for order in ("busy-first", "idle-first", "warm-first"):
            print("==", order, flush=True)
            subprocess.run([sys.executable, __file__, order], check=False)
        return
    order = sys.argv[1]
    print("torch", torch.__version__, torch.cuda.get_device_name(), flush=True)
    if order == "warm-first":
        stop, thread = fill(100_000, 0.01)
        stop.set()
        thread.join()
        timed("warm", runs=1)
    stop, thread = fill(100_000, 2.0)
    if order == "idle-first":
        stop.set()
        thread.join()
    else:
        timed("busy")
        stop.set()
        thread.join()
    timed("idle")
    stop, thread = fill(50_000, 2.0)
    stop.set()
    thread.join()
    timed("half")


if __name__ == "__main__":
    main()
