#!/usr/bin/env bash
# Multi-rank validation (issue 23): torchrun with one process a GPU, each mode of job.py plain and
# under `vramtrace run`, in one `device` call:
#
#   run(command="VRAMTRACE_BUILD=target/gpu validation/gpu/multi/run.sh", carry=["target/gpu"],
#       kind="nvidia-h200-x2")          # or x4; on one GPU it runs with one rank
#
# Per mode: exit codes and rank 0's stdout plain vs traced, one trace per rank (named by rank),
# `vramtrace report` of the trace directory (the per-rank table) as text and JSON, and each
# rank's median step time plain and traced. Results: $OUT/multi.tar.gz and $OUT/summary.txt.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
BUILD=${VRAMTRACE_BUILD:-$ROOT/target/release}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
VT=$BUILD/vramtrace
OUTDIR=${OUT:-/tmp/vramtrace-multi-out}
WORK=$(mktemp -d /tmp/vt-multi.XXXXXX)
[ -x "$VT" ] || { echo "missing $VT"; exit 2; }
mkdir -p "$OUTDIR"
# NVLink multicast stays off on these machines (it can take the host's GPUs out of service).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
NGPU=${VT_MULTI_GPUS:-$(nvidia-smi -L | wc -l)}
MODES=("$@")
[ ${#MODES[@]} -gt 0 ] || MODES=(ddp fsdp ddp-leak pg)
{
    date -u +"date %Y-%m-%dT%H:%M:%SZ"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import torch; print("torch", torch.__version__, "nccl", ".".join(map(str, torch.cuda.nccl.version())))'
    echo "ranks $NGPU"
} > "$WORK/facts.txt" 2>&1
: > "$WORK/summary.txt"
port=29700
for m in "${MODES[@]}"; do
    d=$WORK/$m
    mkdir -p "$d/traces"
    port=$((port + 1))
    torchrun --nproc-per-node "$NGPU" --master-port $port "$HERE/job.py" "$m" > "$d/plain.out" 2> "$d/plain.err"
    echo $? > "$d/plain.rc"
    port=$((port + 1))
    "$VT" run -o "$d/traces/rank%r-%p.vtrace" --no-summary -- \
        torchrun --nproc-per-node "$NGPU" --master-port $port "$HERE/job.py" "$m" > "$d/traced.out" 2> "$d/traced.err"
    echo $? > "$d/traced.rc"
    "$VT" report "$d/traces" > "$d/report.txt" 2>&1
    "$VT" report --json "$d/traces" > "$d/report.json" 2> "$d/report.err"
    same=$(cmp -s "$d/plain.out" "$d/traced.out" && echo identical || echo DIFFERENT)
    printf '%s: rc %s/%s, stdout %s, traces %s\n' "$m" "$(cat "$d/plain.rc")" "$(cat "$d/traced.rc")" \
        "$same" "$(ls "$d/traces" | grep -c vtrace$)" >> "$WORK/summary.txt"
    grep -h "VT-TIME" "$d/plain.err" | sed 's/^/  plain  /' >> "$WORK/summary.txt"
    grep -h "VT-TIME" "$d/traced.err" | sed 's/^/  traced /' >> "$WORK/summary.txt"
done
cat "$WORK/facts.txt" "$WORK/summary.txt"
cp "$WORK/facts.txt" "$WORK/summary.txt" "$OUTDIR/"
tar czf "$OUTDIR/multi.tar.gz" -C "$WORK" .
