#!/usr/bin/env python3
"""The collector's public surface against its users: every item of its API (what rustdoc
documents: the items another crate can name, and the inherent methods of its types) that no
other crate of the repository names. A `pub` item in a private module is not counted: no other
crate can name it (the compiler keeps it reachable where a public field or signature uses it).

    cargo doc -p vramtrace-collector --no-deps && python3 validation/api-surface.py

Prints the counts, then each item no other crate names. A name search: an item is counted as
named when its name appears as a word in the other crates' Rust sources (tools, preload, tests,
the collector's own tests and benches), so a common name can hide an unused item; never the
other way round.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "target", "doc", "vramtrace_collector")
USERS = ["tools", "preload", "tests", "collector/tests", "collector/benches"]
PAGE = re.compile(r"(struct|enum|fn|trait|type|constant|static|macro|union)\.(\w+)\.html$")
METHOD = re.compile(r'id="method\.(\w+)"')
# Where a type's page leaves its inherent methods for the traits it implements.
TRAITS = ('id="trait-implementations"', 'id="synthetic-implementations"',
          'id="blanket-implementations"')


def api():
    """(kind, name, page) of every documented item and inherent method."""
    if not os.path.isdir(DOC):
        sys.exit(f"api-surface: {DOC} is missing: run `cargo doc -p vramtrace-collector --no-deps`")
    for folder, _, files in os.walk(DOC):
        for f in files:
            m = PAGE.match(f)
            if not m:
                continue
            page = os.path.relpath(os.path.join(folder, f), DOC)
            yield m.group(1), m.group(2), page
            if m.group(1) in ("struct", "enum", "trait", "union"):
                html = open(os.path.join(folder, f), encoding="utf-8").read()
                cut = [i for i in (html.find(t) for t in TRAITS) if i > 0]
                for name in sorted(set(METHOD.findall(html[: min(cut)] if cut else html))):
                    yield "method", name, page


def words():
    """Every word of the other crates' Rust sources."""
    seen = set()
    for user in USERS:
        for folder, dirs, files in os.walk(os.path.join(ROOT, user)):
            dirs[:] = [d for d in dirs if d != "target"]
            for f in files:
                if f.endswith(".rs"):
                    text = open(os.path.join(folder, f), encoding="utf-8").read()
                    seen.update(re.findall(r"\w+", text))
    return seen


def main():
    items = list(api())
    named = words()
    unnamed = [i for i in items if i[1] not in named]
    methods = sum(1 for i in items if i[0] == "method")
    print(f"{len(items) - methods} items and {methods} inherent methods in the collector's API; "
          f"{len(unnamed)} named by no other crate")
    for kind, name, page in unnamed:
        print(f"  {kind} {name}  ({page})")


if __name__ == "__main__":
    main()
