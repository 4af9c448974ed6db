#!/usr/bin/env python3
"""Checks vramtrace's PyTorch hooks on a real GPU (docs/pytorch.md, "Checking on the GPU").

Writes small programs with a planted truth, runs each plain and under `vramtrace run` (and
`--per-tensor`), and prints one PASS/FAIL line per check, with what was seen:

  format     the real torch.cuda.memory._snapshot() has the keys the reader takes, frames
             innermost first, time_us on the wall clock
  identical  each program's stdout is the same with and without vramtrace; stderr has no
             vramtrace warning
  steps      one optimizer: a mark per step; two optimizers (GAN-style): a mark per iteration
  recorder   the leak's line holds exactly the kept tensors (30 x 4 MiB) in the recorder's view,
             the walk matches every action, the allocator settings are those of the run
  per-tensor --per-tensor runs cudaMallocAsync and the report says the tensors are driver
             allocations; the 30 kept tensors are cudaMallocAsync calls of 4 MiB
  oom        an out-of-memory error caught then os._exit: the trace holds the `oom` snapshot

One device call (from the repository root, the release build carried as run.sh does):
  run(command="VRAMTRACE_BUILD=target/gpu python3 validation/gpu/check_torch_hooks.py",
      carry=["target/gpu"])
Traces and reports go to $OUT when it is set.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MIB = 1 << 20

LEAK = """import torch
x = torch.randn(1024, 1024, device="cuda")
model = torch.nn.Linear(1024, 1024).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
kept = []
for step in range(30):
    out = model(x)
    out.sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    kept.append(out.detach() * 1)  # LEAK
torch.cuda.synchronize()
print("leak done", len(kept))
"""

GAN = """import torch
d = torch.nn.Linear(256, 1).cuda()
g = torch.nn.Linear(64, 256).cuda()
od = torch.optim.Adam(d.parameters())
og = torch.optim.Adam(g.parameters())
for i in range(12):
    z = torch.randn(32, 64, device="cuda")
    od.zero_grad(); d(g(z).detach()).mean().backward(); od.step()
    og.zero_grad(); (-d(g(z))).mean().backward(); og.step()
print("gan done")
"""

OOM = """import os
import torch
kept = [torch.empty(4 << 20, dtype=torch.uint8, device="cuda") for _ in range(3)]
try:
    torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
except torch.cuda.OutOfMemoryError:
    print("caught the out-of-memory error")
    os._exit(3)
"""

FORMAT = """import json, time, torch
torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python", max_entries=1000)
def make():
    return torch.empty(1 << 20, device="cuda")
t = make()
before = time.time_ns() // 1000
s = torch.cuda.memory._snapshot()
entries = [e for e in s["device_traces"][0] if e["action"] == "alloc"]
blocks = [b for seg in s["segments"] for b in seg["blocks"]]
print(json.dumps({
    "top": sorted(s), "segment": sorted(s["segments"][0]), "block": sorted(blocks[0]),
    "entry": sorted(entries[-1]), "frame": sorted(entries[-1]["frames"][0]),
    "innermost": entries[-1]["frames"][0]["name"], "time_us": entries[-1]["time_us"],
    "now_us": before, "settings": sorted(s.get("allocator_settings", {})),
}))
"""


def main():
    build = os.environ.get("VRAMTRACE_BUILD", os.path.join(ROOT, "target/release"))
    if not os.path.isabs(build):
        build = os.path.join(ROOT, build)
    vt = os.path.join(build, "vramtrace")
    if not os.path.isfile(vt):
        sys.exit("error: no vramtrace in %s (set VRAMTRACE_BUILD)" % build)
    work = tempfile.mkdtemp(prefix="vramtrace-torch-check-")
    keep = os.environ.get("OUT")
    for name, text in [("leak.py", LEAK), ("gan.py", GAN), ("oom.py", OOM), ("format.py", FORMAT)]:
        with open(os.path.join(work, name), "w") as f:
            f.write(text)
    env = dict(os.environ)
    for name in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"):
        env.pop(name, None)
    env["PYTHONUNBUFFERED"] = "1"
    failures = 0

    def check(name, ok, seen):
        nonlocal failures
        failures += 0 if ok else 1
        print("%s %-10s %s" % ("PASS" if ok else "FAIL", name, seen), flush=True)

    def run(cmd, extra=None):
        e = dict(env, **(extra or {}))
        return subprocess.run(cmd, env=e, cwd=work, capture_output=True, text=True)

    def traced(name, flags=(), extra=None):
        out = os.path.join(work, name.replace(".py", "") + "-" + "-".join(f.strip("-") for f in flags))
        os.makedirs(out, exist_ok=True)
        p = run([vt, "run", "--no-summary", *flags, "-o", out + "/t-%p.vtrace", "--", "python3", name], extra)
        traces = sorted(os.path.join(out, f) for f in os.listdir(out) if f.endswith(".vtrace"))
        reports = []
        for t in traces:
            r = subprocess.run([vt, "report", "--json", t], capture_output=True, text=True)
            reports.append(json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr})
            with open(t + ".report.json", "w") as f:
                f.write(r.stdout)
        return p, reports

    # format
    p = run(["python3", "format.py"])
    try:
        f = json.loads(p.stdout.strip().splitlines()[-1])
        ok = (
            {"segments", "device_traces"} <= set(f["top"])
            and {"address", "size", "requested_size", "state", "frames"} <= set(f["block"])
            and {"action", "addr", "size", "stream", "time_us", "frames"} <= set(f["entry"])
            and {"filename", "line", "name"} <= set(f["frame"])
            and f["innermost"] == "make"
            and abs(f["time_us"] - f["now_us"]) < 10_000_000
        )
        check("format", ok, json.dumps(f))
    except (ValueError, IndexError, KeyError) as e:
        check("format", False, "%r: %s" % (e, p.stderr[-500:]))

    # leak: plain vs traced, steps, recorder
    plain = run(["python3", "leak.py"], {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:256"})
    p, reports = traced("leak.py", (), {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:256"})
    check(
        "identical",
        p.returncode == plain.returncode == 0 and p.stdout == plain.stdout and "vramtrace: warning" not in p.stderr,
        "rc %s/%s stdout %r/%r stderr %r" % (plain.returncode, p.returncode, plain.stdout, p.stdout, p.stderr[-300:]),
    )
    r = reports[0] if len(reports) == 1 else {}
    check("steps", r.get("events", {}).get("steps") == 30, "leak.py: %s traces, steps %s" % (len(reports), r.get("events", {}).get("steps")))
    a = r.get("allocator") or {}
    rec = a.get("recorder") or {}
    top = (rec.get("by_line") or [{}])[0]
    leak_line = LEAK.splitlines().index(next(l for l in LEAK.splitlines() if l.endswith("# LEAK"))) + 1
    want = "leak.py:%d in <module>" % leak_line
    check(
        "recorder",
        a.get("tensor_view") == "recorder"
        and a.get("alloc_conf") == "max_split_size_mb:256"
        and rec.get("unmatched") == 0
        and not a.get("problems")
        and str(top.get("line", "")).endswith(want)
        and top.get("bytes") == 30 * 4 * MIB
        and top.get("count") == 30,
        json.dumps({k: a.get(k) for k in ("backend", "alloc_conf", "tensor_view", "problems")})
        + " top line %s" % json.dumps(top),
    )

    # gan: one mark per iteration
    p, reports = traced("gan.py")
    steps = reports[0].get("events", {}).get("steps") if len(reports) == 1 else None
    check("steps", p.returncode == 0 and steps == 12, "gan.py: rc %s, steps %s (12 iterations)" % (p.returncode, steps))

    # per-tensor
    p, reports = traced("leak.py", ("--per-tensor",))
    r = reports[0] if len(reports) == 1 else {}
    a = r.get("allocator") or {}
    asyncs = [c for c in r.get("calls", []) if c.get("api") == "cudaMallocAsync"]
    check(
        "per-tensor",
        p.returncode == 0
        and p.stdout == plain.stdout
        and a.get("backend") == "cudaMallocAsync"
        and a.get("tensor_view") == "driver",
        "backend %s view %s cudaMallocAsync calls %s; stderr: %r"
        % (a.get("backend"), a.get("tensor_view"), asyncs, p.stderr[-300:]),
    )

    # oom
    p, reports = traced("oom.py")
    r = reports[0] if len(reports) == 1 else {}
    rec = (r.get("allocator") or {}).get("recorder") or {}
    check(
        "oom",
        p.returncode == 3 and rec.get("snapshot") == "oom" and rec.get("live_bytes") == 3 * 4 * MIB,
        "rc %s, snapshot %s, live %s, out_of_memory %s"
        % (p.returncode, rec.get("snapshot"), rec.get("live_bytes"), rec.get("out_of_memory")),
    )

    if keep:
        shutil.copytree(work, os.path.join(keep, "torch-hooks"), dirs_exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    print("%d check(s) failed" % failures if failures else "all checks passed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
