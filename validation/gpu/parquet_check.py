"""Names the planted line from the Parquet dataset of real PyTorch runs (docs/data.md), with
pyarrow (on the GPU image) and, when it can be imported, DuckDB (not on the image: carry a wheel,
see parquet.sh), and says PASS or FAIL for each question.

    python3 parquet_check.py single DATASET LINE TABLE       # one process: the line holding most
    python3 parquet_check.py fleet DATASET LINE TABLE RANK   # ranks: the rank and line that differ

LINE is `file.py:N`, the planted line; RANK the rank that leaks. TABLE is where tensors are seen
one by one: `allocations` (driver-level objects: under `vramtrace run --per-tensor` every tensor
is one) or `tensors` (PyTorch's recorder, under the caching allocator, whose driver-level
objects are segments).
"""
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

PARTS = ds.partitioning(pa.schema([("run", pa.string()), ("rank", pa.int32())]), flavor="hive")
failed = False


def table(root, name):
    return ds.dataset(f"{root}/{name}", format="parquet", partitioning=PARTS).to_table()


def verdict(ok, what):
    global failed
    failed |= not ok
    print(("PASS " if ok else "FAIL ") + what)


def live_by(root, name, keys):
    """Bytes live at the end per `keys`: allocations with `free_seq` null (device memory), or
    tensors with `freed_ns` null."""
    t = table(root, name)
    if name == "allocations":
        t = t.filter(pc.and_(pc.is_null(t["free_seq"]), pc.equal(t["accounting"], "device")))
    else:
        t = t.filter(pc.is_null(t["freed_ns"]))
    if t.num_rows == 0:
        return []
    g = t.group_by(keys).aggregate([("bytes", "sum")]).to_pylist()
    return sorted(g, key=lambda r: -r["bytes_sum"])


def single(root, line, name):
    for name in (name,):
        rows = [r for r in live_by(root, name, ["label"]) if r["label"]]
        if not rows:
            print(f"---- {name}: nothing live")
            continue
        print(f"---- {name}: live at the end by line (pyarrow)")
        for r in rows[:5]:
            print(f"  {r['bytes_sum']:>14,}  {r['label']}")
        verdict(rows[0]["label"].split(" in ")[0].endswith(line), f"{name}: top line is {line}")


def fleet(root, line, rank, name):
    for name in (name,):
        rows = live_by(root, name, ["rank", "label"])
        if not rows:
            print(f"---- {name}: nothing live")
            continue
        ranks = sorted({r["rank"] for r in table(root, "traces").to_pylist()}, key=str)
        labels = {r["label"] for r in rows}
        held = {(r["rank"], r["label"]): r["bytes_sum"] for r in rows}
        excess = []
        for label in labels:
            values = sorted(held.get((k, label), 0) for k in ranks)
            median = (values[(len(values) - 1) // 2] + values[len(values) // 2]) / 2
            excess += [(held.get((k, label), 0) - median, k, label) for k in ranks]
        excess.sort(key=lambda e: (-e[0], str(e[1])))
        print(f"---- {name}: bytes live at the end above the median rank, by rank and line (pyarrow)")
        for e, k, label in excess[:5]:
            print(f"  {e:>16,.0f}  rank {k}  {label}")
        e, k, label = excess[0]
        ok = k == rank and (label or "").split(" in ")[0].endswith(line)
        verdict(ok, f"{name}: rank {rank} at {line} first")


def duckdb_queries(root, line, rank, name):
    try:
        import duckdb
    except ImportError:
        print("---- duckdb: not importable here (carry a wheel: see parquet.sh); pyarrow answered")
        return
    con = duckdb.connect()
    for t in ("allocations", "tensors", "traces"):
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{root}/{t}/**/*.parquet', "
                "hive_partitioning = true, hive_types = {'run': VARCHAR, 'rank': INTEGER})")
    live = {
        "allocations": "free_seq IS NULL AND accounting = 'device'",
        "tensors": "freed_ns IS NULL",
    }[name]
    q = f"""
    WITH live AS (
        SELECT rank, label, sum(bytes) AS bytes FROM {name} WHERE {live} GROUP BY rank, label),
    grid AS (
        SELECT r.rank, l.label, coalesce(live.bytes, 0) AS bytes
        FROM (SELECT DISTINCT rank FROM traces) r
        CROSS JOIN (SELECT DISTINCT label FROM live) l
        LEFT JOIN live ON live.rank IS NOT DISTINCT FROM r.rank AND live.label = l.label),
    typical AS (SELECT label, median(bytes) AS median FROM grid GROUP BY label)
    SELECT rank, label, bytes, bytes - median AS excess FROM grid JOIN typical USING (label)
    ORDER BY excess DESC, rank LIMIT 5"""
    if rank is not None:
        rows = con.execute(q).fetchall()
        print(f"---- duckdb {duckdb.__version__}: the fleet query of docs/data.md")
        for r in rows:
            print(f"  rank {r[0]}  {r[1]}  {r[2]:,} live, {r[3]:,.0f} above the median")
        ok = rows and rows[0][0] == rank and (rows[0][1] or "").split(" in ")[0].endswith(line)
        verdict(bool(ok), f"duckdb: rank {rank} at {line} first")
    else:
        top = con.execute(f"""SELECT label, sum(bytes) AS b FROM {name} WHERE {live}
            AND label IS NOT NULL GROUP BY label ORDER BY b DESC LIMIT 1""").fetchall()
        print(f"---- duckdb {duckdb.__version__}: the line holding most at the end: {top}")
        ok = bool(top) and top[0][0].split(" in ")[0].endswith(line)
        verdict(ok, f"duckdb: top line is {line}")


def findings(root, line, rank):
    """docs/data.md's growth question, over `findings` (the report's diagnosis): the planted
    line (on the planted rank) is the fastest steady growth."""
    rows = [r for r in table(root, "findings").to_pylist()
            if r["class"] == "steady-growth" and r["axis"] == "steps"]
    rows.sort(key=lambda r: (-r["rate"], str(r["rank"])))
    print("---- findings: steady growth, fastest first (the report's diagnosis)")
    for r in rows[:5]:
        print(f"  rank {r['rank']}  {r['label']}  {r['rate']:,.0f} B/step from step "
              f"{r['growth_from']}  ({r['severity']}, {r['view']})")
    ok = bool(rows) and (rows[0]["label"] or "").split(" in ")[0].endswith(line)
    ok = ok and (rank is None or rows[0]["rank"] == rank)
    verdict(ok, f"findings: {line} first" + ("" if rank is None else f" on rank {rank}"))


def main():
    mode, root, line, name = sys.argv[1:5]
    rank = int(sys.argv[5]) if mode == "fleet" else None
    if mode == "single":
        single(root, line, name)
    else:
        fleet(root, line, rank, name)
    findings(root, line, rank)
    duckdb_queries(root, line, rank, name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
