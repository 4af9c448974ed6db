#!/usr/bin/env bash
# What the tracer costs a real training loop on the GPU, and where that time goes, in one
# `device` call:
#
#   mkdir -p target/gpu && strip -o target/gpu/libvramtrace.so target/release/libvramtrace.so
#   run(command="VRAMTRACE_BUILD=target/gpu validation/gpu/profile_hooks.sh", carry=["target/gpu"])
#
# 1. The tracer's self-profile (VRAMTRACE_SELF_PROFILE=1: per stage of the hook and of the writer,
#    docs/performance.md) on gpt_step.py, with the cudaMallocAsync backend (one event per tensor)
#    and with the default caching allocator: profile-async.txt, profile-caching.txt.
# 2. Step time side by side: ROUNDS (default 3) interleaved rounds, each running gpt_step.py plain,
#    traced (default settings), and with PyTorch's own recorder (Python stacks), for both
#    allocators. rounds.txt has every run's median step time; summary.txt the per-round ratios to
#    plain and their medians (the figures docs/performance.md asks for: cudaMallocAsync traced
#    <= 3 % over plain and not above the recorder; the caching allocator traced <= 1 %).
# Everything is also printed, summary last. STEPS (default 40) sets the measured steps per run.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${VRAMTRACE_BUILD:-$ROOT/target/release}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
LIB=$BUILD/libvramtrace.so
OUTDIR=${OUT:-/tmp/vramtrace-profile-out}
WORK=$(mktemp -d /tmp/vramtrace-profile.XXXXXX)
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-40}
LOOP="python3 $ROOT/validation/gpu/gpt_step.py --steps $STEPS"
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
    echo "== self-profile, $alloc: $(grep step_ms "$WORK/profile-$alloc.out"), $((STEPS + 5)) steps," \
        "$(( ${calls:-0} / (STEPS + 5) )) traced calls a step"
    cat "$OUTDIR/profile-$alloc.txt"
done

# 2. Step time, interleaved.
: >"$OUTDIR/rounds.txt"
for round in $(seq 1 "$ROUNDS"); do
    for alloc in async caching; do
        for mode in plain traced recorder; do
            case $mode in
            plain) pre="" ; extra="" ;;
            traced) pre="LD_PRELOAD=$LIB VRAMTRACE_OUTPUT=$WORK/bench-%p.vtrace" ; extra="" ;;
            recorder) pre="" ; extra="--record" ;;
            esac
            out=$(env $(alloc_env $alloc) $pre $LOOP $extra 2>"$WORK/err-$round-$alloc-$mode.txt")
            ms=$(echo "$out" | awk '/^step_ms/ {print $2}')
            rec=$(echo "$out" | grep -o 'recorder unsupported' || true)
            echo "round $round $alloc $mode ${ms:-failed} ${rec}" | tee -a "$OUTDIR/rounds.txt"
            rm -f "$WORK"/bench-*.vtrace
        done
    done
done

python3 - "$OUTDIR/rounds.txt" >"$OUTDIR/summary.txt" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) >= 5 and f[4] != "failed" and "unsupported" not in line:
        runs[(int(f[1]), f[2], f[3])] = float(f[4])
rounds = sorted({r for r, _, _ in runs})
print("step time over plain, per round (ratio - 1, %), and the median of the rounds")
for alloc in ("async", "caching"):
    for mode in ("traced", "recorder"):
        per = [100 * (runs[(r, alloc, mode)] / runs[(r, alloc, "plain")] - 1)
               for r in rounds if (r, alloc, mode) in runs and (r, alloc, "plain") in runs]
        if per:
            print(f"{alloc:8} {mode:9} median {statistics.median(per):+6.2f} %   rounds "
                  + " ".join(f"{p:+.2f}" for p in per))
        else:
            print(f"{alloc:8} {mode:9} no result")
    plain = [runs[(r, alloc, "plain")] for r in rounds if (r, alloc, "plain") in runs]
    if plain:
        print(f"{alloc:8} plain     median step {statistics.median(plain):.2f} ms")
PY
echo "== summary"
cat "$OUTDIR/summary.txt"
