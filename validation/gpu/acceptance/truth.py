"""Reads the planted truth of an acceptance program: the `TRUTH = {...}` literal at its top, with
each leak's marker comment resolved to its line number. Used by run.sh (environment and arguments
of a program) and by check.py (what the report must say).

    python3 truth.py env PROGRAM.py          # KEY=VALUE lines for the program's environment
    python3 truth.py fixed_env PROGRAM.py    # KEY=VALUE lines that run it without its leak
                                             # (its "fixed" run, A of the diff pair), if any
    python3 truth.py args PROGRAM.py WORK    # its arguments, one a line ({WORK} replaced)
    python3 truth.py json PROGRAM.py         # the whole truth, markers resolved, as JSON
    python3 truth.py ranks PROGRAM.py        # processes a job runs (torchrun), 1 when not said
    python3 truth.py leaking_rank PROGRAM.py # the rank that leaks, when one does"""
import ast
import json
import sys


def load(path):
    source = open(path).read()
    truth = None
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "TRUTH" for t in node.targets):
            truth = ast.literal_eval(node.value)
    if truth is None:
        raise SystemExit(f"error: {path} has no TRUTH literal")
    lines = source.splitlines()
    for leak in truth.get("leaks", []):
        # "marker": the line whose allocations stay live; "cause_marker" (optional): the line
        # that makes them so when that is another (shown beside it, not checked).
        for key, to in (("marker", "line"), ("cause_marker", "cause_line")):
            if key not in leak:
                continue
            hits = [i + 1 for i, l in enumerate(lines) if l.rstrip().endswith("# " + leak[key])]
            if len(hits) != 1:
                raise SystemExit(f"error: {path}: marker {leak[key]} found {len(hits)} times")
            leak[to] = hits[0]
    return truth


def main():
    what, path = sys.argv[1], sys.argv[2]
    truth = load(path)
    if what == "env":
        for k, v in truth.get("env", {}).items():
            print(f"{k}={v}")
    elif what == "fixed_env":
        for k, v in truth.get("fixed_env", {}).items():
            print(f"{k}={v}")
    elif what == "args":
        for a in truth.get("args", []):
            print(a.replace("{WORK}", sys.argv[3]))
    elif what == "ranks":
        print(truth.get("ranks", 1))
    elif what == "leaking_rank":
        if "leaking_rank" in truth:
            print(truth["leaking_rank"])
    elif what == "json":
        print(json.dumps(truth, indent=1))
    else:
        raise SystemExit(f"error: unknown request {what}")


if __name__ == "__main__":
    main()
