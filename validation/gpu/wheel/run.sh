#!/usr/bin/env bash
# The wheel on a GPU machine (docs/python.md), in one `device` call:
#
#   python/build_wheel.sh          # here; then
#   run(command="validation/gpu/wheel/run.sh", carry=["target/wheels"])
#
# Installs target/wheels/vramtrace-*.whl into a fresh virtual environment that sees the
# machine's PyTorch (--system-site-packages; `pip install --prefix` where venv is missing), then
# from a directory outside the checkout:
# - steps.py without the tracer: "enabled False marks [None × 10]";
# - `vramtrace run --per-tensor` on steps.py: "enabled True marks [1..10]", and the report has
#   10 steps and one steady-growth finding at steps.py's LEAK-LINE of 4194304 bytes per step;
# - `python -m vramtrace check --per-tensor` on steps.py: exit 1.
# Results: $OUT/summary.txt (the lines to look at) and $OUT/wheel.tar.gz (outputs, traces, reports).
set -u
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
OUTDIR=${OUT:-/tmp/vramtrace-wheel-out}
WORK=$(mktemp -d /tmp/vt-wheel.XXXXXX)
mkdir -p "$OUTDIR"
S=$WORK/summary.txt
wheels=("$ROOT"/target/wheels/vramtrace-*.whl)
[ -f "${wheels[0]}" ] || { echo "no wheel in target/wheels (run python/build_wheel.sh)"; exit 2; }
cp "$ROOT/validation/gpu/wheel/steps.py" "$WORK/"
cd "$WORK" || exit 2
shopt -s nullglob
export PYTHONUNBUFFERED=1

{
    echo "wheel $(basename "${wheels[0]}")"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)'
    ldd --version | head -1
} >> "$S" 2>&1

if python3 -m venv --system-site-packages venv >> "$S" 2>&1; then
    venv/bin/python -m pip install --no-index --quiet "${wheels[0]}" >> "$S" 2>&1
    BIN=$WORK/venv/bin
    PY=$BIN/python
    # --system-site-packages reaches the base interpreter's packages only: where python3 is
    # itself a virtual environment (as on the lent machine), torch lives in that one. A .pth
    # file adds the directories python3 imports from, as a user's environment would have them.
    if ! "$PY" -c 'import torch' 2>/dev/null; then
        python3 -c 'import sys; print("\n".join(p for p in sys.path if p.endswith("-packages")))' \
            > "$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/outer.pth"
        echo "torch through outer.pth: $("$PY" -c 'import torch; print(torch.__file__)' 2>&1)" >> "$S"
    fi
else
    echo "no venv: pip install --prefix" >> "$S"
    python3 -m pip install --no-index --quiet --prefix "$WORK/prefix" "${wheels[0]}" >> "$S" 2>&1
    BIN=$WORK/prefix/bin
    PY=python3
    export PYTHONPATH=$(echo "$WORK"/prefix/lib/python3*/site-packages)
fi
echo "installed: $(ls "$BIN/vramtrace" "$BIN/../lib/libvramtrace.so" 2>&1 | tr '\n' ' ')" >> "$S"
echo "version: $("$BIN/vramtrace" --version 2>&1)" >> "$S"
echo "library_path: $("$PY" -c 'import vramtrace; print(vramtrace.library_path())' 2>&1)" >> "$S"

plain=$("$PY" steps.py 2> plain.err)
echo "plain: $plain" >> "$S"
if [[ $plain != "enabled False"* ]]; then
    echo "FAIL: steps.py did not run without the tracer:" >> "$S"
    tail -3 plain.err >> "$S"
fi
"$BIN/vramtrace" run --per-tensor -o traces/steps-%p.vtrace -- "$PY" steps.py > traced.out 2> traced.err
echo "traced (exit $?): $(cat traced.out)" >> "$S"
for t in traces/*.vtrace; do
    "$BIN/vramtrace" report --json "$t" > "$t.json" 2> "$t.err"
    "$BIN/vramtrace" report "$t" > "$t.txt" 2>&1
    python3 - "$t.json" >> "$S" 2>&1 <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("report", sys.argv[1], "steps", r["events"]["steps"], "live", r["live"]["device_memory"])
for d in r["analysis"]["diagnosis"]:
    print("  finding", d["class"], d["severity"], d["site"].get("label"), "rate", d["evidence"].get("rate"))
PY
done
"$PY" -m vramtrace check --per-tensor -- "$PY" steps.py > check.out 2> check.err
echo "check exit $? (1 expected)" >> "$S"
tail -5 check.err >> "$S"

cat "$S"
cp "$S" "$OUTDIR/summary.txt"
tar czf "$OUTDIR/wheel.tar.gz" -C "$WORK" --exclude venv --exclude prefix .
