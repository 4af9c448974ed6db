#!/usr/bin/env bash
# The acceptance suite of real training programs, in one `device` call on the GPU machine.
#
#   mkdir -p target/gpu && strip -o target/gpu/libvramtrace.so target/release/libvramtrace.so \
#       && strip -o target/gpu/vramtrace target/release/vramtrace
#   run(command="VRAMTRACE_BUILD=target/gpu validation/gpu/acceptance/run.sh validate",
#       carry=["target/gpu"])
#
# Modes:
#   validate  each program plain, under `vramtrace run` (steps from the Python hooks: what a
#             PyTorch user gets) and under `vramtrace run --no-python-hooks` (steps from the
#             allocation pattern alone: what a JAX or CuPy user gets); stdout and exit code
#             compared; the diff pair; a program whose truth has a `fixed_env` run once more
#             with it (`fixed`: no leak) and diffed against its traced run; a report (text and
#             --json) of every trace
#   explore   each program under `vramtrace run` as it is and with a step mark at every optimizer
#             step (stepmark.py), and PyTorch's own recorder on two of them (record_snapshot.py):
#             material for developing the analyses off the GPU machine
#   marks     only the runs with a step mark at every optimizer step
# Programs (default: every healthy_*.py and leak_*.py here) may follow the mode. Jobs run
# VT_ACC_JOBS at a time (default 4): the programs are small, and step times are not compared here
# (validation/gpu/bench_step_time.py measures overhead). Results: $OUT/acceptance.tar.gz and
# $OUT/summary.txt; check.py turns them into the table of docs/gpu-validation.md.
set -u
ACC=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$ACC/../../.." && pwd)
BUILD=${VRAMTRACE_BUILD:-$ROOT/target/release}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
VT=$BUILD/vramtrace
OUTDIR=${OUT:-/tmp/vramtrace-acc-out}
WORK=$(mktemp -d /tmp/vt-acc.XXXXXX)
MODE=${1:-validate}
shift || true
[ -x "$VT" ] && [ -f "$BUILD/libvramtrace.so" ] || { echo "missing $VT or libvramtrace.so beside it"; exit 2; }
mkdir -p "$OUTDIR"
export PYTHONPATH=$ACC${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 VT_WORK=$WORK VT=$VT ACC
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

PROGRAMS=("$@")
[ ${#PROGRAMS[@]} -gt 0 ] || PROGRAMS=($(cd "$ACC" && ls healthy_*.py leak_*.py ranks_*.py | sed 's/\.py$//'))

{
    date -u +"date %Y-%m-%dT%H:%M:%SZ"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import torch,sys,transformers; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())), "transformers", transformers.__version__)'
    "$VT" --version
    echo "mode $MODE"
} > "$WORK/facts.txt" 2>&1
nvcc -O2 -shared -Xcompiler -fPIC -o "$WORK/libleaky.so" "$ROOT/validation/gpu/ext/leaky.cu" \
    > "$WORK/nvcc.log" 2>&1 || echo "nvcc failed (see nvcc.log)" >> "$WORK/facts.txt"

# The diff pair's second program: healthy_gpt.py with three lines inserted above the loop (so
# every line below moves) and one leaking line in the loop (16 MiB a step).
python3 - "$ACC/healthy_gpt.py" "$WORK/gpt_leaky.py" <<'PY'
import sys
src = open(sys.argv[1]).read()
src = src.replace("# DIFF-LEAK-SETUP", "# (added for the diff check)\n# (so that every line below moves)\nkept = []")
src = src.replace("    # DIFF-LEAK-HERE", "    kept.append(logits[:2].detach().float())  # DIFF-LEAK-LINE")
open(sys.argv[2], "w").write(src)
PY

# job NAME VARIANT PORT: one run of one program, its outputs under $WORK/NAME/VARIANT.*
job() {
    local name=$1 variant=$2 port=$3 prog="$ACC/$1.py" dir="$VT_WORK/$1"
    local src="$prog"; [ "$name" = gpt_leaky ] && src="$ACC/healthy_gpt.py"
    [ "$name" = gpt_leaky ] && prog="$VT_WORK/gpt_leaky.py"
    [ "$name" = gpt_leaky ] || [ -f "$prog" ] || { echo "$name: no such program" > "$dir.missing"; return; }
    mkdir -p "$dir"
    local envs=($(python3 "$ACC/truth.py" env "$src") "MASTER_PORT=$port")
    local args=($(python3 "$ACC/truth.py" args "$src" "$VT_WORK"))
    # A job of several ranks (TRUTH "ranks") runs under torchrun, its traces named by rank.
    local ranks=$(python3 "$ACC/truth.py" ranks "$src")
    local py=(python3) name_of="$variant-%p"
    if [ "$ranks" -gt 1 ]; then
        py=(torchrun --nproc-per-node "$ranks" --master-port "$((port + 100))")
        name_of="$variant-rank%r-%p"
    fi
    local cmd
    case $variant in
        plain) cmd=("${py[@]}" "$prog") ;;
        # The self-profile says what a hand-over of PyTorch's history cost (an alert's too).
        traced|traced2) cmd=(env VRAMTRACE_SELF_PROFILE=1 "$VT" run -o "$dir/$name_of.vtrace" --no-summary -- "${py[@]}" "$prog") ;;
        fixed) cmd=(env $(python3 "$ACC/truth.py" fixed_env "$src") "$VT" run -o "$dir/$name_of.vtrace" --no-summary -- "${py[@]}" "$prog") ;;
        bare) cmd=("$VT" run -o "$dir/$name_of.vtrace" --no-summary --no-python-hooks -- "${py[@]}" "$prog") ;;
        marks) cmd=("$VT" run -o "$dir/$name_of.vtrace" --no-summary -- python3 "$ACC/stepmark.py" "$prog") ;;
        record) cmd=(python3 "$ACC/record_snapshot.py" "$dir/record.pickle" 100000 "$prog") ;;
    esac
    local t0=$(date +%s%N)
    env "${envs[@]}" timeout 300 "${cmd[@]}" "${args[@]}" > "$dir/$variant.out" 2> "$dir/$variant.err"
    echo $? > "$dir/$variant.rc"
    echo $(( ($(date +%s%N) - t0) / 1000000 )) > "$dir/$variant.ms"
}
export -f job

jobs=()
i=0
for p in "${PROGRAMS[@]}"; do
    case $MODE in
        validate) variants=(plain traced bare) ;;
        explore) variants=(traced marks) ;;
        marks) variants=(marks) ;;
        *) echo "unknown mode $MODE"; exit 2 ;;
    esac
    if [ "$MODE" = validate ] && [ -n "$(python3 "$ACC/truth.py" fixed_env "$ACC/$p.py" 2>/dev/null)" ]; then
        variants+=(fixed)
    fi
    for v in "${variants[@]}"; do jobs+=("$p $v $((29600 + i))"); i=$((i + 1)); done
done
# The diff pair: healthy_gpt twice as it is, once with the added leak.
[ "$MODE" = marks ] || jobs+=("healthy_gpt traced2 $((29600 + i))" "gpt_leaky traced $((29601 + i))")
if [ "$MODE" = explore ]; then
    jobs+=("healthy_gpt record $((29602 + i))" "leak_logits_ddp record $((29603 + i))")
fi
# Programs whose truth is measured from the driver's figures for the whole device (TRUTH
# "serial") run alone, after the others.
serial=() parallel=()
for j in "${jobs[@]}"; do
    if python3 "$ACC/truth.py" json "$ACC/${j%% *}.py" 2>/dev/null | grep -q '"serial": true'; then
        serial+=("$j")
    else
        parallel+=("$j")
    fi
done
printf '%s\n' "${parallel[@]}" | xargs -P "${VT_ACC_JOBS:-4}" -L 1 bash -c 'job "$0" "$1" "$2"'
[ ${#serial[@]} -eq 0 ] || printf '%s\n' "${serial[@]}" | xargs -P 1 -L 1 bash -c 'job "$0" "$1" "$2"'

: > "$WORK/summary.txt"
for d in "$WORK"/*/; do
    name=$(basename "$d")
    for t in "$d"*.vtrace; do
        [ -f "$t" ] || continue
        "$VT" report --json "$t" > "${t%.vtrace}.report.json" 2> "${t%.vtrace}.report.err"
        "$VT" report "$t" > "${t%.vtrace}.report.txt" 2>&1
    done
    # The fixed run against the traced one: what the leak changed.
    fixed=$(ls "$d"fixed-*.vtrace 2>/dev/null | head -1) traced=$(ls "$d"traced-*.vtrace 2>/dev/null | head -1)
    if [ -n "$fixed" ] && [ -n "$traced" ]; then
        "$VT" diff "$fixed" "$traced" > "${d}fixed.diff.txt" 2>&1
        "$VT" diff --json "$fixed" "$traced" > "${d}fixed.diff.json" 2>/dev/null
        echo $? > "${d}fixed.diff.exit"
    fi
    # A job of several ranks: the report of each variant's directory (the rank table) and the
    # odd rank against the median of the others.
    odd=$(python3 "$ACC/truth.py" leaking_rank "$ACC/$name.py" 2>/dev/null)
    for v in traced bare; do
        ls "$d$v"-rank*.vtrace > /dev/null 2>&1 || continue
        mkdir -p "$d$v-ranks"
        mv "$d$v"-rank*.vtrace "$d$v-ranks/"
        "$VT" report "$d$v-ranks" > "$d$v-ranks.report.txt" 2>&1
        "$VT" report --json "$d$v-ranks" > "$d$v-ranks.report.json" 2> "$d$v-ranks.report.err"
        # Every rank leaking alike ("all"): no rank to hold against the others.
        if [ -n "$odd" ] && [ "$odd" != all ]; then
            "$VT" diff --rank "$odd" "$d$v-ranks" > "$d$v-ranks.diff.txt" 2>&1
            "$VT" diff --json --rank "$odd" "$d$v-ranks" > "$d$v-ranks.diff.json" 2>/dev/null
        fi
    done
    for rc in "$d"*.rc; do
        v=$(basename "$rc" .rc)
        same=""
        if [ "$v" = traced ] || [ "$v" = bare ] && [ -f "$d/plain.out" ]; then
            same=$(cmp -s "$d/plain.out" "$d/$v.out" && echo "stdout identical" || echo "stdout DIFFERENT")
        fi
        printf '%s %s: rc %s, %s ms, %s traces %s\n' "$name" "$v" "$(cat "$rc")" "$(cat "$d/$v.ms")" \
            "$(ls "$d$v"-*.vtrace "$d$v"-ranks/*.vtrace 2>/dev/null | wc -l)" "$same" >> "$WORK/summary.txt"
    done
done
gzip -q "$WORK"/*/record.pickle 2>/dev/null
cat "$WORK/facts.txt" "$WORK/summary.txt"
cp "$WORK/summary.txt" "$WORK/facts.txt" "$OUTDIR/"
tar czf "$OUTDIR/acceptance.tar.gz" -C "$WORK" .
ls -la "$OUTDIR"
