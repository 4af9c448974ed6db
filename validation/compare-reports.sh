#!/bin/bash
# Compares `vramtrace report --json` of two builds on every trace under a directory: the same
# document, apart from the fields the newer build adds (reading.passes, reading.unread).
#
#   validation/compare-reports.sh OLD_VRAMTRACE NEW_VRAMTRACE DIR...
#
# Prints one line per trace (`same`, or `DIFFERENT` and the first lines of the difference) and
# the count of traces that differ; exits 1 when any does.
set -u
if [ $# -lt 3 ] || [ ! -x "$1" ] || [ ! -x "$2" ]; then
    echo "usage: $0 OLD_VRAMTRACE NEW_VRAMTRACE DIR..." >&2
    exit 2
fi
old=$1 new=$2
shift 2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
normal() { # json file -> normalized json on stdout
    python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
r = d.get("reading", {})
r.pop("passes", None)
r.pop("unread", None)
print(json.dumps(d, indent=1, sort_keys=True))' "$1"
}
differ=0
while IFS= read -r trace; do
    "$old" report --json "$trace" >"$out/old.json" 2>"$out/old.err"
    "$new" report --json "$trace" >"$out/new.json" 2>"$out/new.err"
    if diff <(normal "$out/old.json") <(normal "$out/new.json") >"$out/diff"; then
        echo "same       $trace"
    else
        echo "DIFFERENT  $trace"
        head -20 "$out/diff"
        differ=$((differ + 1))
    fi
done < <(find "$@" -name '*.vtrace' | sort)
echo "$differ traces differ"
[ "$differ" = 0 ]
