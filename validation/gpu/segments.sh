#!/usr/bin/env bash
# Bounded traces and cheaper reading on the GPU host, in one `device` call:
#
#   mkdir -p target/gpu && strip -o target/gpu/libvramtrace.so target/release/libvramtrace.so \
#       && strip -o target/gpu/vramtrace target/release/vramtrace
#   run(command="VRAMTRACE_BUILD=target/gpu validation/gpu/segments.sh", carry=["target/gpu"])
#
# 1. memory: `vramtrace report` of every GPU fixture (tests/fixtures/gpu/*.vtrace, recorded on
#    this kind of host: the CUDA libraries they name are here, so their symbols are read), with
#    its peak resident memory and wall time (/usr/bin/time -v). Look for: every peak below
#    150 MiB (gpt_leaky-recorder.vtrace was 310 MiB before the symbol tables were indexed
#    without their names).
# 2. segments: segments_loop.py (64 KiB a step from its middle step; under `--per-tensor` every
#    tensor a driver allocation) for VT_SEG_STEPS (default 40,000) steps under `vramtrace run
#    --per-tensor --segment-bytes 1MiB --max-bytes 3MiB`, the trace directory measured every
#    0.2 s. Look for: "most" at or below 3145728 bytes; the program's stdout as without the
#    tracer; the report of the directory and of its last segment (`--last 0`) with the same live
#    set (`same: true`), the leak at its LEAK-LINE in both, and what rotation removed. Then the
#    answers read from one segment's snapshot: `replay` two steps after the last segment began
#    (the leak's tensors live there, made step after step before it: its growth at LEAK-LINE,
#    `evidence.kept_from`), and `report --last 0 --fail-on oom` (exit 2: the failures before the
#    segment are not kept).
# 3. healthy: the same loop without its leak (VT_SEG_LEAK=0, VT_SEG_HEALTHY_STEPS, default
#    20,000) under the same bounds, its alert off: `report --fail-on growth` of the directory and
#    of its last segment. Look for: exit 0 and no steady-growth finding in both (what the weights
#    and optimizer keep was made at the start: no staircase).
#
# Results: $OUT/segments.txt.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${VRAMTRACE_BUILD:-$ROOT/target/release}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
VT=$BUILD/vramtrace
OUTDIR=${OUT:-/tmp/vramtrace-segments-out}
WORK=$(mktemp -d /tmp/vt-segments.XXXXXX)
[ -x "$VT" ] && [ -f "$BUILD/libvramtrace.so" ] || { echo "missing $VT or libvramtrace.so beside it"; exit 2; }
mkdir -p "$OUTDIR"
REPORT=$OUTDIR/segments.txt
: > "$REPORT"
say() { echo "$@" | tee -a "$REPORT"; }

say "== memory: vramtrace report of each GPU fixture"
for t in "$ROOT"/tests/fixtures/gpu/*.vtrace; do
    /usr/bin/time -v "$VT" report --json "$t" > "$WORK/r.json" 2> "$WORK/time.txt"
    rss=$(awk -F: '/Maximum resident/ {print $2}' "$WORK/time.txt" | tr -d ' ')
    wall=$(awk -F': ' '/Elapsed/ {print $2}' "$WORK/time.txt")
    found=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sum(1 for s in d['symbols'] if s['found']))" "$WORK/r.json")
    say "$(basename "$t"): peak $((rss / 1024)) MiB, $wall, $found modules symbolized"
done

say "== segments: segments_loop.py under --per-tensor, segments of 1 MiB within 3 MiB"
export PYTHONUNBUFFERED=1 VT_SEG_STEPS=${VT_SEG_STEPS:-40000}
TRACES=$WORK/traces
mkdir -p "$TRACES"
LOOP=$ROOT/validation/gpu/segments_loop.py
say "planted: $(basename "$LOOP"):$(grep -n '# LEAK-LINE$' "$LOOP" | cut -d: -f1), 65536 B per step from step $((VT_SEG_STEPS / 2)) of $VT_SEG_STEPS"
t0=$(date +%s%N)
python3 "$LOOP" > "$WORK/plain.out" 2> "$WORK/plain.err"
say "plain: rc $?, $(( ($(date +%s%N) - t0) / 1000000 )) ms"
t0=$(date +%s%N)
"$VT" run --per-tensor --segment-bytes 1MiB --max-bytes 3MiB -o "$TRACES/" --no-summary \
    -- python3 "$LOOP" > "$WORK/traced.out" 2> "$WORK/traced.err" &
pid=$!
most=0
while kill -0 $pid 2>/dev/null; do
    now=$(du -sb "$TRACES" | cut -f1)
    [ "$now" -gt "$most" ] && most=$now
    sleep 0.2
done
wait $pid
say "traced: rc $?, $(( ($(date +%s%N) - t0) / 1000000 )) ms; most $most bytes in the trace directory (budget 3145728); files: $(ls "$TRACES" | tr '\n' ' ')"
if cmp -s "$WORK/plain.out" "$WORK/traced.out"; then
    say "output: the same as without the tracer: $(cat "$WORK/plain.out")"
else
    say "output: DIFFERS: $(cat "$WORK/plain.out") / $(cat "$WORK/traced.out")"
fi
grep -i 'vramtrace' "$WORK/traced.err" | head -5 | tee -a "$REPORT"
"$VT" report --json "$TRACES" > "$WORK/whole.json"
"$VT" report --json --last 0 "$TRACES" > "$WORK/last.json"
python3 - "$WORK/whole.json" "$WORK/last.json" <<'EOF' | tee -a "$REPORT"
import json, sys
whole, last = (json.load(open(p)) for p in sys.argv[1:3])
keys = ["live", "call_sites", "groups", "orphans", "communicators"]
print("same:", all(whole[k] == last[k] for k in keys), [k for k in keys if whole[k] != last[k]])
for name, r in (("segments there", whole), ("last segment", last)):
    seg = r["reading"]["segments"]
    print(f"{name}: segments {seg['first_read']}-{seg['last_read']} read, removed {seg['removed']}, records {r['reading']['records']}")
    for f in r["analysis"]["diagnosis"][:3]:
        print(f"  {f['severity']} {f['class']} at {(f['site'] or {}).get('label')}: {f['evidence'].get('rate')} B per step, kept_from {f['evidence'].get('kept_from')}, alerted_at_step {f['evidence'].get('alerted_at_step')}")
EOF
from=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['reading']['segments']['read_from_step'])" "$WORK/last.json")
first=$(ls "$TRACES"/*.vtrace | head -1)
"$VT" replay --at "step $((from + 2))" "$first" > "$WORK/replay.txt" 2>&1
say "replay --at 'step $((from + 2))' (the last segment began in step $from): exit $?"
grep -E '^  (verdict|growth |alerted)|^  1\. ' "$WORK/replay.txt" | tee -a "$REPORT"
"$VT" report --last 0 --fail-on oom "$TRACES" > /dev/null 2> "$WORK/oom.err"
say "report --last 0 --fail-on oom: exit $?: $(grep -E '^  not checked' "$WORK/oom.err")"

say "== healthy: segments_loop.py without its leak, the same bounds, the live alert off"
HEALTHY=$WORK/healthy
mkdir -p "$HEALTHY"
t0=$(date +%s%N)
VT_SEG_LEAK=0 VT_SEG_STEPS=${VT_SEG_HEALTHY_STEPS:-20000} VRAMTRACE_ALERT=0 "$VT" run --per-tensor \
    --segment-bytes 1MiB --max-bytes 3MiB -o "$HEALTHY/" --no-summary \
    -- python3 "$LOOP" > "$WORK/healthy.out" 2> "$WORK/healthy.err"
say "traced: rc $?, $(( ($(date +%s%N) - t0) / 1000000 )) ms: $(cat "$WORK/healthy.out"); files: $(ls "$HEALTHY" | tr '\n' ' ')"
for last in "" "--last 0"; do
    # shellcheck disable=SC2086
    "$VT" report --json --fail-on growth $last "$HEALTHY" > "$WORK/h.json" 2> "$WORK/h.err"
    rc=$?
    python3 - "$WORK/h.json" "$rc" "${last:-whole}" <<'EOF' | tee -a "$REPORT"
import json, sys
r = json.load(open(sys.argv[1]))
seg = r["reading"]["segments"]
grows = [f for f in r["analysis"]["diagnosis"] if f["class"] == "steady-growth"]
print(f"healthy, {sys.argv[3]}: --fail-on growth exit {sys.argv[2]}; removed {seg['removed']}; "
      f"steady-growth findings {len(grows)}; verdict {r['limits']['verdict']}")
for f in grows:
    print(f"  {f['severity']} at {(f['site'] or {}).get('label')}: {f['evidence'].get('rate')} B per step, kept_from {f['evidence'].get('kept_from')}")
EOF
done
ls -la "$OUTDIR"
