#!/usr/bin/env bash
# GPU validation of vramtrace: runs every scenario twice (plain, then under the tracer) on the
# lent GPU machine, in one call, and packs outputs, traces and JSON reports into $OUT.
#
#   mkdir -p target/gpu && strip -o target/gpu/libvramtrace.so target/release/libvramtrace.so \
#       && strip -o target/gpu/vramtrace target/release/vramtrace
#   run(command="VRAMTRACE_BUILD=target/gpu validation/gpu/run.sh [SCENARIO...]",
#       carry=["target/gpu"])
#
# Scenarios (default: all): default expandable async nccl cublas extension cupy jax oom pyleak
# train; and, to explain device accounting, accounting accounting_eager default_eager nccl_eager
# (CUDA_MODULE_LOADING=EAGER). Results: $OUT/results.tar.gz (per scenario: .plain.out/.err, .traced.out/.err, traces,
# .report.json) and $OUT/summary.txt. Nothing is compared here; docs/gpu-validation.md records
# what the results showed.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# VRAMTRACE_BUILD: where the carried build is (default target/release; target/gpu holds stripped
# copies, small enough to carry).
BUILD=${VRAMTRACE_BUILD:-$ROOT/target/release}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
LIB=$BUILD/libvramtrace.so
VT=$BUILD/vramtrace
OUTDIR=${OUT:-/tmp/vramtrace-gpu-out}
WORK=$(mktemp -d /tmp/vramtrace-gpu.XXXXXX)
SC=$ROOT/validation/gpu/scenarios
mkdir -p "$OUTDIR"
[ -x "$VT" ] && [ -f "$LIB" ] || { echo "missing $LIB or $VT (build with cargo build --release)"; exit 2; }
export PYTHONPATH=$SC${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1

{
    date -u +"date %Y-%m-%dT%H:%M:%SZ"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import torch,sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))'
    nvcc --version | tail -1
    uname -r
} > "$WORK/facts.txt" 2>&1

# scenario name → environment and command line
# ENVS: both runs; TENVS: the traced run only (what `vramtrace run` would set).
declare -A ENVS TENVS CMDS
ENVS[default]=""
CMDS[default]="python3 $SC/alloc_steps.py"
ENVS[expandable]="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
CMDS[expandable]="python3 $SC/alloc_steps.py"
ENVS[async]="PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync"
CMDS[async]="python3 $SC/alloc_steps.py"
ENVS[nccl]="NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ALLOC NCCL_DEBUG_FILE=$WORK/nccl-debug.%p.log"
CMDS[nccl]="python3 $SC/nccl_pg.py"
ENVS[cublas]=""
CMDS[cublas]="python3 $SC/cublas.py"
ENVS[extension]=""
CMDS[extension]="python3 $SC/extension.py $WORK/libleaky.so"
ENVS[cupy]=""
CMDS[cupy]="python3 $SC/cupy_arrays.py"
ENVS[jax]="XLA_PYTHON_CLIENT_PREALLOCATE=false"
CMDS[jax]="python3 $SC/jax_arrays.py"
ENVS[oom]=""
CMDS[oom]="python3 $SC/oom.py"
ENVS[pyleak]="PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync"
TENVS[pyleak]="NVTX_INJECTION64_PATH=$LIB VRAMTRACE_STEP_RANGE=step"
CMDS[pyleak]="python3 $SC/py_leak.py"
ENVS[accounting]=""
CMDS[accounting]="python3 $SC/accounting.py"
ENVS[accounting_eager]="CUDA_MODULE_LOADING=EAGER"
CMDS[accounting_eager]="python3 $SC/accounting.py"
ENVS[default_eager]="CUDA_MODULE_LOADING=EAGER"
CMDS[default_eager]="python3 $SC/alloc_steps.py"
ENVS[nccl_eager]="CUDA_MODULE_LOADING=EAGER NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ALLOC NCCL_DEBUG_FILE=$WORK/nccl-eager-debug.%p.log"
CMDS[nccl_eager]="python3 $SC/nccl_pg.py"
ENVS[train]=""
CMDS[train]="python3 $SC/train.py 30"

SCENARIOS=("$@")
[ ${#SCENARIOS[@]} -gt 0 ] || SCENARIOS=(default expandable async nccl cublas extension cupy jax oom pyleak train)

if printf '%s\n' "${SCENARIOS[@]}" | grep -qx extension; then
    nvcc -O2 -shared -Xcompiler -fPIC -o "$WORK/libleaky.so" "$ROOT/validation/gpu/ext/leaky.cu" \
        > "$WORK/nvcc.log" 2>&1 || echo "nvcc failed (see nvcc.log)" >> "$WORK/facts.txt"
fi

: > "$WORK/summary.txt"
for s in "${SCENARIOS[@]}"; do
    cmd=${CMDS[$s]:-}
    [ -n "$cmd" ] || { echo "$s: unknown scenario" >> "$WORK/summary.txt"; continue; }
    t0=$(date +%s%N)
    env ${ENVS[$s]} $cmd > "$WORK/$s.plain.out" 2> "$WORK/$s.plain.err"
    rc_plain=$?
    t1=$(date +%s%N)
    env ${ENVS[$s]} ${TENVS[$s]:-} VRAMTRACE_OUTPUT="$WORK/$s-%p.vtrace" LD_PRELOAD="$LIB" \
        $cmd > "$WORK/$s.traced.out" 2> "$WORK/$s.traced.err"
    rc_traced=$?
    t2=$(date +%s%N)
    same=$(cmp -s "$WORK/$s.plain.out" "$WORK/$s.traced.out" && echo identical || echo DIFFERENT)
    for t in "$WORK/$s"-*.vtrace; do
        [ -f "$t" ] || continue
        "$VT" report --json --top 30 "$t" > "${t%.vtrace}.report.json" 2> "${t%.vtrace}.report.err"
        "$VT" report --top 15 "$t" > "${t%.vtrace}.report.txt" 2>&1
    done
    printf '%s: rc %s/%s, stdout %s, wall %sms/%sms, traces %s\n' "$s" "$rc_plain" "$rc_traced" \
        "$same" "$(( (t1 - t0) / 1000000 ))" "$(( (t2 - t1) / 1000000 ))" \
        "$(ls "$WORK/$s"-*.vtrace 2>/dev/null | wc -l)" >> "$WORK/summary.txt"
done
cat "$WORK/facts.txt" "$WORK/summary.txt"
cp "$WORK/summary.txt" "$WORK/facts.txt" "$OUTDIR/"
tar czf "$OUTDIR/results.tar.gz" -C "$WORK" .
ls -la "$OUTDIR"
