#!/bin/bash
# Compares what two builds of `vramtrace` say of every trace under the given directories: for a
# change that should leave every answer as it was (a refactor), or to list the answers a change
# moved. Per trace: `report --json`, `replay --at end --json`, `check`, `export --format
# parquet` (the files, byte for byte), and `diff --json` against the next trace in name order;
# each with its exit status.
#
#   validation/compare-reports.sh OLD_VRAMTRACE NEW_VRAMTRACE DIR...
#
# Prints one line per trace and output (`same`, or `DIFFERENT` and the first lines of the
# difference) and the count that differ; exits 1 when any does.
set -u
if [ $# -lt 3 ] || [ ! -x "$1" ] || [ ! -x "$2" ]; then
    echo "usage: $0 OLD_VRAMTRACE NEW_VRAMTRACE DIR..." >&2
    exit 2
fi
old=$1 new=$2
shift 2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Runs one build: `say BUILD NAME ARGS...` leaves NAME.BUILD with its stdout and exit status.
say() {
    local build=$1 name=$2
    shift 2
    local bin=$old
    [ "$build" = new ] && bin=$new
    "$bin" "$@" >"$out/$name.$build" 2>/dev/null
    echo "exit $?" >>"$out/$name.$build"
}
differ=0
compare() { # NAME TRACE
    if diff "$out/$1.old" "$out/$1.new" >"$out/diff"; then
        echo "same       $1 $2"
    else
        echo "DIFFERENT  $1 $2"
        head -20 "$out/diff"
        differ=$((differ + 1))
    fi
}
mapfile -t traces < <(find "$@" -name '*.vtrace' | sort)
for i in "${!traces[@]}"; do
    trace=${traces[$i]}
    next=${traces[$(((i + 1) % ${#traces[@]}))]}
    for build in old new; do
        say $build report report --json "$trace"
        say $build replay replay --at end --json "$trace"
        say $build check check "$trace"
        say $build diff diff --json "$trace" "$next"
        rm -rf "$out/parquet.$build.d"
        say $build export export --format parquet -o "$out/parquet.$build.d" "$trace"
        (cd "$out/parquet.$build.d" 2>/dev/null && find . -type f | sort | xargs -r md5sum) \
            >>"$out/export.$build"
    done
    for name in report replay check diff export; do
        compare $name "$trace"
    done
done
echo "$differ outputs differ"
[ "$differ" = 0 ]
