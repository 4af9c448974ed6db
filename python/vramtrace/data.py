"""Traces as tables: `vramtrace.load()` reads a trace, or a directory of them (one per rank or
process), into pyarrow tables with the names and columns of the Parquet dataset that
`vramtrace export --format parquet` writes (docs/data.md):

    import vramtrace

    data = vramtrace.load("traces/")          # or one trace: "train-4242.vtrace"
    live = data.allocations.filter(pc.is_null(data.allocations["free_seq"]))
    frames = data.to_pandas()                 # {"allocations": DataFrame, ...}

The trace is read by the `vramtrace` command this package installed (the Rust reader, no text
parsing): it exports the dataset into a temporary directory, which pyarrow reads whole and which
is then removed. pyarrow is needed for this (`pip install pyarrow`); nothing else in the package
needs it.
"""

import json
import os
import subprocess
import tempfile
import warnings

#: The tables of the dataset, in the order docs/data.md describes them.
TABLES = (
    "allocations",
    "sites",
    "steps",
    "samples",
    "communicators",
    "failures",
    "tensors",
    "findings",
    "traces",
)


class Error(Exception):
    """The trace could not be read or exported; the message is the `vramtrace` command's."""


class TablesIncomplete(UserWarning):
    """A trace's tables do not hold its whole run: the trace is cut short or damaged, the tracer
    lost events, or rotation removed its first segments (`VRAMTRACE_MAX_BYTES`). The message is
    the `vramtrace` command's, naming the trace."""


class Tables:
    """The tables of one load: each a `pyarrow.Table`, as an attribute (`data.allocations`) or
    an item (`data["allocations"]`). Every table has the columns of its Parquet files, then the
    partition columns `run` (string) and `rank` (int32, null for a trace without a rank)."""

    def __init__(self, tables):
        self._tables = dict(tables)

    @property
    def names(self):
        """The table names, in the order docs/data.md describes them."""
        return list(self._tables)

    def __getitem__(self, name):
        return self._tables[name]

    def __getattr__(self, name):
        try:
            return self.__dict__["_tables"][name]
        except KeyError:
            raise AttributeError("no table %r (tables: %s)" % (name, ", ".join(TABLES))) from None

    def __iter__(self):
        return iter(self._tables)

    def __len__(self):
        return len(self._tables)

    def to_pandas(self, **kwargs):
        """Every table as a pandas DataFrame, by name (needs pandas). Integer columns stay
        integers where they hold nulls (`free_seq`, `rank`: pandas' `Int64` and `Int32`, with
        `<NA>`), where pyarrow's own `to_pandas()` makes them floats, which cannot hold every
        64-bit address or sequence number; lists and structs (a site's `frames`) stay in Arrow
        (`pandas.ArrowDtype`), the integers in them exact. Keyword arguments go to pyarrow's
        `Table.to_pandas` (`types_mapper=pandas.ArrowDtype`, for one)."""
        if "types_mapper" not in kwargs:
            kwargs["types_mapper"] = _nullable_integers()
        return {name: table.to_pandas(**kwargs) for name, table in self._tables.items()}

    def __repr__(self):
        rows = ", ".join("%s: %d rows" % (n, t.num_rows) for n, t in self._tables.items())
        return "vramtrace.Tables(%s)" % rows


def _nullable_integers():
    """pyarrow's integer types to pandas' nullable ones, and nested types to pandas'
    `ArrowDtype`, for `to_pandas`'s `types_mapper`."""
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("Tables.to_pandas() needs pandas: pip install pandas") from None
    import pyarrow as pa

    integers = {
        pa.int8(): pd.Int8Dtype(),
        pa.int16(): pd.Int16Dtype(),
        pa.int32(): pd.Int32Dtype(),
        pa.int64(): pd.Int64Dtype(),
        pa.uint8(): pd.UInt8Dtype(),
        pa.uint16(): pd.UInt16Dtype(),
        pa.uint32(): pd.UInt32Dtype(),
        pa.uint64(): pd.UInt64Dtype(),
    }

    def mapped(t):
        # A list or struct (a site's frames) stays in Arrow, where pandas would make the
        # integers inside it floats.
        if pa.types.is_nested(t):
            return pd.ArrowDtype(t)
        return integers.get(t)

    return mapped


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.dataset
    except ImportError:
        raise ImportError("vramtrace.load() needs pyarrow: pip install pyarrow") from None
    return pyarrow, pyarrow.dataset


def _message(stderr):
    """The command's error line, without its `error: ` prefix."""
    lines = [l.strip() for l in stderr.decode("utf-8", "replace").splitlines() if l.strip()]
    errors = [l for l in lines if l.startswith("error: ")]
    line = (errors or lines or ["vramtrace export failed"])[-1]
    return line[len("error: "):] if line.startswith("error: ") else line


def load(path, run=None):
    """Reads the trace at `path` (a `.vtrace` file, or a directory of them) into `Tables`;
    `run` names the run (the `run` column; default: the name of the trace
    or directory). Raises `vramtrace.Error` with the command's one-line message when the trace
    cannot be read, FileNotFoundError when the command is not installed, ImportError without
    pyarrow. Warns (`vramtrace.TablesIncomplete`) for each trace whose tables miss part of its
    run."""
    pa, ds = _pyarrow()
    from . import executable

    command = [executable(), "export", "--format", "parquet", "--json"]
    if run is not None:
        command += ["--run", str(run)]
    with tempfile.TemporaryDirectory(prefix="vramtrace-load-") as scratch:
        out = os.path.join(scratch, "data")
        done = subprocess.run(
            # `--`: a trace whose name begins with '-' is a trace, not an option.
            command + ["-o", out, "--", os.fspath(path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        if done.returncode != 0:
            message = _message(done.stderr)
            # The command names its option; here it is load()'s argument.
            if message.startswith("--run"):
                message = "run" + message[len("--run"):]
            raise Error(message)
        # What the command warned of, by kind: a trace whose tables miss part of its run, or
        # what the input leaves out (traces in subdirectories), which is no trace's.
        written = json.loads(done.stdout)
        for trace in written["traces"]:
            for warning in trace["warnings"]:
                warnings.warn(warning, TablesIncomplete, stacklevel=2)
        for warning in written["warnings"]:
            warnings.warn(warning, UserWarning, stacklevel=2)
        partitioning = ds.partitioning(
            pa.schema([("run", pa.string()), ("rank", pa.int32())]), flavor="hive"
        )
        tables = {
            name: ds.dataset(
                os.path.join(out, name), format="parquet", partitioning=partitioning
            ).to_table()
            for name in TABLES
        }
    return Tables(tables)
