#!/usr/bin/env bash
# Traces as data on real PyTorch runs (docs/data.md), in one `device` call: the Parquet dataset of
# one process and of a multi-rank job, asked which line holds the memory (and on which rank) with
# pyarrow, and with DuckDB when it can be imported (it is not on the GPU image: carry a wheel).
#
#   mkdir -p target/gpu && strip -o target/gpu/libvramtrace.so target/release/libvramtrace.so \
#       && strip -o target/gpu/vramtrace target/release/vramtrace
#   # optional, for DuckDB there (the image's python3 is 3.12):
#   pip download --only-binary=:all: --python-version 3.12 --no-deps -d target/gpu/pywheels duckdb==2.0.1
#   run(command="VRAMTRACE_BUILD=target/gpu validation/gpu/parquet.sh", carry=["target/gpu"],
#       kind="nvidia-h200-x4")           # or batch.sh parquet; on fewer GPUs, fewer ranks
#
# 1. leak_logits_ddp.py of the acceptance suite (64 MiB of logits kept a step at LEAK-LINE),
#    traced twice: with `--per-tensor` (every tensor a driver allocation: `allocations` names the
#    line) and with the default caching allocator (segments; PyTorch's recorder: `tensors` names
#    it). Each exported, each asked for the line holding most at the end.
# 2. A job of several ranks, traced with the default allocator: on several GPUs multi/job.py
#    ddp-leak, one rank a GPU (the last rank keeps 16 MiB a step at its LEAK-LINE); on one GPU the
#    acceptance suite's ranks_gloo.py, four ranks over gloo (rank 2 keeps 8 MiB a step). The
#    traces' directory exported as one run, asked for the rank and line above the median rank
#    (`tensors`), as the fleet query does.
# Results: $OUT/parquet.txt (every answer, PASS/FAIL lines) and $OUT/parquet-sizes.txt.
set -u
GPU=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$GPU/../.." && pwd)
ACC=$GPU/acceptance
BUILD=${VRAMTRACE_BUILD:-$ROOT/target/release}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
VT=$BUILD/vramtrace
OUTDIR=${OUT:-/tmp/vramtrace-parquet-out}
WORK=$(mktemp -d /tmp/vt-parquet.XXXXXX)
[ -x "$VT" ] && [ -f "$BUILD/libvramtrace.so" ] || { echo "missing $VT or libvramtrace.so beside it"; exit 2; }
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
REPORT=$OUTDIR/parquet.txt
: > "$REPORT"

# DuckDB from a carried wheel, when there is one and it is not installed.
if ! python3 -c 'import duckdb' 2>/dev/null && ls "$BUILD"/pywheels/duckdb-*.whl >/dev/null 2>&1; then
    python3 -m pip install --quiet --no-index --target "$WORK/py" "$BUILD"/pywheels/duckdb-*.whl \
        && export PYTHONPATH="$WORK/py${PYTHONPATH:+:$PYTHONPATH}"
fi
{
    date -u +"date %Y-%m-%dT%H:%M:%SZ"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
    python3 -c 'import torch, pyarrow; print("torch", torch.__version__, "pyarrow", pyarrow.__version__)'
    python3 -c 'import duckdb; print("duckdb", duckdb.__version__)' 2>/dev/null || echo "duckdb: none"
} >> "$REPORT" 2>&1

# The planted line of a program: `file.py:N` of its line ending in `# LEAK-LINE`.
leak_line() { echo "$(basename "$1"):$(grep -n '# LEAK-LINE$' "$1" | head -1 | cut -d: -f1)"; }

# Exports `$1` (a trace or a directory) to `$2`, with its time and size.
export_data() {
    local t0 t1
    t0=$(date +%s%3N)
    "$VT" export --format parquet -o "$2" "$1" >> "$REPORT" 2>&1
    local rc=$?
    t1=$(date +%s%3N)
    printf '%-28s rc %s  %6s ms  trace %12s B  parquet %12s B\n' "$(basename "$2")" "$rc" \
        $((t1 - t0)) "$(du -cb "$1" | tail -1 | cut -f1)" "$(du -sb "$2" | cut -f1)" \
        >> "$OUTDIR/parquet-sizes.txt"
}

line=$(leak_line "$ACC/leak_logits_ddp.py")
for mode in per-tensor default; do
    d=$WORK/single-$mode
    mkdir -p "$d"
    flag=""
    [ "$mode" = per-tensor ] && flag=--per-tensor
    ( cd "$ACC" && timeout 900 "$VT" run $flag --no-summary -o "$d/t-%p.vtrace" -- \
        python3 "$ACC/stepmark.py" "$ACC/leak_logits_ddp.py" > "$d/run.out" 2> "$d/run.err" )
    echo "== leak_logits_ddp ($mode): exit $?, planted line $line" >> "$REPORT"
    t=$(ls -S "$d"/t-*.vtrace 2>/dev/null | head -1)
    [ -n "$t" ] || { echo "FAIL no trace" >> "$REPORT"; continue; }
    export_data "$t" "$WORK/data-single-$mode"
    table=allocations
    [ "$mode" = default ] && table=tensors
    python3 "$GPU/parquet_check.py" single "$WORK/data-single-$mode" "$line" "$table" >> "$REPORT" 2>&1
done

NGPU=${VT_MULTI_GPUS:-$(nvidia-smi -L | wc -l)}
d=$WORK/fleet
mkdir -p "$d/traces"
if [ "$NGPU" -gt 1 ]; then
    # One rank a GPU over NCCL; the last rank leaks.
    prog=$GPU/multi/job.py ranks=$NGPU odd=$((NGPU - 1)) args=ddp-leak
else
    # One GPU: four ranks share it over gloo (NCCL refuses two ranks on one device); rank 2 leaks.
    prog=$ACC/ranks_gloo.py ranks=4 odd=2 args=
fi
line=$(leak_line "$prog")
( cd "$(dirname "$prog")" && PYTHONPATH=$ACC "$VT" run -o "$d/traces/rank%r-%p.vtrace" --no-summary -- \
    torchrun --nproc-per-node "$ranks" --master-port 29811 "$prog" $args \
    > "$d/run.out" 2> "$d/run.err" )
echo "== $(basename "$prog") $args on $ranks ranks: exit $?, planted line $line on rank $odd" >> "$REPORT"
export_data "$d/traces" "$WORK/data-fleet"
python3 "$GPU/parquet_check.py" fleet "$WORK/data-fleet" "$line" tensors "$odd" >> "$REPORT" 2>&1

cat "$OUTDIR/parquet-sizes.txt" >> "$REPORT"
tar czf "$OUTDIR/parquet-data.tar.gz" -C "$WORK" data-single-per-tensor data-single-default data-fleet 2>/dev/null
cat "$REPORT"
! grep -q '^FAIL' "$REPORT"
