#!/usr/bin/env bash
# What the tracer costs a real training loop on the GPU, and where that time goes, in one
# `device` call:
#
#   mkdir -p target/gpu && strip -o target/gpu/libvramtrace.so target/release/libvramtrace.so
#   run(command="VRAMTRACE_BUILD=target/gpu validation/gpu/profile_hooks.sh", carry=["target/gpu"])
#
# 1. The tracer's self-profile (VRAMTRACE_SELF_PROFILE=1: per stage of the hook and of the writer,
#    docs/performance.md) on bench_step_time.py's training loop, with the cudaMallocAsync backend (one event per tensor)
#    and with the default caching allocator: profile-async.txt, profile-caching.txt.
# Step time side by side (plain, traced, PyTorch's recorder) is bench_step_time.py's. STEPS
# (default 40) sets the measured steps per run.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${VRAMTRACE_BUILD:-$ROOT/target/release}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
LIB=$BUILD/libvramtrace.so
OUTDIR=${OUT:-/tmp/vramtrace-profile-out}
WORK=$(mktemp -d /tmp/vramtrace-profile.XXXXXX)
STEPS=${STEPS:-40}
LOOP="python3 $ROOT/validation/gpu/bench_step_time.py --worker --steps $STEPS"
[ -f "$LIB" ] || { echo "missing $LIB (build with cargo build --release, see the top of this script)"; exit 2; }
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1

{
    date -u +"date %Y-%m-%dT%H:%M:%SZ"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import torch,sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
    grep -m1 'model name' /proc/cpuinfo
    nproc
} >"$OUTDIR/facts.txt" 2>&1
cat "$OUTDIR/facts.txt"

alloc_env() {
    case $1 in
    async) echo "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync" ;;
    caching) echo "PYTORCH_CUDA_ALLOC_CONF=backend:native" ;;
    esac
}

# 1. Self-profile.
for alloc in async caching; do
    env $(alloc_env $alloc) LD_PRELOAD="$LIB" VRAMTRACE_SELF_PROFILE=1 \
        VRAMTRACE_OUTPUT="$WORK/profile-$alloc-%p.vtrace" $LOOP \
        >"$WORK/profile-$alloc.out" 2>"$OUTDIR/profile-$alloc.txt"
    calls=$(sed -n 's/^vramtrace self-profile: \([0-9]*\) traced calls.*/\1/p' "$OUTDIR/profile-$alloc.txt")
    echo "== self-profile, $alloc: $((STEPS + 5)) steps," \
        "$(( ${calls:-0} / (STEPS + 5) )) traced calls a step"
    cat "$OUTDIR/profile-$alloc.txt"
done
