"""Checks what vramtrace says about each acceptance program against the program's planted truth,
and prints the tables of docs/gpu-validation.md: one row per trace, then the confusion table.

    python3 check.py RESULTS [--vt PATH]

RESULTS holds one folder per program (NAME/) as run.sh left it: the traces (`traced-PID.vtrace`
under `vramtrace run`, with its Python hooks; `bare-PID.vtrace` with `--no-python-hooks`; a job of
several ranks in `traced-ranks/` and `bare-ranks/`), each run's stderr (`traced.err`: the live
alerts, and facts a program measured, `VT-FACT NAME key=value`), and for a job of several ranks
the `diff --rank` of its leaking rank (`traced-ranks.diff.json`). The truth is the `TRUTH` literal
of NAME.py beside this script (truth.py), its markers resolved to the lines of the file as it is
now: run the check on the programs that were run.

What must hold, for the traces of `vramtrace run` (what a PyTorch user gets):
- a healthy program: no steady-growth finding, no alert, no live alert;
- a leak: each planted cause is exactly one steady-growth finding of the diagnosis, at the
  marker's line (the line whose allocations stay live), within 10% of the planted rate per step
  of the program (its optimizer steps, its model calls, or its iterations when the steps come from
  the allocation pattern); no other steady-growth finding; an alert; the FINDINGS headline (the
  first finding) at a planted line; a live alert, when one was raised, at a planted line;
- of a leak, the steps counted within 5% (at least 1) of the program's;
- the report's verdict (its second line) says the run ran out of memory exactly when it did
  (`"oom": True` in its truth), of every trace, bare ones too;
- a job of several ranks: the rank table names the leaking rank, its report says the above, the
  other ranks are healthy, and `diff --rank` names the planted line first; where every rank
  leaks alike (`"leaking_rank": "all"`), no rank is odd, each rank's report says the above, and
  the report of the directory names the shared cause at the planted line in its headline, with
  one rank's report in full standing for all;
- a program run once more without its leak (`fixed_env` in its truth): `diff` of that run
  against the traced one exits 1 and names a planted line first (`fixed.diff.json`).
For the traces without the hooks (`bare`) of a program without PyTorch (JAX, CuPy: `"torch":
False` in its truth) the same holds: that is what such a user gets. For a PyTorch program's bare
trace (its tensors unseen, its steps from the allocation pattern, which may span several of the
program's) a healthy program must still have no finding; of a leak, what it says is reported, not
failed. Exit code 1 when any check fails."""
import argparse
import glob
import json
import os
import re
import subprocess
import sys

import truth as truths

HERE = os.path.dirname(os.path.abspath(__file__))


def run_json(vt, *args):
    out = subprocess.run([vt, *args], capture_output=True, text=True)
    if out.returncode not in (0, 1):
        raise SystemExit(f"error: {vt} {' '.join(args)}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def check_verdict(vt, trace, t):
    """The report's verdict, its second line, says the run ran out of memory exactly when it did
    (TRUTH "oom"): ahead of the findings, or with the growth that filled the device."""
    lines = subprocess.run([vt, "report", trace], capture_output=True, text=True).stdout.splitlines()
    line = lines[1].strip() if len(lines) > 1 else ""
    said = "OUT OF MEMORY" in line or ", out of memory at step" in line
    if t.get("oom") and not said:
        return [f"the verdict does not say it ran out of memory: {line}"]
    if said and not t.get("oom"):
        return [f"the verdict says it ran out of memory: {line}"]
    return []


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


def label(site):
    return (site or {}).get("label") or ""


def at_line(text, name, line):
    """Whether a place in words names line `line` of NAME.py."""
    return re.search(rf"(^|[\s/]){re.escape(name)}\.py:{line}( |$)", text) is not None


def planted(t, measured):
    """The planted leaks with their rates resolved (`measured:KEY` from the program's facts)."""
    out = []
    for leak in t.get("leaks", []):
        rate = leak["bytes_per_step"]
        if isinstance(rate, str) and rate.startswith("measured:"):
            rate = measured.get(rate.split(":", 1)[1])
            rate = float(rate) if rate is not None else None
        out.append(dict(leak, rate=rate))
    return out


def check_analysis(name, a, t, leaks, variant):
    """(what the report says, problems, confusion counts) of one trace's analysis."""
    said, problems, counts = judge_analysis(name, a, t, leaks, variant)
    # A PyTorch program's trace without the hooks: only a healthy program's must hold.
    if variant == "bare" and t.get("torch", True) and t["kind"] != "healthy" and problems:
        return f"{said} (not checked: {'; '.join(problems)})", [], counts
    return said, problems, counts


def judge_analysis(name, a, t, leaks, variant):
    problems = []
    s, g = a["steps"], a["growth"]
    unit = "step" if g["axis"] == "steps" else f"{g['window_ns'] // 1_000_000} ms window"
    steps = f"{s['steps']} steps ({s['source']})"
    want = t.get("steps") or 0
    # A leak's rate is per step of the program: its steps must be the program's.
    counted = s["source"] in ("marks", "iterations", "pattern") and t["kind"] != "healthy"
    if counted and want and abs(s["steps"] - want) > max(1, want // 20):
        problems.append(f"{s['steps']} steps, the program made {want}")
    findings = [f for f in a["diagnosis"] if f["class"] == "steady-growth"]
    counts = {"planted": len(leaks), "once": 0, "missed": 0, "twice": 0, "other": 0, "asked": 0}
    if t["kind"] == "healthy":
        counts["other"] = len(findings)
        if findings or g["alert"]:
            problems.append("growth found in a healthy program: " + "; ".join(label(f["site"]) for f in findings))
        said = "no steady growth" if not findings else "growth: " + label(findings[0]["site"])
        return f"{steps}; {said}", problems, counts
    said, matched = [], set()
    for leak in leaks:
        here = [i for i, f in enumerate(findings) if at_line(label(f["site"]), name, leak["line"])]
        asked = [i for i, f in enumerate(findings) if f["evidence"].get("line_means") == "asked"]
        if not here:
            if variant == "bare" and asked:
                counts["asked"] += 1
                matched.update(asked[:1])
                said.append(f"line {leak['line']}: seen where the allocator asked ({label(findings[asked[0]]['site'])})")
                continue
            counts["missed"] += 1
            top = label(findings[0]["site"]) if findings else "nothing"
            problems.append(f"no finding at line {leak['line']} (first: {top})")
            continue
        counts["once" if len(here) == 1 else "twice"] += 1
        if len(here) > 1:
            problems.append(f"line {leak['line']} is {len(here)} findings")
        matched.update(here)
        f = findings[here[0]]
        rate = f["evidence"]["rate"] or 0.0
        view = f["evidence"].get("view")
        said.append(f"+{mib(rate)}/{unit} at line {leak['line']} ({view})")
        if f["severity"] != "alert":
            problems.append(f"line {leak['line']} does not alert")
        if g["axis"] == "steps" and leak["rate"] and abs(rate - leak["rate"]) > 0.1 * leak["rate"]:
            problems.append(f"rate {mib(rate)}, planted {mib(leak['rate'])}")
        start = f["evidence"].get("growth_from")
        if g["axis"] == "steps" and leak.get("from_step") and start is not None:
            if abs(start - leak["from_step"]) > 2:
                problems.append(f"growth from step {start}, planted from {leak['from_step']}")
    others = [label(f["site"]) for i, f in enumerate(findings) if i not in matched]
    counts["other"] = len(others)
    if others:
        problems.append("other steady-growth findings: " + "; ".join(others))
    if findings and not any(at_line(label(findings[0]["site"]), name, l["line"]) for l in leaks) and variant != "bare":
        problems.append(f"the headline names {label(findings[0]['site'])}")
    return f"{steps}; " + ("; ".join(said) or "no growth at the planted lines"), problems, counts


def live_alerts(folder, variant):
    """The live alert lines of one run's stderr."""
    path = os.path.join(folder, f"{variant}.err")
    if not os.path.exists(path):
        return []
    return [l.strip() for l in open(path, errors="replace") if "vramtrace: ALERT" in l]


def check_alerts(name, t, leaks, lines):
    problems = []
    if t["kind"] == "healthy" and lines:
        problems.append(f"{len(lines)} live alert(s) on a healthy program")
    for l in lines:
        if leaks and not any(at_line(l, name, leak["line"]) for leak in leaks):
            problems.append(f"live alert names another line: {l}")
    pattern = re.escape(name) + r"\.py:\d+"
    named = sorted(set(re.findall(pattern, " ".join(lines))))
    said = f"live alert at {', '.join(named)}" if lines else "no live alert"
    return said, problems


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results")
    p.add_argument("--vt", default=os.environ.get("VT", "vramtrace"))
    args = p.parse_args()
    failed = 0
    rows, confusion = [], {}
    for path in sorted(glob.glob(os.path.join(HERE, "*.py"))):
        name = os.path.basename(path)[:-3]
        folder = os.path.join(args.results, name)
        if not (name.startswith(("healthy_", "leak_", "ranks_")) and os.path.isdir(folder)):
            continue
        t = truths.load(path)
        leaks = planted(t, facts(folder))
        truth_words = "healthy" if t["kind"] == "healthy" else "; ".join(
            f"{l['what']}: {l['bytes_per_step']} B/step at line {l['line']}" for l in leaks)
        for variant in ("traced", "bare"):
            if t["kind"] == "ranks":
                checked = check_ranks(args.vt, name, folder, variant, t, leaks)
            else:
                checked = []
                for trace in sorted(glob.glob(os.path.join(folder, f"{variant}-*.vtrace"))):
                    a = run_json(args.vt, "report", "--json", trace)["analysis"]
                    if a["steps"]["steps"] == 0 and not a["diagnosis"] and not a["growth"]["holders"]:
                        continue  # a helper process that made no GPU memory call of note
                    said, problems, counts = check_analysis(name, a, t, leaks, variant)
                    problems += check_verdict(args.vt, trace, t)
                    checked.append((said, problems, counts))
            if not checked:
                continue
            said = "; ".join(c[0] for c in checked)
            problems = [p for c in checked for p in c[1]]
            if variant == "traced" and t["kind"] != "ranks":
                alert_said, alert_problems = check_alerts(name, t, leaks, live_alerts(folder, variant))
                said += f"; {alert_said}"
                problems += alert_problems
                if "fixed_env" in t:
                    diff_said, diff_problems = check_fixed_diff(name, folder, leaks)
                    said += f"; {diff_said}"
                    problems += diff_problems
            counts = checked[0][2]
            key = (name, variant)
            confusion[key] = (t["kind"], counts, not problems)
            failed += bool(problems)
            verdict = "ok" if not problems else "FAIL: " + "; ".join(problems)
            rows.append(f"| {name} | {variant} | {t.get('steps') or '?'} steps; {truth_words} | {said} | {verdict} |")
    print("| program | run | truth | what vramtrace says | check |")
    print("| --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    print()
    print("| program | run | planted causes | found once at their line | missed | said twice | other findings | seen only where the allocator asked |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    total = {"planted": 0, "once": 0, "missed": 0, "twice": 0, "other": 0, "asked": 0}
    for (name, variant), (kind, c, ok) in sorted(confusion.items()):
        for k in total:
            total[k] += c[k]
        print(f"| {name} | {variant} | {c['planted']} | {c['once']} | {c['missed']} | {c['twice']} | {c['other']} | {c['asked']} |")
    print(f"| all | | {total['planted']} | {total['once']} | {total['missed']} | {total['twice']} | {total['other']} | {total['asked']} |")
    sys.exit(1 if failed else 0)


def check_fixed_diff(name, folder, leaks):
    """`diff` of the run without the leak against the traced run: exit 1, a planted line first."""
    path = os.path.join(folder, "fixed.diff.json")
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return "no diff of the fixed run", ["the fixed run was not diffed"]
    rc = open(os.path.join(folder, "fixed.diff.exit")).read().strip()
    top = json.load(open(path)).get("top_difference") or {}
    where = top.get("label") or ""
    problems = []
    if rc != "1":
        problems.append(f"diff of the fixed run exits {rc}")
    if not any(at_line(where, name, l["line"]) for l in leaks):
        problems.append(f"diff of the fixed run names {where or 'nothing'} first")
    return f"diff fixed → traced: exit {rc}, {where} ({top.get('view')})", problems


def check_ranks(vt, name, folder, variant, t, leaks):
    """The checks of a job of several ranks: the rank table, each rank's report, diff --rank."""
    d = os.path.join(folder, f"{variant}-ranks")
    if not os.path.isdir(d):
        return []
    odd = t["leaking_rank"]
    alike = odd == "all"
    doc = run_json(vt, "report", "--json", d)
    out = []
    if alike:
        problems, said = check_alike(vt, name, d, doc, leaks, variant)
    else:
        first = (doc.get("ranks") or [{}])[0].get("rank")
        problems = [] if first == odd else [f"the rank table names rank {first} first, not {odd}"]
        said = [f"rank table: rank {first} first"]
    main_counts = None
    for trace in sorted(glob.glob(os.path.join(d, "*.vtrace"))):
        a = run_json(vt, "report", "--json", trace)
        rank = a["trace"]["rank"]
        leaking = alike or rank == odd
        healthy = dict(t, kind="healthy")
        words, probs, counts = check_analysis(name, a["analysis"], t if leaking else healthy,
                                              leaks if leaking else [], variant)
        if leaking:
            said.append(f"rank {rank}: {words}")
            # Each rank's planted cause counts: a job of four leaking ranks plants four.
            main_counts = counts if main_counts is None else {
                k: main_counts[k] + counts[k] for k in counts}
        problems += [f"rank {rank}: {p}" for p in probs]
    diff = os.path.join(folder, f"{variant}-ranks.diff.json")
    if os.path.exists(diff) and os.path.getsize(diff) > 0:
        top = (json.load(open(diff)).get("top_difference") or {})
        where = top.get("label") or ""
        said.append(f"diff --rank {odd}: {where} ({top.get('view')})")
        if variant == "traced" and not any(at_line(where, name, l["line"]) for l in leaks):
            problems.append(f"diff --rank {odd} names {where}")
    out.append(("; ".join(said), problems, main_counts))
    return out


def check_alike(vt, name, d, doc, leaks, variant):
    """Ranks that all leak alike: no rank odd in the rank table, and the text report of the
    directory saying the shared cause in its headline, at the planted line, with one rank's
    report in full standing for all."""
    problems = []
    odd = [r.get("rank") for r in doc.get("ranks") or [] if r.get("odd")]
    if odd:
        problems.append(f"the rank table marks ranks {odd} as odd")
    text = subprocess.run([vt, "report", d], capture_output=True, text=True).stdout
    head = next((l for l in text.splitlines() if l.startswith("Ranks (")), "")
    full = [l for l in text.splitlines() if l.startswith("════ ")]
    shared = "traces alike, each growing: first cause" in head
    if variant == "traced":
        if not shared or not any(at_line(head, name, l["line"]) for l in leaks):
            problems.append(f"the rank table's headline: {head!r}")
        if len(full) != 1 or "stands for all" not in full[0]:
            problems.append(f"{len(full)} full reports, not one standing for all")
    said = [f"rank table: {head.split(': ', 1)[-1] if head else 'none'}; "
            f"{len(full)} full report{'s' if len(full) != 1 else ''}"]
    return problems, said


if __name__ == "__main__":
    main()
