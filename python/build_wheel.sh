#!/usr/bin/env bash
# Builds the `vramtrace` wheel (docs/python.md) into target/wheels/ (under CARGO_TARGET_DIR when
# set, where cargo builds) and prints its path as the
# last line: the `vramtrace` command built by maturin (python/pyproject.toml, bindings = "bin"),
# libvramtrace.so built here and handed to maturin as wheel data, and the Python module
# python/vramtrace/.
#
# The platform tag is maturin's: the lowest manylinux tag the command's glibc symbol versions
# allow. auditwheel then checks the finished wheel, library included (maturin audits only what
# it built), and the build fails unless both files fit that tag.
#
# maturin and auditwheel are installed from PyPI into target/wheel-tools/ (a virtual environment
# made once), at the versions below.
set -euo pipefail
cd "$(dirname "$0")/.."

MATURIN_VERSION=1.16.0
AUDITWHEEL_VERSION=6.8.2

target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
tools=$target/wheel-tools
have_maturin=$("$tools/bin/maturin" --version 2>/dev/null || true)
have_auditwheel=$("$tools/bin/auditwheel" --version 2>/dev/null || true)
if [[ $have_maturin != "maturin $MATURIN_VERSION" ]] ||
    [[ $have_auditwheel != "auditwheel $AUDITWHEEL_VERSION "* ]]; then
    rm -rf "$tools"
    python3 -m venv "$tools"
    "$tools/bin/pip" install --quiet --disable-pip-version-check >&2 \
        "maturin==$MATURIN_VERSION" "auditwheel==$AUDITWHEEL_VERSION"
fi

# The library goes in as wheel data: pip installs data/lib/X as <prefix>/lib/X, which is
# `../lib/` from the command in <prefix>/bin, where `vramtrace run` looks.
cargo build --release --locked -p vramtrace-preload
# Where python/pyproject.toml takes it from, whatever the target directory.
data=target/wheel-data
rm -rf "$data"
install -D -m 0755 "$target/release/libvramtrace.so" "$data/data/lib/libvramtrace.so"

out=$target/wheels
rm -f "$out"/vramtrace-*.whl
# maturin reports on stdout; this script's stdout is the wheel's path alone.
(cd python && "$tools/bin/maturin" build --release --locked --out "$out") >&2
wheels=("$out"/vramtrace-*.whl)
if [ ${#wheels[@]} -ne 1 ] || [ ! -f "${wheels[0]}" ]; then
    echo "error: expected one wheel in $out, found: ${wheels[*]}" >&2
    exit 1
fi
wheel=${wheels[0]}

# The tag in the wheel's name (name-version-python-abi-platform.whl) against auditwheel's
# verdict on every ELF file in it.
tag=$(basename "$wheel" .whl)
tag=${tag##*-}
verdict=$("$tools/bin/auditwheel" show "$wheel")
if ! grep -q "consistent with[[:space:]]*the following platform tag: \"$tag\"" <<<"$(tr '\n' ' ' <<<"$verdict")"; then
    echo "error: the wheel is tagged $tag, but auditwheel says:" >&2
    echo "$verdict" >&2
    exit 1
fi
echo "build_wheel: $tag (built on $(ldd --version | head -1))" >&2
echo "$wheel"
