#!/usr/bin/env bash
# Runs first_call.cu under the tracer three ways (every layer; the driver alone; the runtime
# alone) and keeps each trace's events as CSV and its report, in $OUT: what a thread's first
# stream-ordered allocation asks of the driver, and whether the tracer merges it into one object.
#
#   run(command="VRAMTRACE_BUILD=target/gpu validation/gpu/threads/run.sh", carry=["target/gpu"])
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
BUILD=${VRAMTRACE_BUILD:-$ROOT/target/release}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
OUT=${OUT:-/tmp/vramtrace-threads-out}
mkdir -p "$OUT"
WORK=$(mktemp -d)
# The shared runtime, as PyTorch loads it (nvcc links the static one by default, whose calls no
# preloaded library sees: only their driver calls are traced then).
nvcc -O2 -cudart shared -o "$WORK/first_call" "$HERE/first_call.cu" -lpthread > "$OUT/nvcc.log" 2>&1 || { cat "$OUT/nvcc.log"; exit 2; }
for layers in all driver runtime; do
    VRAMTRACE_CAPTURE=$layers "$BUILD/vramtrace" run --no-summary -o "$WORK/$layers.vtrace" -- "$WORK/first_call" > "$OUT/$layers.out" 2> "$OUT/$layers.err"
    echo "$layers: exit $?"
    [ -f "$WORK/$layers.vtrace" ] || { echo "$layers: no trace (no call of that layer)"; continue; }
    "$BUILD/vramtrace" export --format csv-events -o "$OUT/$layers.csv" "$WORK/$layers.vtrace"
    "$BUILD/vramtrace" report "$WORK/$layers.vtrace" > "$OUT/$layers.report" 2>&1
    grep -E "^  (anomalies|live) " "$OUT/$layers.report"
done
"$WORK/first_call" > "$OUT/plain.out"; echo "plain: exit $?"
cmp "$OUT/plain.out" "$OUT/all.out" && echo "stdout identical"
