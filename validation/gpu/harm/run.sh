#!/usr/bin/env bash
# The tracer does no harm on the real CUDA stack (issue 16), in one `device` call:
#
#   run(command="VRAMTRACE_BUILD=target/gpu validation/gpu/harm/run.sh", carry=["target/gpu"])
#
# Each mode of job.py runs plain and under `vramtrace run`: stdout and exit code must match; the
# traces left behind are listed with how each ended (`vramtrace report --json`). Also: an existing
# file named by -o is left alone, and the exit delay with a thread still allocating is timed
# (plain, traced by `vramtrace run`, and traced without its Python hooks — the library's own
# exit path alone —, 5 runs each). `harm/run.sh exit` runs the exit delay only. Results:
# $OUT/summary.txt and $OUT/harm.tar.gz.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
BUILD=${VRAMTRACE_BUILD:-$ROOT/target/release}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
VT=$BUILD/vramtrace
OUTDIR=${OUT:-/tmp/vramtrace-harm-out}
WORK=$(mktemp -d /tmp/vt-harm.XXXXXX)
[ -x "$VT" ] || { echo "missing $VT"; exit 2; }
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1
S=$WORK/summary.txt
: > "$S"
describe() {  # one line per trace: file, pid, ending, end reason, events, command line
    for t in "$1"/*; do
        [ -f "$t" ] || continue
        "$VT" report --json "$t" 2>&1 | python3 -c '
import json, sys
try:
    d = json.load(sys.stdin)
except ValueError:
    print("  unreadable:", sys.argv[1]); sys.exit()
r = d["reading"]
print("  %s pid %s: %s, ended %s, %d events, lost %d; cmd %s" % (sys.argv[1].rsplit("/", 1)[1],
      d["trace"]["pid"], r["ending"]["kind"], r["end_reason"], d["events"]["applied"],
      d["analysis"]["anomalies"]["lost_events"], " ".join(d["trace"]["command_line"][-3:])))' "$t"
    done
}
MODES=(loader spawn sigint secret)
[ "${1:-}" = exit ] && MODES=()
for m in "${MODES[@]}"; do
    d=$WORK/$m
    mkdir -p "$d/traces"
    args=("$m")
    [ "$m" = secret ] && args=("$m" --hf-token=hf_SECRET --api-key SECRET2)
    python3 "$HERE/job.py" "${args[@]}" > "$d/plain.out" 2> "$d/plain.err"; echo $? > "$d/plain.rc"
    "$VT" run --no-summary -o "$d/traces/t-%p.vtrace" -- python3 "$HERE/job.py" "${args[@]}" \
        > "$d/traced.out" 2> "$d/traced.err"; echo $? > "$d/traced.rc"
    same=same; cmp -s "$d/plain.out" "$d/traced.out" || same=DIFFERENT
    echo "$m: exit $(cat "$d/plain.rc") plain, $(cat "$d/traced.rc") traced; stdout $same; $(ls "$d/traces" | wc -l) traces" >> "$S"
    describe "$d/traces" >> "$S"
    grep -h SECRET "$d/traces"/* > /dev/null 2>&1 && echo "  SECRET FOUND IN A TRACE" >> "$S"
done
# An existing file named by -o stays as it was; the trace goes beside it.
if [ "${1:-}" != exit ]; then
    d=$WORK/existing; mkdir -p "$d"; echo "model weights" > "$d/model.pt"
    "$VT" run --no-summary -o "$d/model.pt" -- python3 "$HERE/job.py" secret > /dev/null 2> "$d/err"
    echo "existing: model.pt now '$(cat "$d/model.pt")'; files: $(ls "$d" | tr '\n' ' ')" >> "$S"
fi
# Exit delay with a thread still allocating.
# norecorder: the Python hooks without PyTorch's recorder (VRAMTRACE_TORCH_HISTORY=0), which
# separates the recorder's hand-over at exit from the rest of the hooks.
for how in plain traced norecorder bare; do
    for i in $(seq "${EXIT_RUNS:-5}"); do
        d=$WORK/exit-$how-$i; mkdir -p "$d"
        case $how in
            plain) cmd=(python3 "$HERE/job.py" exitbusy) ;;
            traced) cmd=(env VRAMTRACE_SELF_PROFILE=1 "$VT" run --no-summary -o "$d/t-%p.vtrace" -- python3 "$HERE/job.py" exitbusy) ;;
            norecorder) cmd=(env VRAMTRACE_TORCH_HISTORY=0 "$VT" run --no-summary -o "$d/t-%p.vtrace" -- python3 "$HERE/job.py" exitbusy) ;;
            bare) cmd=("$VT" run --no-summary --no-python-hooks -o "$d/t-%p.vtrace" -- python3 "$HERE/job.py" exitbusy) ;;
        esac
        python3 - "$d/err" "${cmd[@]}" >> "$WORK/exit.txt" <<'PY'
import subprocess, sys, time
p = subprocess.Popen(sys.argv[2:], stdout=subprocess.PIPE, stderr=open(sys.argv[1], "w"))
line = p.stdout.readline()
t = time.monotonic()
p.wait()
print("%.1f" % ((time.monotonic() - t) * 1e3))
open(sys.argv[1], "a").write("rc %d\n" % p.returncode)
PY
    done
    echo "exit delay $how (ms): $(tail -"${EXIT_RUNS:-5}" "$WORK/exit.txt" | tr '\n' ' ')" >> "$S"
    echo "  run 1: $(tail -1 "$WORK/exit-$how-1/err"), last stderr line: $(grep -v '^rc ' "$WORK/exit-$how-1/err" | tail -1)" >> "$S"
    grep -h "history handed over" "$WORK"/exit-$how-*/err | sed 's/^/  /' >> "$S"
done
for how in traced norecorder bare; do
    for i in $(seq "${EXIT_RUNS:-5}"); do describe "$WORK/exit-$how-$i"; done >> "$S"
done
cp "$S" "$OUTDIR/summary.txt"
tar czf "$OUTDIR/harm.tar.gz" -C "$WORK" .
cat "$S"
