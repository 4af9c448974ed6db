#!/usr/bin/env python3
"""What tracing costs a PyTorch training step, per allocator and per view (docs/pytorch.md).

A GPT-style loop (8 transformer layers, d=1024, bf16 autocast, AdamW) runs in fresh processes
under each mode, for PyTorch's native caching allocator and for its cudaMallocAsync backend, in
interleaved rounds (every mode once per round, so drift of the machine spreads over all modes):

  plain            python alone
  traced           vramtrace run --no-python-hooks (the driver-level trace only)
  traced+hooks     vramtrace run (steps from optimizer steps; with the native allocator also
                   PyTorch's memory history recorder, handed to the trace at exit)
  recorder         python alone with torch.cuda.memory._record_memory_history as the hooks set
                   it (context="alloc", stacks="python", max_entries=VRAMTRACE_TORCH_HISTORY or
                   100000); native allocator only
  recorder-all     the same with context="all" (stacks of frees too); native allocator only

It prints, per allocator and mode, the median step time over all rounds (each run's steps after
warm-up), its ratio to plain with the same allocator, the median process wall time (exit
included: the recorder's hand-over happens there) and the trace size.

One device call (from the repository root, release build carried as run.sh does):
  mkdir -p target/gpu && strip -o target/gpu/libvramtrace.so target/release/libvramtrace.so \\
      && strip -o target/gpu/vramtrace target/release/vramtrace
  run(command="VRAMTRACE_BUILD=target/gpu python3 validation/gpu/bench_step_time.py --rounds 3",
      carry=["target/gpu"])
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODES = ["plain", "traced", "traced+hooks", "recorder", "recorder-all"]
ALLOCATORS = {"native": None, "cudaMallocAsync": "backend:cudaMallocAsync"}


def worker(args):
    """One run: warm-up, then timed steps; prints {"step_ms": [...]} on the last line."""
    import torch
    from torch import nn

    if args.record:
        torch.cuda.memory._record_memory_history(
            enabled="all",
            context=args.record,
            stacks="python",
            max_entries=int(os.environ.get("VRAMTRACE_TORCH_HISTORY", "100000")),
        )
    torch.manual_seed(0)
    device = torch.device(args.device)
    vocab, d, layers, seq, batch = 32000, 1024, 8, 512, 16
    if args.small:
        vocab, d, layers, seq, batch = 512, 64, 2, 32, 4

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, d)
            self.pos = nn.Parameter(torch.zeros(seq, d))
            layer = nn.TransformerEncoderLayer(d, 16, 4 * d, batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, layers)
            self.head = nn.Linear(d, vocab)
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq))

        def forward(self, tokens):
            h = self.embed(tokens) + self.pos
            h = self.blocks(h, mask=self.mask, is_causal=True)
            return self.head(h)

    model = GPT().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    times = []
    for step in range(args.warmup + args.steps):
        sync()
        start = time.perf_counter()
        tokens = torch.randint(0, vocab, (batch, seq + 1), device=device)
        x, y = tokens[:, :-1], tokens[:, 1:]
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(x)
            loss = nn.functional.cross_entropy(logits.float().view(-1, vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sync()
        if step >= args.warmup:
            times.append((time.perf_counter() - start) * 1e3)
    print(json.dumps({"step_ms": times}))


def run_mode(args, build, allocator, mode, workdir):
    """Runs one mode; returns (median step ms, wall s, trace bytes) or an error string."""
    env = dict(os.environ)
    for name in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"):
        env.pop(name, None)
    conf = ALLOCATORS[allocator]
    if conf:
        env["PYTORCH_ALLOC_CONF"] = conf
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    me = [sys.executable, os.path.abspath(__file__), "--worker", "--steps", str(args.steps)]
    me += ["--warmup", str(args.warmup), "--device", args.device] + (["--small"] if args.small else [])
    out = os.path.join(workdir, "%s-%s" % (allocator, mode.replace("+", "_")))
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    vt = os.path.join(build, "vramtrace")
    if mode == "plain":
        cmd = me
    elif mode == "traced":
        cmd = [vt, "run", "--no-summary", "--no-python-hooks", "-o", out + "/t-%p.vtrace", "--"] + me
    elif mode == "traced+hooks":
        cmd = [vt, "run", "--no-summary", "-o", out + "/t-%p.vtrace", "--"] + me
    elif mode == "recorder":
        cmd = me + ["--record", "alloc"]
    else:
        cmd = me + ["--record", "all"]
    start = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if p.returncode != 0:
        return "rc %d: %s" % (p.returncode, p.stderr.strip().splitlines()[-1:] or "")
    try:
        steps = json.loads(p.stdout.strip().splitlines()[-1])["step_ms"]
    except (ValueError, IndexError, KeyError):
        return "no step times in: %r" % p.stdout[-200:]
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    return statistics.median(steps), wall, size


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--record", choices=["alloc", "all"], help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--allocators", default=",".join(ALLOCATORS))
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test of this script")
    ap.add_argument("--small", action="store_true", help="a tiny model (smoke test)")
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    build = os.environ.get("VRAMTRACE_BUILD", os.path.join(ROOT, "target/release"))
    if not os.path.isabs(build):
        build = os.path.join(ROOT, build)
    if not os.path.isfile(os.path.join(build, "vramtrace")):
        sys.exit("error: no vramtrace in %s (set VRAMTRACE_BUILD)" % build)
    modes = args.modes.split(",")
    allocators = args.allocators.split(",")
    plan = [
        (a, m)
        for a in allocators
        for m in modes
        if not (a != "native" and m.startswith("recorder"))
    ]
    results = {key: [] for key in plan}
    workdir = tempfile.mkdtemp(prefix="vramtrace-bench-")
    for r in range(args.rounds):
        # Alternate the order so no mode always runs first (or right after another).
        order = plan if r % 2 == 0 else list(reversed(plan))
        for key in order:
            got = run_mode(args, build, key[0], key[1], workdir)
            if isinstance(got, str):
                print("round %d %s %s: %s" % (r + 1, key[0], key[1], got), flush=True)
                continue
            results[key].append(got)
            print(
                "round %d %-15s %-13s %8.2f ms/step  %6.1f s  %8.1f KiB"
                % (r + 1, key[0], key[1], got[0], got[1], got[2] / 1024),
                flush=True,
            )
    # Each round's ratio to plain (same allocator, same round), then the median of those: the
    # machine's drift between rounds cancels out of each ratio.
    print()
    print("%-15s %-13s %10s %9s %20s %8s %10s" % ("allocator", "mode", "ms/step", "ratio", "per-round ratios", "wall s", "trace KiB"))
    for a in allocators:
        base = results.get((a, "plain")) or []
        for m in modes:
            runs = results.get((a, m))
            if not runs:
                continue
            ms = statistics.median(x[0] for x in runs)
            wall = statistics.median(x[1] for x in runs)
            size = statistics.median(x[2] for x in runs)
            per = [x[0] / b[0] for x, b in zip(runs, base)] if len(base) == len(runs) else []
            ratio = "%.4f" % statistics.median(per) if per else "-"
            rounds = " ".join("%.3f" % p for p in per)
            print("%-15s %-13s %10.3f %9s %20s %8.1f %10.1f" % (a, m, ms, ratio, rounds, wall, size / 1024))
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
