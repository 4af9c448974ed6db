#!/usr/bin/env bash
# Runs several GPU validation steps in one `device` call and packs what they wrote into one file
# ($OUT/batch.tar.gz: a device call brings back at most 8 files). Each step runs with its own OUT
# folder and log; the tail of each log is printed.
#
#   run(command="VRAMTRACE_BUILD=target/gpu validation/gpu/batch.sh torch_hooks harm profile",
#       carry=["target/gpu"])
#
# Steps: acceptance (acceptance/run.sh validate), torch_hooks (check_torch_hooks.py), harm
# (harm/run.sh), profile (profile_hooks.sh), bench (bench_step_time.py --rounds ${ROUNDS:-3}),
# exports (exports.sh), multi (multi/run.sh), scenarios (run.sh: the capture scenarios).
set -u
GPU=$(cd "$(dirname "$0")" && pwd)
FINAL=${OUT:-/tmp/vramtrace-batch-out}
WORK=$(mktemp -d /tmp/vt-batch.XXXXXX)
mkdir -p "$FINAL"
for step in "$@"; do
    export OUT=$WORK/$step
    mkdir -p "$OUT"
    t0=$(date +%s)
    case $step in
        acceptance) "$GPU/acceptance/run.sh" validate ;;
        torch_hooks) python3 "$GPU/check_torch_hooks.py" ;;
        harm) "$GPU/harm/run.sh" ;;
        profile) "$GPU/profile_hooks.sh" ;;
        bench) python3 "$GPU/bench_step_time.py" --rounds "${ROUNDS:-3}" ;;
        exports) "$GPU/exports.sh" ;;
        multi) "$GPU/multi/run.sh" ;;
        scenarios) "$GPU/run.sh" ;;
        *) echo "unknown step $step" ;;
    esac > "$WORK/$step.log" 2>&1
    echo "== $step: rc $?, $(( $(date +%s) - t0 )) s"
    tail -n "${TAIL:-25}" "$WORK/$step.log"
done
tar czf "$FINAL/batch.tar.gz" -C "$WORK" .
ls -la "$FINAL"
