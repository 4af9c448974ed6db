#!/usr/bin/env bash
# Live alerts, metrics and the CI gate on the real CUDA stack (issue 22), in one `device` call
# (~30 s):
#
#   run(command="VRAMTRACE_BUILD=target/gpu validation/gpu/live/run.sh", carry=["target/gpu"])
#
# job.py leak and healthy under `vramtrace check` with VRAMTRACE_ALERT_SIGNAL=USR1, a snapshot
# and a metrics textfile. Look for, in $OUT/summary.txt: leak exits 1 with "FAIL  growth" at
# job.py's kept.append line, one "vramtrace: ALERT" line naming that line, "SIGUSR1 at step N"
# from the script's handler, a snapshot file, vramtrace_growth_bytes_per_step near 4194304;
# healthy exits 0 with no ALERT line and "no SIGUSR1". Files: $OUT/live.tar.gz.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
BUILD=${VRAMTRACE_BUILD:-$ROOT/target/release}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
VT=$BUILD/vramtrace
OUTDIR=${OUT:-/tmp/vramtrace-live-out}
WORK=$(mktemp -d /tmp/vt-live.XXXXXX)
[ -x "$VT" ] || { echo "missing $VT"; exit 2; }
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1
S=$WORK/summary.txt
for shape in leak healthy; do
    mkdir -p "$WORK/$shape"
    VRAMTRACE_ALERT_SIGNAL=USR1 VRAMTRACE_ALERT_SNAPSHOT=1 VRAMTRACE_ALERT_INTERVAL_MS=200 \
    VRAMTRACE_METRICS_FILE="$WORK/$shape/metrics.prom" VRAMTRACE_METRICS_MS=500 \
        timeout 120 "$VT" check --max-leak 64MiB -o "$WORK/$shape/" -- python3 "$HERE/job.py" "$shape" \
        > "$WORK/$shape/stdout.txt" 2> "$WORK/$shape/stderr.txt"
    rc=$?
    {
        echo "== $shape: exit $rc"
        tail -2 "$WORK/$shape/stdout.txt"
        grep -E "ALERT|FAIL|ok  |check:" "$WORK/$shape/stderr.txt"
        ls "$WORK/$shape"
        grep -E "^vramtrace_(growth|leak_suspect|steps|alerts)" "$WORK/$shape/metrics.prom"
    } >> "$S" 2>&1
done
cat "$S"
cp "$S" "$OUTDIR/summary.txt"
tar -czf "$OUTDIR/live.tar.gz" -C "$WORK" .
