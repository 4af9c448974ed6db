#!/usr/bin/env bash
# Runs several GPU validation steps in one `device` call and packs what they wrote into one file
# ($OUT/batch.tar.gz: a device call brings back at most 8 files). Each step runs with its own OUT
# folder and log; the tail of each log is printed.
#
#   run(command="VRAMTRACE_BUILD=target/gpu validation/gpu/batch.sh torch_hooks harm profile",
#       carry=["target/gpu"])
#
# Steps: acceptance (acceptance/run.sh validate; ACC_PROGRAMS: which programs, default all), torch_hooks (check_torch_hooks.py), harm
# (harm/run.sh), harm_exit (harm/run.sh exit: the exit delay only), profile (profile_hooks.sh),
# bench (bench_step_time.py --rounds ${ROUNDS:-3} $BENCH_ARGS), exports (exports.sh), multi
# (multi/run.sh), live (live/run.sh: alerts and the CI gate), scenarios (run.sh: the capture
# scenarios), wheel (wheel/run.sh: the pip wheel; carry target/wheels too, built by
# python/build_wheel.sh), parquet (parquet.sh: traces as data, one run and a multi-rank job), segments
# (segments.sh: report memory on the fixtures, a bounded trace).

set -u
GPU=$(cd "$(dirname "$0")" && pwd)
FINAL=${OUT:-/tmp/vramtrace-batch-out}
WORK=$(mktemp -d /tmp/vt-batch.XXXXXX)
mkdir -p "$FINAL"
# BATCH_BUDGET_S: steps not yet begun when this many seconds have passed are skipped, so that a
# call ending at its time limit still brings back what the earlier steps wrote (packed after each).
start=$(date +%s)
for step in "$@"; do
    if [ -n "${BATCH_BUDGET_S:-}" ] && [ $(( $(date +%s) - start )) -ge "$BATCH_BUDGET_S" ]; then
        echo "== $step: skipped (BATCH_BUDGET_S=$BATCH_BUDGET_S passed)"
        continue
    fi
    export OUT=$WORK/$step
    mkdir -p "$OUT"
    t0=$(date +%s)
    case $step in
        acceptance) "$GPU/acceptance/run.sh" validate ${ACC_PROGRAMS:-} ;;
        torch_hooks) python3 "$GPU/check_torch_hooks.py" ;;
        harm) "$GPU/harm/run.sh" ;;
        harm_exit) "$GPU/harm/run.sh" exit ;;
        profile) "$GPU/profile_hooks.sh" ;;
        bench) python3 "$GPU/bench_step_time.py" --rounds "${ROUNDS:-3}" ${BENCH_ARGS:-} ;;
        exports) "$GPU/exports.sh" ;;
        multi) "$GPU/multi/run.sh" ;;
        live) "$GPU/live/run.sh" ;;
        scenarios) "$GPU/run.sh" ;;
        wheel) "$GPU/wheel/run.sh" ;;
        segments) "$GPU/segments.sh" ;;
        parquet) "$GPU/parquet.sh" ;;
        *) echo "unknown step $step" ;;
    esac > "$WORK/$step.log" 2>&1
    echo "== $step: rc $?, $(( $(date +%s) - t0 )) s"
    tail -n "${TAIL:-25}" "$WORK/$step.log"
    tar czf "$FINAL/batch.tar.gz" -C "$WORK" .
done
ls -la "$FINAL"
