#!/bin/bash
# Runs the replay benchmark (collector/benches/replay.rs) on the device host's CPU, in one call.
#
# The GPU plays no part: this measures replay throughput on the kind of server core a report is
# run on, next to the 2-vCPU development VM of docs/performance.md. Build here, carry the binary:
#
#   cargo bench -p vramtrace-collector --bench replay --no-run
#   mkdir -p target/gpu && cp "$(ls -t target/release/deps/replay-* | grep -v '\.d$' | head -1)" \
#       target/gpu/replay-bench && strip target/gpu/replay-bench
#   device run, carry ["target/gpu"]: validation/gpu/bench-replay.sh
#
# Writes under $OUT (or /tmp/bench-out): the CPU description and one log per run. Every phase
# runs pinned: `taskset -c 2` (everything on one core, the read-ahead thread included) and
# `taskset -c 2,3` (the read-ahead thread on a second core), three rounds each, on a trace of
# 100 million events generated once into /tmp.
#
# With BASE=<an older build of the same benchmark>, it then compares the two on the one-thread
# replay: both at once, each on a core of its own (cores 2 and 4, swapped every round), so that
# whatever else the host does slows both alike; `ab.txt` has each round's two results, and
# `rounds/ab-N-*.txt` its two logs (in a folder of their own, so that the device tool, which
# returns only the first few files, returns the summaries first). Both
# replay the same trace unless BASE_TMPDIR names a directory of its own for BASE's: then BASE
# first writes its trace there, with its own writer, so a change to how traces are written is
# measured too.
set -u
BIN=${1:-target/gpu/replay-bench}
OUT=${OUT:-/tmp/bench-out}
ROUNDS=${ROUNDS:-3}
mkdir -p "$OUT"
if [ ! -x "$BIN" ]; then
    echo "bench-replay: no benchmark binary at $BIN (build and carry it, see the top of this script)" >&2
    exit 2
fi
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    grep -m1 'model name' /proc/cpuinfo
    nproc
    lscpu 2>/dev/null | grep -E 'Model name|MHz|L2|L3|Thread|Core|Socket'
    uptime
} >"$OUT/cpu.txt" 2>&1
cat "$OUT/cpu.txt"
export TMPDIR=/tmp
# Generates the trace (and runs every phase once, as a first round on one core).
taskset -c 2 "$BIN" --bench 2>&1 | tee "$OUT/one-core-1.txt"
for i in $(seq 2 "$ROUNDS"); do
    VRAMTRACE_BENCH_REUSE=1 taskset -c 2 "$BIN" --bench 2>&1 | tee "$OUT/one-core-$i.txt"
done
for i in $(seq 1 "$ROUNDS"); do
    VRAMTRACE_BENCH_REUSE=1 taskset -c 2,3 "$BIN" --bench 2>&1 | tee "$OUT/two-cores-$i.txt"
done
if [ -n "${BASE:-}" ] && [ -x "$BASE" ]; then
    BASE_DIR=${BASE_TMPDIR:-$TMPDIR}
    if [ "$BASE_DIR" != "$TMPDIR" ]; then
        mkdir -p "$BASE_DIR"
        TMPDIR=$BASE_DIR VRAMTRACE_BENCH_PHASES=none taskset -c 4 "$BASE" --bench 2>&1 | tee "$OUT/base-trace.txt"
    fi
    mkdir -p "$OUT/rounds"
    for i in $(seq 1 "${AB_ROUNDS:-6}"); do
        if [ $((i % 2)) = 1 ]; then cn=2; cb=4; else cn=4; cb=2; fi
        VRAMTRACE_BENCH_REUSE=1 VRAMTRACE_BENCH_PHASES=one-thread taskset -c $cn "$BIN" --bench >"$OUT/rounds/ab-$i-new.txt" 2>&1 &
        TMPDIR=$BASE_DIR VRAMTRACE_BENCH_REUSE=1 VRAMTRACE_BENCH_PHASES=one-thread taskset -c $cb "$BASE" --bench >"$OUT/rounds/ab-$i-base.txt" 2>&1 &
        wait
        echo "round $i: new on core $cn: $(grep '^full replay' "$OUT/rounds/ab-$i-new.txt")"
        echo "round $i: base on core $cb: $(grep '^full replay' "$OUT/rounds/ab-$i-base.txt")"
    done | tee "$OUT/ab.txt"
fi
uptime | tee -a "$OUT/cpu.txt"
