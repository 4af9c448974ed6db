#!/usr/bin/env bash
# Reruns every reliability trial of docs/reliability.md on a release build and prints its table:
# damaged traces, kills, fork and thread storms, a full disk, read-only places, descriptor
# limits, bad settings, files in the trace's way, the exit delay. Takes a few minutes on two
# cores. The disk-full and read-only file system trials mount a small tmpfs and need root;
# without it they say "skipped".
#
#   validation/reliability.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace
exec cargo test --release -p vramtrace-tests --test reliability -- \
    --ignored --nocapture --test-threads=1
