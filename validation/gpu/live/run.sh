#!/usr/bin/env bash
# Live alerts and the CI gate on real training programs (docs/live.md), in one `device` call:
#
#   run(command="VRAMTRACE_BUILD=target/gpu validation/gpu/live/run.sh", carry=["target/gpu"])
#
# - leak_logits_ddp (+64 MiB a step at its LEAK-LINE) under `vramtrace run` with
#   VRAMTRACE_ALERT_SIGNAL=USR1 and VRAMTRACE_ALERT_SNAPSHOT=1, through checkpoint.py (a SIGUSR1
#   handler that says at which optimizer step it was called): the ALERT line must name the leaking
#   line, the handler must run once, a snapshot must lie beside the trace, the exit code stay 0;
# - healthy_gpt the same way: no alert, no signal;
# - `vramtrace check` on leak_extension (exit 1 expected), on healthy_peak and on healthy_compile
#   (torch.compile's worker processes; exit 0 expected);
# - job.py leak and healthy under `vramtrace check` (the growth verdict) with the signal, a snapshot
#   and a metrics textfile: leak exits 1 with "FAIL  growth" at job.py's kept.append line, one
#   ALERT line naming it, "SIGUSR1 at step N" from the script's handler, a snapshot file,
#   vramtrace_growth_bytes_per_step near 4194304; healthy exits 0, no ALERT, "no SIGUSR1";
# - cupy_loop.py leak and healthy (no step marks) with VRAMTRACE_ALERT_CONFIRM_PATTERN=3s: the
#   leak alerts at its LEAK-LINE while it runs (steps from its allocation pattern), healthy never.
# Results: $OUT/summary.txt and $OUT/live.tar.gz.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
ACC=$ROOT/validation/gpu/acceptance
BUILD=${VRAMTRACE_BUILD:-$ROOT/target/release}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
VT=$BUILD/vramtrace
OUTDIR=${OUT:-/tmp/vramtrace-live-out}
WORK=$(mktemp -d /tmp/vt-live.XXXXXX)
[ -x "$VT" ] || { echo "missing $VT"; exit 2; }
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
nvcc -O2 -shared -Xcompiler -fPIC -o "$WORK/libleaky.so" "$ROOT/validation/gpu/ext/leaky.cu" > "$WORK/nvcc.log" 2>&1
S=$WORK/summary.txt
: > "$S"

# one NAME PROGRAM -- COMMAND...: runs COMMAND with PROGRAM's environment and arguments appended
one() {
    local name=$1 prog=$2; shift 3
    local d=$WORK/$name
    mkdir -p "$d"
    local envs=($(python3 "$ACC/truth.py" env "$ACC/$prog.py") "MASTER_PORT=$((29800 + RANDOM % 100))")
    local args=($(python3 "$ACC/truth.py" args "$ACC/$prog.py" "$WORK"))
    env "${envs[@]}" timeout 300 "$@" "${args[@]}" > "$d/out" 2> "$d/err"
    echo $? > "$d/rc"
}

for prog in leak_logits_ddp healthy_gpt; do
    one "alert-$prog" "$prog" -- env VRAMTRACE_ALERT_SIGNAL=USR1 VRAMTRACE_ALERT_SNAPSHOT=1 \
        "$VT" run --no-summary -o "$WORK/alert-$prog/t-%p.vtrace" -- python3 "$HERE/checkpoint.py" "$ACC/$prog.py"
    d=$WORK/alert-$prog
    {
        echo "$prog with alerts: rc $(cat "$d/rc")"
        echo "  alert lines: $(grep -c 'vramtrace: ALERT' "$d/err")"
        grep 'vramtrace: ALERT' "$d/err" | sed 's/^/    /'
        echo "  checkpoint handler calls: $(grep -c VT-CHECKPOINT "$d/err")"
        grep VT-CHECKPOINT "$d/err" | sed 's/^/    /'
        echo "  snapshots beside the trace: $(ls "$d" | grep -c 'alert-device')"
        echo "  traces: $(ls "$d"/*.vtrace 2>/dev/null | wc -l)"
    } >> "$S"
    for t in "$d"/*.vtrace; do [ -f "$t" ] && "$VT" report "$t" > "${t%.vtrace}.report.txt" 2>&1; done
done

one check-leak_extension leak_extension -- "$VT" check -o "$WORK/check-leak_extension/t-%p.vtrace" -- python3 "$ACC/leak_extension.py"
one check-healthy_peak healthy_peak -- "$VT" check -o "$WORK/check-healthy_peak/t-%p.vtrace" -- python3 "$ACC/healthy_peak.py"
# torch.compile's workers are processes exec'd with environments of their own: each must keep
# the run's settings, or the gate cannot pass (exit 0 expected).
one check-healthy_compile healthy_compile -- "$VT" check -o "$WORK/check-healthy_compile/t-%p.vtrace" -- python3 "$ACC/healthy_compile.py"
for c in leak_extension healthy_peak healthy_compile; do
    d=$WORK/check-$c
    echo "check $c: rc $(cat "$d/rc")" >> "$S"
    grep -A8 '^vramtrace check' "$d/err" | sed 's/^/    /' >> "$S"
done
for shape in leak healthy; do
    mkdir -p "$WORK/$shape"
    VRAMTRACE_ALERT_SIGNAL=USR1 VRAMTRACE_ALERT_SNAPSHOT=1 VRAMTRACE_ALERT_INTERVAL_MS=200 \
    VRAMTRACE_METRICS_FILE="$WORK/$shape/metrics.prom" VRAMTRACE_METRICS_MS=500 \
        timeout 120 "$VT" check -o "$WORK/$shape/" -- python3 "$HERE/job.py" "$shape" \
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
for shape in leak healthy; do
    d=$WORK/cupy-$shape
    mkdir -p "$d"
    VRAMTRACE_ALERT_CONFIRM_PATTERN=3s timeout 120 "$VT" run --no-summary -o "$d/t-%p.vtrace" \
        -- python3 "$HERE/cupy_loop.py" "$shape" > "$d/out" 2> "$d/err"
    rc=$?
    {
        echo "cupy_loop $shape (no step marks): rc $rc, $(cat "$d/out")"
        echo "  alert lines: $(grep -c 'vramtrace: ALERT' "$d/err")"
        grep 'vramtrace: ALERT' "$d/err" | sed 's/^/    /'
        echo "  LEAK-LINE is cupy_loop.py:$(grep -n '# LEAK-LINE$' "$HERE/cupy_loop.py" | cut -d: -f1)"
    } >> "$S"
    for t in "$d"/*.vtrace; do [ -f "$t" ] && "$VT" report "$t" > "${t%.vtrace}.report.txt" 2>&1; done
done
cat "$S"
cp "$S" "$OUTDIR/"
tar czf "$OUTDIR/live.tar.gz" -C "$WORK" .
