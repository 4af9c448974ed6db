#!/usr/bin/env bash
# The viewers on real GPU traces, in one `device` call: traces real training programs, then
# writes every export and the HTML report of each trace, with sizes and times, and has PyTorch's
# own memory_viz read the snapshot pickles.
#
#   mkdir -p target/gpu && strip -o target/gpu/libvramtrace.so target/release/libvramtrace.so \
#       && strip -o target/gpu/vramtrace target/release/vramtrace
#   run(command="VRAMTRACE_BUILD=target/gpu validation/gpu/exports.sh", carry=["target/gpu"])
#
# Traces (default): leak_logits_ddp.py of the acceptance suite with a step mark at every
# optimizer step, under the default caching allocator (a driver-level trace of few, large
# segments) and under backend:cudaMallocAsync (every tensor an event: the largest trace);
# healthy_gpt.py the same way. Trace files given as arguments are used instead.
#
# For each trace: `report --html` and every `export` format, each timed, with its size; then
# `python3 -m torch.cuda._memory_viz stats|trace|trace_plot|segment_plot` on the pickle, and
# torch's own readers (segsum, trace, memory, segments) called in Python. A healthy trace's
# growth flame graph ends rc=2 "nothing to draw (no call site grows steadily)": that is its
# answer, not a failure. Results:
# $OUT/exports.txt (the table), $OUT/memory_viz.txt, and the smaller outputs of the first trace
# under $OUT/files/.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ACC=$ROOT/validation/gpu/acceptance
BUILD=${VRAMTRACE_BUILD:-$ROOT/target/release}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
VT=$BUILD/vramtrace
OUTDIR=${OUT:-/tmp/vramtrace-exports-out}
WORK=$(mktemp -d /tmp/vt-exports.XXXXXX)
[ -x "$VT" ] && [ -f "$BUILD/libvramtrace.so" ] || { echo "missing $VT or libvramtrace.so beside it"; exit 2; }
mkdir -p "$OUTDIR/files"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

TRACES=("$@")
if [ ${#TRACES[@]} -eq 0 ]; then
    for prog in leak_logits_ddp healthy_gpt; do
        for alloc in default async; do
            dir=$WORK/$prog-$alloc
            mkdir -p "$dir"
            conf=""
            [ "$alloc" = async ] && conf="backend:cudaMallocAsync"
            ( cd "$ACC" && PYTORCH_CUDA_ALLOC_CONF=$conf timeout 900 "$VT" run --no-summary \
                -o "$dir/t-%p.vtrace" -- python3 "$ACC/stepmark.py" "$ACC/$prog.py" \
                > "$dir/run.out" 2> "$dir/run.err" )
            echo "$prog ($alloc allocator): exit $?" >> "$OUTDIR/runs.txt"
            # The main process's trace: the largest one the run wrote.
            t=$(ls -S "$dir"/t-*.vtrace 2>/dev/null | head -1)
            [ -n "$t" ] && cp "$t" "$WORK/$prog-$alloc.vtrace" && TRACES+=("$WORK/$prog-$alloc.vtrace")
        done
    done
fi

ms() { date +%s%3N; }
size() { stat -c %s "$1" 2>/dev/null || echo 0; }

printf '%-32s %-22s %12s %9s %s\n' trace output bytes ms status > "$OUTDIR/exports.txt"
first=1
for t in "${TRACES[@]}"; do
    name=$(basename "$t" .vtrace)
    d=$WORK/out-$name
    mkdir -p "$d"
    printf '%-32s %-22s %12s %9s\n' "$name" "(trace)" "$(size "$t")" "-" >> "$OUTDIR/exports.txt"
    # name|command producing $d/<file>
    jobs=(
        "report.html|report --html $d/report.html $t"
        "perfetto.json|export -f perfetto -o $d/perfetto.json $t"
        "end.svg|export -f flamegraph -o $d/end.svg $t"
        "peak.svg|export -f flamegraph --at peak -o $d/peak.svg $t"
        "growth.svg|export -f flamegraph --at growth -o $d/growth.svg $t"
        "snapshot.pickle|export -f pytorch -o $d/snapshot.pickle $t"
        "live.csv|export -f csv-live -o $d/live.csv $t"
        "events.csv|export -f csv-events -o $d/events.csv $t"
    )
    for j in "${jobs[@]}"; do
        file=${j%%|*}
        args=${j#*|}
        start=$(ms)
        # shellcheck disable=SC2086
        "$VT" $args > "$d/$file.log" 2>&1
        rc=$?
        end=$(ms)
        printf '%-32s %-22s %12s %9s %s\n' "$name" "$file" "$(size "$d/$file")" "$((end - start))" \
            "rc=$rc $(tail -1 "$d/$file.log")" >> "$OUTDIR/exports.txt"
    done
    {
        echo "== $name"
        for cmd in stats trace; do
            echo "-- python -m torch.cuda._memory_viz $cmd (last lines)"
            python3 -m torch.cuda._memory_viz "$cmd" "$d/snapshot.pickle" 2>&1 | tail -4
            echo "rc=${PIPESTATUS[0]}"
        done
        for plot in trace_plot segment_plot; do
            python3 -m torch.cuda._memory_viz "$plot" "$d/snapshot.pickle" -o "$d/$plot.html" 2>&1 | tail -2
            echo "-- $plot: rc=${PIPESTATUS[0]}, $(size "$d/$plot.html") bytes"
        done
        # torch's readers called directly: every segment and block walked, the trace formatted.
        python3 - "$d/snapshot.pickle" <<'PY' 2>&1
import pickle, sys
from torch.cuda import _memory_viz as mv
data = pickle.load(open(sys.argv[1], "rb"))
print("segsum:", mv.segsum(data).splitlines()[-1])
print("trace:", len(mv.trace(data).splitlines()), "lines")
lines = lambda text: text  # flamegraph input, without fetching flamegraph.pl
print("memory flame graph input:", len(mv.memory(data, format_flamegraph=lines).splitlines()), "stacks")
print("segments flame graph input:", len(mv.segments(data, format_flamegraph=lines).splitlines()), "stacks")
print("segments", len(data["segments"]), "entries", [len(t) for t in data["device_traces"]])
PY
        echo "rc=$?"
    } >> "$OUTDIR/memory_viz.txt" 2>&1
    if [ $first = 1 ]; then
        for f in report.html end.svg peak.svg growth.svg; do
            cp "$d/$f" "$OUTDIR/files/$name-$f" 2>/dev/null
        done
        first=0
    fi
done
cat "$OUTDIR/exports.txt"
echo
cat "$OUTDIR/memory_viz.txt"
