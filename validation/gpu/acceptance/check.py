"""Checks what `vramtrace report` says about each acceptance program's traces against the
program's planted truth, and prints the table of docs/gpu-validation.md.

    python3 check.py RESULTS [--vt PATH]

RESULTS holds one folder per program (NAME/), with the traces run.sh wrote there
(`traced-PID.vtrace`: no step marks; `marks-PID.vtrace`: a mark at every optimizer step) and the
program's stderr (`*.err`, for facts a program measured, such as leak_comm's
`VT-FACT leak_comm comm_bytes_per_step=...`). The truth is the `TRUTH` literal of NAME.py beside
this script (truth.py), its markers resolved to the lines of the file as it is now: run the check
on the programs that were run.

What must hold, per trace:
- a healthy program: no steady growth in any view, no alert;
- a leak: a steady growth at the marker's line, within 10% of the planted rate per step, that
  alerts; for a leak planted from a step on, its growth starting within 2 steps of it;
- with step marks: the steps counted within 1 of the program's.
Without marks the steps come from the allocation pattern when the program repeats one, else there
are none (growth is then per time window, and rates are not compared). Exit code 1 when any
check fails."""
import argparse
import glob
import json
import os
import re
import subprocess
import sys

import truth as truths

HERE = os.path.dirname(os.path.abspath(__file__))


def report(vt, trace):
    out = subprocess.run([vt, "report", "--json", trace], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"error: {vt} report {trace}: {out.stderr.strip()}")
    return json.loads(out.stdout)["analysis"]


def facts(folder):
    """`VT-FACT NAME key=value ...` lines of the program's stderr, as a dict."""
    found = {}
    for path in glob.glob(os.path.join(folder, "*.err")):
        for line in open(path, errors="replace"):
            if line.startswith("VT-FACT "):
                for k, v in re.findall(r"(\w+)=(\S+)", line):
                    found[k] = v
    return found


def mib(n):
    return f"{n / 1048576:.2f} MiB"


def check(name, trace, a, t, measured):
    """(what the report says, problems) of one trace."""
    problems = []
    s, g = a["steps"], a["growth"]
    unit = "step" if g["axis"] == "steps" else f"{g['window_ns'] // 1_000_000} ms window"
    steps = f"{s['steps']} steps ({s['source']})"
    if s["source"] == "marks" and abs(s["steps"] - t["steps"]) > 1:
        problems.append(f"{s['steps']} steps, the program made {t['steps']}")
    steady = g["steady"]
    if t["kind"] == "healthy":
        if steady or g["alert"]:
            problems.append("growth found in a healthy program")
        said = "no steady growth" if not steady else "growth: " + steady[0]["label"]
        return f"{steps}; {said}", problems
    said = []
    for leak in t["leaks"]:
        rate = leak["bytes_per_step"]
        if isinstance(rate, str) and rate.startswith("measured:"):
            rate = measured.get(rate.split(":", 1)[1])
            rate = float(rate) if rate is not None else None
        at_line = [r for r in steady if (r.get("label") or "").split(" in ")[0].endswith(
            f"{os.path.basename(name)}.py:{leak['line']}")]
        if not at_line:
            top = steady[0]["label"] if steady else "nothing"
            problems.append(f"no steady growth at line {leak['line']} (top: {top})")
            continue
        r = max(at_line, key=lambda r: r["rate"])
        said.append(f"+{mib(r['rate'])}/{unit} at line {leak['line']} ({r['view']})")
        if not r["alert"]:
            problems.append(f"line {leak['line']} does not alert")
        if g["axis"] == "steps" and rate and abs(r["rate"] - rate) > 0.1 * rate:
            problems.append(f"rate {mib(r['rate'])}, planted {mib(rate)}")
        start = r["phases"].get("growth_from")
        if g["axis"] == "steps" and leak.get("from_step") and start is not None:
            if abs(start - leak["from_step"]) > 2:
                problems.append(f"growth from step {start}, planted from {leak['from_step']}")
    return f"{steps}; " + ("; ".join(said) or "no growth at the planted lines"), problems


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results")
    p.add_argument("--vt", default=os.environ.get("VT", "vramtrace"))
    args = p.parse_args()
    failed = 0
    print("| program | trace | truth | what the report says | check |")
    print("| --- | --- | --- | --- | --- |")
    for path in sorted(glob.glob(os.path.join(HERE, "*.py"))):
        name = os.path.basename(path)[:-3]
        folder = os.path.join(args.results, name)
        if not (name.startswith(("healthy_", "leak_")) and os.path.isdir(folder)):
            continue
        t = truths.load(path)
        planted = "healthy" if t["kind"] == "healthy" else "; ".join(
            f"{l['what']}: {l['bytes_per_step']} B/step at line {l['line']}"
            + (f" (made so at line {l['cause_line']})" if l.get("cause_line") else "")
            + (f" from step {l['from_step']}" if l.get("from_step") else "")
            for l in t["leaks"])
        measured = facts(folder)
        for trace in sorted(glob.glob(os.path.join(folder, "*.vtrace"))):
            said, problems = check(name, trace, report(args.vt, trace), t, measured)
            failed += bool(problems)
            verdict = "ok" if not problems else "FAIL: " + "; ".join(problems)
            kind = os.path.basename(trace).split("-")[0]
            print(f"| {name} | {kind} | {t['steps']} steps; {planted} | {said} | {verdict} |")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
