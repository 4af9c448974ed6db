"""`python -m vramtrace ARGS...`: the `vramtrace` command, for when the environment's `bin/`
is not on PATH. The command replaces this interpreter (its exit code is the command's)."""

import os
import sys

from . import executable


def main():
    try:
        program = executable()
    except FileNotFoundError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    os.execv(program, ["vramtrace"] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
