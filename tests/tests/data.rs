//! Traces as data, read by the readers users have (docs/data.md): the Parquet dataset of the
//! demo's trace read by pyarrow has the report's numbers in every table; DuckDB over eight
//! stand-in ranks, one with a planted extra leak, names that rank and that leak's line first,
//! and the peak its rows add up to is the report's; `vramtrace.load` returns the rows of the
//! Parquet; bad input gets one-line errors from Python too, and a trace that holds part of its
//! run (rotated, cut short) loads with a warning that says so.
//!
//! Spark reads the same dataset with the same columns and types and its SQL names the same rank
//! and line.
//!
//! Ignored by default: needs a Python with pyarrow, duckdb and pyspark, named by
//! `VRAMTRACE_DATA_PYTHON`, and a Java for Spark. CI (`.ci/run`) makes one (a virtual
//! environment with the three from PyPI; a JRE from Debian) and runs
//! `VRAMTRACE_DATA_PYTHON=… cargo test -p vramtrace-tests --test data -- --ignored`.

use std::path::{Path, PathBuf};

use serde_json::Value;
use vramtrace_tests::source::{line_of, workload_source};
use vramtrace_tests::traced::{
    clean_command, profile_dir, succeed, text, trace_files, vramtrace_command,
};
use vramtrace_tests::{standin_ld_library_path, workload};

const MIB: u64 = 1 << 20;

/// The Python with pyarrow, duckdb and pyspark, from `VRAMTRACE_DATA_PYTHON`.
fn python() -> PathBuf {
    let path = std::env::var_os("VRAMTRACE_DATA_PYTHON")
        .map(PathBuf::from)
        .expect(
            "VRAMTRACE_DATA_PYTHON names a python with pyarrow, duckdb and pyspark (.ci/run makes \
             one: python3 -m venv target/data-env && target/data-env/bin/pip install pyarrow \
             duckdb pyspark)",
        );
    assert!(path.is_file(), "{}: no such file", path.display());
    path
}

/// Runs `script` with the data Python, `args` after it; the `vramtrace` module is this
/// repository's (`python/`) and the `vramtrace` command this build's. Returns what it printed,
/// as JSON.
fn py(script: &str, args: &[&Path]) -> Value {
    let modules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../python");
    let mut path = std::ffi::OsString::from(profile_dir());
    if let Some(old) = std::env::var_os("PATH") {
        path.push(":");
        path.push(old);
    }
    let out = succeed(
        clean_command(python())
            .arg("-c")
            .arg(script)
            .args(args)
            .env("PYTHONPATH", modules)
            .env("PATH", path)
            .env_remove("PYTHONHOME"),
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("the script printed no JSON ({e}): {}", text(&out.stdout)))
}

/// Reading a table of a dataset, with its partitions typed as docs/data.md says.
const READ: &str = r#"
import json, sys
import pyarrow as pa
import pyarrow.dataset as ds
PARTS = ds.partitioning(pa.schema([("run", pa.string()), ("rank", pa.int32())]), flavor="hive")
def table(root, name):
    return ds.dataset(f"{root}/{name}", format="parquet", partitioning=PARTS).to_table()
"#;

/// The demo's training loop (`wl_train` on a 512 MiB stand-in device, as `vramtrace-demo` runs
/// it) traced into `dir` under `vramtrace run`, with `RANK` set when given and `--extra-leak`
/// when asked; returns its trace.
fn train(dir: &Path, name: &str, rank: Option<u32>, extra_leak: bool) -> PathBuf {
    let out = dir.join(format!("{name}.vtrace"));
    let mut c = vramtrace_command();
    c.args(["run", "-o"])
        .arg(&out)
        .arg("--")
        .arg(workload("wl_train"))
        .env("LD_LIBRARY_PATH", standin_ld_library_path())
        .env("STANDIN_DEVICE_MEM", "512M");
    if extra_leak {
        c.arg("--extra-leak");
    }
    if let Some(r) = rank {
        c.env("RANK", r.to_string()).env("WORLD_SIZE", "8");
    }
    succeed(&mut c);
    assert!(out.is_file(), "{} was not written", out.display());
    out
}

fn export(trace: &Path, out: &Path) {
    succeed(
        vramtrace_command()
            .args(["export", "--format", "parquet", "-o"])
            .arg(out)
            .arg(trace),
    );
}

fn report(trace: &Path) -> Value {
    let out = succeed(vramtrace_command().args(["report", "--json"]).arg(trace));
    serde_json::from_slice(&out.stdout).expect("report --json prints JSON")
}

/// Row counts and sums of the demo's tables, as pyarrow reads them.
const COUNTS: &str = r#"
root = sys.argv[1]
import pyarrow.compute as pc
out = {}
for name in ["allocations", "sites", "steps", "samples", "communicators", "failures", "tensors",
             "findings", "traces"]:
    out[name] = table(root, name).num_rows
a = table(root, "allocations")
live = a.filter(pc.is_null(a["free_seq"]))
device = live.filter(pc.equal(live["accounting"], "device"))
out["live"] = live.num_rows
out["live_device_bytes"] = pc.sum(device["bytes"]).as_py()
out["by_api"] = {r["api"]: r["count"] for r in a.group_by("api").aggregate([("api", "count")]).rename_columns(["api", "count"]).to_pylist()}
history = device.filter(pc.and_(pc.equal(device["api"], "cudaMallocAsync"), pc.equal(device["bytes"], 1 << 20)))
out["history"] = [history.num_rows, sorted(set(history["module"].to_pylist())), sorted(history["alloc_step"].to_pylist())]
orphans = live.filter(pc.equal(live["category"], "registration"))
out["registration"] = [orphans["bytes"].to_pylist(), orphans["flags"].to_pylist()]
s = table(root, "sites")
named = set(a["site"].to_pylist()) | set(table(root, "failures")["site"].to_pylist()) | set(table(root, "communicators")["site"].to_pylist())
out["sites_named_missing"] = sorted(named - set(s["site"].to_pylist()))
out["site_ids"] = sorted(s["site"].to_pylist()) == list(range(s.num_rows))
out["rank"] = sorted(set(a["rank"].to_pylist()), key=str)
print(json.dumps(out))
"#;

// The demo's trace: every table's rows are the report's numbers, and the planted truth is in
// the rows (20 history tensors of 1 MiB still live, one per step, owned by the framework; the
// 4 MiB registration left after its buffer and communicator went).
#[test]
#[ignore = "needs pyarrow and duckdb: VRAMTRACE_DATA_PYTHON (.ci/run makes it)"]
fn the_demos_trace_in_pyarrow_has_the_reports_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let trace = train(dir.path(), "train", None, false);
    let data = dir.path().join("data");
    export(&trace, &data);
    let r = report(&trace);
    let got = py(&format!("{READ}{COUNTS}"), &[&data]);

    let live_objects: u64 = r["live"]["by_category"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["count"].as_u64().unwrap())
        .sum();
    assert_eq!(got["live"], live_objects);
    assert_eq!(
        got["live_device_bytes"],
        r["live"]["device_memory"]["bytes"]
    );
    assert_eq!(got["live_device_bytes"], 20 * MIB);
    assert_eq!(got["steps"], r["events"]["steps"]);
    assert_eq!(got["steps"], 20);
    let samples: u64 = r["device_accounting"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["samples"].as_u64().unwrap())
        .sum();
    assert_eq!(got["samples"], samples);
    assert!(samples > 0);
    assert_eq!(got["failures"], r["failures"]["total"]);
    assert_eq!(
        got["communicators"],
        r["communicators"].as_array().unwrap().len()
    );
    assert_eq!(got["communicators"], 1);
    assert_eq!(got["traces"], 1);
    assert_eq!(got["tensors"], 0);
    let diagnosis = r["analysis"]["diagnosis"].as_array().unwrap();
    assert_eq!(got["findings"], diagnosis.len());
    assert!(!diagnosis.is_empty());
    // Every object a successful call made is a row: per entry point, its calls less its
    // failures.
    let by_api = got["by_api"].as_object().unwrap();
    let calls = r["calls"].as_array().unwrap();
    for (api, rows) in by_api {
        let c = calls
            .iter()
            .find(|c| c["api"] == api.as_str())
            .unwrap_or_else(|| panic!("{api} has rows but no calls"));
        let made = c["calls"].as_u64().unwrap() - c["failed"].as_u64().unwrap();
        assert_eq!(rows.as_u64(), Some(made), "{api}");
    }
    let total: u64 = by_api.values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(got["allocations"], total);
    assert_eq!(
        got["history"],
        serde_json::json!([20, ["libtorch_standin.so"], (1..=20).collect::<Vec<u64>>()])
    );
    assert_eq!(
        got["registration"],
        serde_json::json!([[4 * MIB], [["communicator-gone", "buffer-gone"]]])
    );
    assert_eq!(got["sites_named_missing"], serde_json::json!([]));
    assert_eq!(got["site_ids"], true);
    assert_eq!(got["rank"], serde_json::json!([null]));
}

/// docs/data.md's fleet questions, as Python strings `LINE_SQL` (the line that differs most from
/// the other ranks) and `ODD_SQL` (the odd rank), asked of DuckDB and of Spark (with `<=>` for
/// `IS NOT DISTINCT FROM`), and `PEAK_SQL` (the peak of each rank, device and step; DuckDB's
/// `ASOF` join).
const FLEET_SQL: &str = r#"
LINE_SQL = """
WITH live AS (
    SELECT a.run, a.rank, s.identity, any_value(s.label) AS label, sum(a.bytes) AS bytes
    FROM allocations a JOIN sites s ON s.run = a.run AND s.rank IS NOT DISTINCT FROM a.rank
        AND s.pid = a.pid AND s.site = a.site
    WHERE a.free_seq IS NULL AND a.accounting = 'device' GROUP BY a.run, a.rank, s.identity),
grid AS (
    SELECT r.run, r.rank, i.identity, coalesce(live.bytes, 0) AS bytes
    FROM (SELECT DISTINCT run, rank FROM traces) r
    JOIN (SELECT DISTINCT run, identity FROM live) i ON i.run = r.run
    LEFT JOIN live ON live.run = r.run AND live.rank IS NOT DISTINCT FROM r.rank
        AND live.identity = i.identity),
typical AS (SELECT run, identity, median(bytes) AS median FROM grid GROUP BY run, identity)
SELECT rank, identity, bytes, bytes - median AS excess
FROM grid JOIN typical USING (run, identity)
ORDER BY excess DESC, run, rank LIMIT 2"""
GROW_SQL = """
SELECT rank, label, axis, rate, growth_from, live_at_end, freed_at_teardown, severity
FROM findings WHERE class = 'steady-growth'
ORDER BY axis, rate DESC, run, rank"""
ODD_SQL = """
WITH per_rank AS (
    SELECT run, rank,
        sum(bytes) FILTER (WHERE free_seq IS NULL AND accounting = 'device') AS live
    FROM allocations GROUP BY run, rank)
SELECT rank, live, live - median(live) OVER (PARTITION BY run) AS from_median
FROM per_rank ORDER BY abs(from_median) DESC, run, rank LIMIT 2"""
PEAK_SQL = """
WITH changes AS (
    SELECT run, rank, pid, device, alloc_seq AS seq, alloc_step AS step, bytes AS delta
    FROM allocations WHERE accounting = 'device'
    UNION ALL
    SELECT run, rank, pid, device, free_seq, free_step, -bytes
    FROM allocations WHERE accounting = 'device' AND free_seq IS NOT NULL),
running AS (
    SELECT run, rank, pid, device, seq, step, sum(delta) OVER (PARTITION BY run, rank, pid,
        device ORDER BY seq ROWS UNBOUNDED PRECEDING) AS live
    FROM changes),
begun AS (
    SELECT d.run, d.rank, d.pid, d.device, s.step, s.begin_seq
    FROM (SELECT DISTINCT run, rank, pid, device FROM running) d
    JOIN steps s ON s.run = d.run AND s.rank IS NOT DISTINCT FROM d.rank AND s.pid = d.pid),
carried AS (
    SELECT b.run, b.rank, b.pid, b.device, b.step, coalesce(r.live, 0) AS live
    FROM begun b ASOF LEFT JOIN running r
        ON r.run = b.run AND coalesce(r.rank, -1) = coalesce(b.rank, -1) AND r.pid = b.pid
        AND r.device = b.device AND r.seq <= b.begin_seq)
SELECT run, rank, pid, device, step, max(live) AS peak
FROM (SELECT run, rank, pid, device, step, live FROM running UNION ALL SELECT * FROM carried)
GROUP BY run, rank, pid, device, step ORDER BY run, rank, pid, device, step"""
"#;

/// docs/data.md's fleet queries, over the dataset at argv[1]: the line that differs most from
/// the other ranks, the odd rank, and the peak of each rank.
const FLEET: &str = r#"
import duckdb
root = sys.argv[1]
con = duckdb.connect()
for t in ["allocations", "sites", "steps", "traces", "findings"]:
    con.sql(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{root}/{t}/**/*.parquet', "
            "hive_partitioning = true, hive_types = {'run': VARCHAR, 'rank': INTEGER})")
line = con.sql(LINE_SQL).fetchall()
odd = con.sql(ODD_SQL).fetchall()
grow = con.sql(GROW_SQL).fetchall()
peaks = con.sql(PEAK_SQL).fetchall()
print(json.dumps({
    "line": [[r, i, int(b), float(e)] for r, i, b, e in line],
    "odd": [[r, int(l), float(m)] for r, l, m in odd],
    "grow": [list(g) for g in grow],
    "peaks": [[r, d, s, int(p)] for _, r, _, d, s, p in peaks],
}))
"#;

/// Eight ranks of the training loop traced into `dir/job`, rank 5 with `--extra-leak`, and
/// exported to `dir/data`; returns both directories.
fn eight_ranks(dir: &Path) -> (PathBuf, PathBuf) {
    let traces = dir.join("job");
    std::fs::create_dir(&traces).unwrap();
    for rank in 0..8 {
        train(&traces, &format!("rank{rank}"), Some(rank), rank == 5);
    }
    let data = dir.join("data");
    export(&traces, &data);
    (traces, data)
}

// Eight ranks of the training loop, rank 5 with `--extra-leak` (a 4 MiB tensor kept each step
// at its own line of wl_train.c): DuckDB names rank 5 and that line first, 80 MiB more than the
// median rank there; rank 5 is the odd rank by 80 MiB; every rank's peak, added up from its
// rows, is the report's.
#[test]
#[ignore = "needs pyarrow and duckdb: VRAMTRACE_DATA_PYTHON (.ci/run makes it)"]
fn duckdb_over_eight_ranks_names_the_rank_and_the_line_that_leak() {
    let dir = tempfile::tempdir().unwrap();
    let (traces, data) = eight_ranks(dir.path());
    let got = py(&format!("{READ}{FLEET_SQL}{FLEET}"), &[&data]);

    let extra = line_of(&workload_source("wl_train.c"), "extra[step] = alloc(");
    let first = &got["line"][0];
    assert_eq!(first[0], 5, "{got}");
    let identity = first[1].as_str().unwrap();
    assert!(
        identity.starts_with("fw_alloc at fw_alloc.c:"),
        "{identity}"
    );
    assert!(
        identity.contains(&format!(" < main at wl_train.c:{extra} < ")),
        "{identity}"
    );
    assert_eq!(first[2], 80 * MIB);
    assert_eq!(first[3], (80 * MIB) as f64);
    // Nothing else stands out.
    assert_eq!(got["line"][1][3], 0.0, "{got}");
    assert_eq!(got["grow"], planted_growth(), "{got}");

    assert_eq!(
        got["odd"][0],
        serde_json::json!([5, 100 * MIB, (80 * MIB) as f64])
    );
    assert_eq!(got["odd"][1][2], 0.0);

    let traces = trace_files(&traces);
    assert_eq!(traces.len(), 8);
    // One row per step of each rank, step 0 (before the first mark) included: a step in which
    // nothing was allocated or freed has the level it began with. The highest is the report's.
    let peaks = got["peaks"].as_array().unwrap();
    for t in traces {
        let r = report(&t);
        let rank = &r["trace"]["rank"];
        let holders = r["analysis"]["peaks"]["holders"].as_array().unwrap();
        let device: Vec<&Value> = holders.iter().filter(|h| h["memory"] == "device").collect();
        assert_eq!(device.len(), 1);
        let rows: Vec<&Value> = peaks.iter().filter(|p| &p[0] == rank).collect();
        let steps: Vec<u64> = rows.iter().map(|p| p[2].as_u64().unwrap()).collect();
        assert_eq!(steps, (0..=20).collect::<Vec<_>>(), "rank {rank}");
        assert!(
            rows.iter().all(|p| p[1] == device[0]["device"]),
            "rank {rank}"
        );
        let highest = rows.iter().map(|p| p[3].as_u64().unwrap()).max();
        assert_eq!(highest, device[0]["peak"]["bytes"].as_u64(), "rank {rank}");
    }
}

/// docs/data.md's line question over `tensors`, asked of the dataset at argv[1].
const TENSORS_LINE: &str = r#"
import duckdb
root = sys.argv[1]
con = duckdb.connect()
for t in ["tensors", "traces"]:
    con.sql(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{root}/{t}/**/*.parquet', "
            "hive_partitioning = true, hive_types = {'run': VARCHAR, 'rank': INTEGER})")
rows = con.sql("""
WITH live AS (
    SELECT run, rank, label, sum(bytes) AS bytes FROM tensors
    WHERE freed_ns IS NULL GROUP BY run, rank, label),
grid AS (
    SELECT r.run, r.rank, l.label, coalesce(live.bytes, 0) AS bytes
    FROM (SELECT DISTINCT run, rank FROM traces) r
    JOIN (SELECT DISTINCT run, label FROM live) l ON l.run = r.run
    LEFT JOIN live ON live.run = r.run AND live.rank IS NOT DISTINCT FROM r.rank
        AND live.label IS NOT DISTINCT FROM l.label),
typical AS (SELECT run, label, median(bytes) AS median FROM grid GROUP BY run, label)
SELECT grid.run, rank, grid.label, bytes, bytes - median AS excess
FROM grid JOIN typical ON typical.run = grid.run AND typical.label IS NOT DISTINCT FROM grid.label
ORDER BY excess DESC, grid.run, rank LIMIT 5;
""").fetchall()
print(json.dumps([[r, l, int(b), float(e)] for _, r, l, b, e in rows]))
"#;

// The 4 ranks of a real job on the GPU (tests/fixtures/gpu/ranks_gloo, rank 2 keeping 8 MiB of
// logits a step at line 48 for 40 steps): the line question over `tensors` names rank 2 and line
// 48 first, 320 MiB above the median, where over `allocations` the caching allocator's line
// (42) comes first.
#[test]
#[ignore = "needs pyarrow and duckdb: VRAMTRACE_DATA_PYTHON (.ci/run makes it)"]
fn duckdb_names_the_line_that_keeps_the_tensors_of_a_real_job() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let job = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gpu/ranks_gloo");
    export(&job, &data);
    let got = py(&format!("{READ}{TENSORS_LINE}"), &[&data]);
    assert_eq!(
        got[0],
        serde_json::json!([
            2,
            "ranks_gloo.py:48 in <module>",
            320 * MIB,
            (320 * MIB) as f64
        ])
    );
    assert_eq!(got[1][3], 0.0, "{got}");
}

/// docs/data.md's peak question (`PEAK_SQL`) over the dataset at argv[1]: its rows' steps, and
/// each step's peak.
const PEAKS_BY_STEP: &str = r#"
import duckdb
root = sys.argv[1]
con = duckdb.connect()
for t in ["allocations", "steps"]:
    con.sql(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{root}/{t}/**/*.parquet', "
            "hive_partitioning = true, hive_types = {'run': VARCHAR, 'rank': INTEGER})")
print(json.dumps([[int(s), int(p)] for *_, s, p in con.sql(PEAK_SQL).fetchall()]))
"#;

// Real runs on the GPU: the healthy GPT's caching allocator calls the driver in 3 of its 120
// steps, and leak_comm's step 100 begins with frees of 2 MiB. The peak query still gives every
// step its row (step 0 before the first mark included), the level a step began with counted in
// its peak (8,753,776,640 B at step 100, where the events in it reach 2 MiB less), and the
// highest is the report's peak.
#[test]
#[ignore = "needs pyarrow and duckdb: VRAMTRACE_DATA_PYTHON (.ci/run makes it)"]
fn the_peak_query_gives_every_step_of_a_real_run_its_level() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gpu");
    for (name, steps, at_100) in [
        ("healthy_gpt-marks", 120, None),
        ("leak_comm-marks", 100, Some(8_753_776_640u64)),
    ] {
        let trace = fixtures.join(format!("{name}.vtrace"));
        let data = dir.path().join(name);
        export(&trace, &data);
        let got = py(&format!("{READ}{FLEET_SQL}{PEAKS_BY_STEP}"), &[&data]);
        let rows = got.as_array().unwrap();
        let numbers: Vec<u64> = rows.iter().map(|r| r[0].as_u64().unwrap()).collect();
        assert_eq!(numbers, (0..=steps).collect::<Vec<u64>>(), "{name}");
        if let Some(level) = at_100 {
            assert_eq!(rows[100][1], level, "{name}");
        }
        let r = report(&trace);
        let device = &r["analysis"]["peaks"]["holders"][0];
        assert_eq!(device["memory"], "device");
        let highest = rows.iter().map(|r| r[1].as_u64().unwrap()).max();
        assert_eq!(highest, device["peak"]["bytes"].as_u64(), "{name}");
    }
}

/// What docs/data.md's growth question (`GROW_SQL`, over `findings`) must answer for
/// [`eight_ranks`]: the report's findings, rank 5's extra leak first (4 MiB a step from step 0,
/// all 20 of them live at the end), then the 1 MiB a step every rank keeps in `history`.
fn planted_growth() -> Value {
    let source = workload_source("wl_train.c");
    let extra = line_of(&source, "extra[step] = alloc(");
    let history = line_of(&source, "history[step] = alloc(");
    let grows = |rank: u32, line: u32, rate: u64| {
        let label = format!("main at wl_train.c:{line} → fw_alloc");
        serde_json::json!([
            rank,
            label,
            "steps",
            rate as f64,
            0,
            20 * rate,
            null,
            "alert"
        ])
    };
    let mut want = vec![grows(5, extra, 4 * MIB)];
    want.extend((0..8).map(|rank| grows(rank, history, MIB)));
    Value::from(want)
}

/// Every table of the dataset at argv[1] as pyarrow reads it: its columns, each with the type
/// Spark gives its Parquet type (`simpleString`; lists are arrays, structs structs), and its rows.
const ARROW_AS_SPARK: &str = r#"
root = sys.argv[1]
def spark_type(t):
    if pa.types.is_list(t):
        return f"array<{spark_type(t.value_type)}>"
    if pa.types.is_struct(t):
        return "struct<" + ",".join(f"{f.name}:{spark_type(f.type)}" for f in t) + ">"
    return {pa.int64(): "bigint", pa.int32(): "int", pa.string(): "string",
            pa.bool_(): "boolean", pa.float64(): "double"}[t]
out = {}
for name in NAMES:
    t = table(root, name)
    out[name] = [[[f.name, spark_type(f.type)] for f in t.schema], t.num_rows]
print(json.dumps(out))
"#;

/// The dataset at argv[1] read by Spark (`spark.read.parquet` of each table's directory, as
/// docs/data.md shows): each table's columns and Spark types and its rows, and docs/data.md's
/// fleet questions in Spark SQL — the line that differs most from the other ranks, the odd rank.
const SPARK: &str = r#"
import json, sys
from pyspark.sql import SparkSession
root = sys.argv[1]
spark = (SparkSession.builder.master("local[1]").appName("vramtrace-data")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
out = {}
for name in NAMES:
    df = spark.read.parquet(f"{root}/{name}")
    df.createOrReplaceTempView(name)
    out[name] = [[[f.name, f.dataType.simpleString()] for f in df.schema.fields], df.count()]
line = spark.sql(LINE_SQL.replace("IS NOT DISTINCT FROM", "<=>")).collect()
odd = spark.sql(ODD_SQL).collect()
out["line"] = [[r, i, int(b), float(e)] for r, i, b, e in line]
out["odd"] = [[r, int(l), float(m)] for r, l, m in odd]
out["grow"] = [list(g) for g in spark.sql(GROW_SQL).collect()]
spark.stop()
print(json.dumps(out))
"#;

/// The tables of the dataset, in docs/data.md's order.
const NAMES: &str = r#"
NAMES = ["allocations", "sites", "steps", "samples", "communicators", "failures", "tensors",
         "findings", "traces"]
"#;

// Spark reads the eight ranks' dataset as it is: every table with pyarrow's columns, in its order
// (the partitions `run` and `rank` last), with the types docs/data.md gives (int64 as bigint,
// int32 as int, lists as arrays) and the same rows; and docs/data.md's fleet questions in Spark
// SQL name rank 5 and its extra leak's line first, 80 MiB above the median rank, as DuckDB does.
#[test]
#[ignore = "needs pyarrow and pyspark with a Java: VRAMTRACE_DATA_PYTHON (.ci/run makes it)"]
fn spark_reads_the_dataset_with_its_types_and_names_the_rank_and_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let (_, data) = eight_ranks(dir.path());
    let arrow = py(&format!("{READ}{NAMES}{ARROW_AS_SPARK}"), &[&data]);
    let spark = py(&format!("{NAMES}{FLEET_SQL}{SPARK}"), &[&data]);

    let tables = arrow.as_object().unwrap();
    assert_eq!(tables.len(), 9);
    for (name, columns_and_rows) in tables {
        assert_eq!(&spark[name], columns_and_rows, "{name}");
    }
    let allocations = &arrow["allocations"][0];
    let column = |c: &str| {
        allocations
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x[0] == c)
            .map(|x| x[1].clone())
    };
    assert_eq!(column("bytes"), Some("bigint".into()));
    assert_eq!(column("device"), Some("int".into()));
    assert_eq!(column("flags"), Some("array<string>".into()));
    assert_eq!(column("rank"), Some("int".into()));
    assert_eq!(column("run"), Some("string".into()));
    assert_eq!(arrow["traces"][1], 8);

    let extra = line_of(&workload_source("wl_train.c"), "extra[step] = alloc(");
    let first = &spark["line"][0];
    assert_eq!(first[0], 5, "{spark}");
    assert!(
        first[1]
            .as_str()
            .unwrap()
            .contains(&format!(" < main at wl_train.c:{extra} < ")),
        "{first}"
    );
    assert_eq!(first[2], 80 * MIB);
    assert_eq!(first[3], (80 * MIB) as f64);
    assert_eq!(spark["line"][1][3], 0.0, "{spark}");
    assert_eq!(
        spark["odd"][0],
        serde_json::json!([5, 100 * MIB, (80 * MIB) as f64])
    );
    assert_eq!(spark["odd"][1][2], 0.0);
    assert_eq!(spark["grow"], planted_growth(), "{spark}");
}

/// `vramtrace.load` of argv[1] against pyarrow's reading of the dataset at argv[2].
const LOAD: &str = r#"
import vramtrace
import pandas as pd
data = vramtrace.load(sys.argv[1])
root = sys.argv[2]
same = {}
for name in data.names:
    t = data[name]
    same[name] = [t.num_rows, t.equals(table(root, name)), t.schema.names[-2:]]
frames = data.to_pandas()
print(json.dumps({
    "names": data.names,
    "same": same,
    "pandas": {k: len(v) for k, v in frames.items()},
    "dtypes": {c: str(frames["allocations"][c].dtype) for c in ("free_seq", "bytes", "rank")},
    "first_free": [None if v is pd.NA else int(v) for v in frames["allocations"]["free_seq"][:1]],
    "arrow_free": data.allocations["free_seq"][:1].to_pylist(),
    "frame": frames["sites"]["frames"].iloc[0][0],
    "arrow_frame": data.sites["frames"][0].as_py()[0],
    "attribute": data.allocations.num_rows,
}))
"#;

// `vramtrace.load` returns exactly the rows, columns and types of the Parquet the command
// writes, for a trace and for a directory of them; `.to_pandas()` has the same rows.
#[test]
#[ignore = "needs pyarrow and duckdb: VRAMTRACE_DATA_PYTHON (.ci/run makes it)"]
fn load_returns_the_rows_of_the_parquet() {
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("job");
    std::fs::create_dir(&traces).unwrap();
    let trace = train(&traces, "rank0", Some(0), false);
    train(&traces, "rank1", Some(1), true);
    for input in [&trace, &traces] {
        let data = dir.path().join("data");
        let _ = std::fs::remove_dir_all(&data);
        export(input, &data);
        let got = py(&format!("{READ}{LOAD}"), &[input, &data]);
        let names = [
            "allocations",
            "sites",
            "steps",
            "samples",
            "communicators",
            "failures",
            "tensors",
            "findings",
            "traces",
        ];
        assert_eq!(got["names"], serde_json::json!(names));
        for name in names {
            let same = &got["same"][name];
            assert_eq!(same[1], true, "{name}: {got}");
            assert_eq!(same[2], serde_json::json!(["run", "rank"]), "{name}");
            assert_eq!(got["pandas"][name], same[0], "{name}");
        }
        let traces = if input.is_dir() { 2 } else { 1 };
        assert_eq!(got["same"]["traces"][0], traces);
        assert_eq!(got["same"]["steps"][0], 20 * traces);
        assert_eq!(got["attribute"], got["same"]["allocations"][0]);
        // Integers stay integers in pandas, nulls and all (pyarrow's default makes floats).
        assert_eq!(
            got["dtypes"],
            serde_json::json!({"free_seq": "Int64", "bytes": "Int64", "rank": "Int32"})
        );
        assert!(got["first_free"][0].is_u64(), "{got}");
        assert_eq!(got["first_free"], got["arrow_free"]);
        // So do the integers inside a site's frames (pandas made them floats).
        assert_eq!(got["frame"], got["arrow_frame"], "{got}");
        assert!(
            got["frame"]["line"].is_u64() || got["frame"]["offset"].is_u64(),
            "{got}"
        );
    }
}

/// What `vramtrace.load(argv[1])` raises.
const BAD: &str = r#"
import json, sys
import vramtrace
try:
    vramtrace.load(sys.argv[1], **({"run": sys.argv[2]} if len(sys.argv) > 2 else {}))
    print(json.dumps(None))
except vramtrace.Error as e:
    print(json.dumps([type(e).__name__, str(e)]))
"#;

// A trace that cannot be read raises `vramtrace.Error` with the command's one line.
#[test]
#[ignore = "needs pyarrow and duckdb: VRAMTRACE_DATA_PYTHON (.ci/run makes it)"]
fn bad_input_raises_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.vtrace");
    let not_a_trace = dir.path().join("notes.vtrace");
    std::fs::write(&not_a_trace, "not a trace").unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let cases = [
        (
            &missing,
            format!(
                "{}: no such file or directory (os error 2)",
                missing.display()
            ),
        ),
        (
            &empty,
            format!(
                "{}: no trace files (*.vtrace) in this directory",
                empty.display()
            ),
        ),
    ];
    for (path, message) in cases {
        let got = py(BAD, &[path]);
        assert_eq!(got, serde_json::json!(["Error", message]));
    }
    // A name that begins with '-' is a trace's, not an option of the command.
    let got = py(BAD, &[Path::new("-r0.vtrace")]);
    assert_eq!(
        got,
        serde_json::json!([
            "Error",
            "-r0.vtrace: no such file or directory (os error 2)"
        ])
    );
    // The run's name is load()'s argument, and its error says so.
    let trace = train(dir.path(), "train", None, false);
    let got = py(BAD, &[&trace, Path::new("bad name")]);
    assert_eq!(
        got,
        serde_json::json!([
            "Error",
            "run \"bad name\": a run's name is ASCII letters, digits, '.', '_' and '-' (not first '.')"
        ])
    );
    let got = py(BAD, &[&not_a_trace]);
    let message = got[1].as_str().unwrap();
    assert!(
        message.starts_with(&format!("{}: ", not_a_trace.display())) && !message.contains('\n'),
        "{got}"
    );
    // Without pandas, to_pandas() says what to install, as load() does without pyarrow.
    let got = py(WITHOUT_PANDAS, &[&trace]);
    assert_eq!(
        got,
        serde_json::json!([
            "ImportError",
            "Tables.to_pandas() needs pandas: pip install pandas"
        ])
    );
}

/// `vramtrace.load(argv[1]).to_pandas()` where pandas cannot be imported.
const WITHOUT_PANDAS: &str = r#"
import json, sys
import vramtrace
data = vramtrace.load(sys.argv[1])
# Hidden once pyarrow is loaded (which looks for pandas itself as it loads).
sys.modules["pandas"] = None
try:
    data.to_pandas()
    print(json.dumps(None))
except ImportError as e:
    print(json.dumps([type(e).__name__, str(e)]))
"#;

/// `vramtrace.load(argv[1])`'s warnings, and its `traces` table's rotation columns.
const INCOMPLETE: &str = r#"
import json, sys, warnings
import vramtrace
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    data = vramtrace.load(sys.argv[1])
t = data.traces
print(json.dumps({
    "warnings": [[w.category.__name__, str(w.message)] for w in caught],
    "removed": [t["removed_segments"].to_pylist(), t["removed_events"].to_pylist()],
    "allocations": data.allocations.num_rows,
    "trace": t["trace"].to_pylist(),
}))
"#;

// A trace whose first segments rotation removed, and one cut short: each loads with one
// `TablesIncomplete` warning naming it (the line `export` prints), and the `traces` row counts
// what rotation removed as the report does; a whole trace loads without one.
#[test]
#[ignore = "needs pyarrow and duckdb: VRAMTRACE_DATA_PYTHON (.ci/run makes it)"]
fn a_part_of_a_run_loads_with_a_warning_and_says_what_rotation_removed() {
    let dir = tempfile::tempdir().unwrap();
    let rotated = dir.path().join("rotated");
    // Two threads of 1,000,000 pairs in segments of 1 MiB within 3 MiB: the first go.
    succeed(
        vramtrace_command()
            .args(["run", "--no-summary", "-o"])
            .arg(format!("{}/", rotated.display()))
            .arg("--")
            .arg(workload("wl_threads"))
            .args(["2", "1000000"])
            .env("LD_LIBRARY_PATH", standin_ld_library_path())
            .env("VRAMTRACE_SEGMENT_BYTES", (1 << 20).to_string())
            .env("VRAMTRACE_MAX_BYTES", (3 << 20).to_string()),
    );
    let removed = &report(&rotated)["reading"]["segments"]["removed"];
    let (segments, events) = (removed["segments"].as_u64(), removed["events"].as_u64());
    assert!(segments >= Some(1), "{removed}");
    let got = py(INCOMPLETE, &[&rotated]);
    assert_eq!(
        got["removed"],
        serde_json::json!([[segments], [events]]),
        "{got}"
    );
    // Named as the trace, not as the segment read first.
    let name = got["trace"][0].as_str().unwrap();
    assert!(
        name.starts_with(&*rotated.to_string_lossy()) && !name.contains(".seg"),
        "{got}"
    );
    let warnings = got["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{got}");
    assert_eq!(warnings[0][0], "TablesIncomplete");
    let message = warnings[0][1].as_str().unwrap();
    let deleted = format!(
        "rotation (VRAMTRACE_MAX_BYTES) deleted {} ({} events, the first ",
        match segments.unwrap() {
            1 => "segment 1".to_string(),
            n => format!("segments 1-{n}"),
        },
        vramtrace_collector::units::grouped(events.unwrap())
    );
    assert!(
        message.contains(&deleted)
            && message.contains(&format!(
                "the tables start at segment {}, from its snapshot of the live set",
                segments.unwrap() + 1
            )),
        "{message}"
    );

    let whole = train(dir.path(), "whole", None, false);
    let got = py(INCOMPLETE, &[&whole]);
    assert_eq!(got["warnings"], serde_json::json!([]), "{got}");
    assert_eq!(got["removed"], serde_json::json!([[0], [0]]));
    // The same trace without its last third: cut short.
    let bytes = std::fs::read(&whole).unwrap();
    let cut = dir.path().join("cut.vtrace");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let got = py(INCOMPLETE, &[&cut]);
    let warnings = got["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{got}");
    let message = warnings[0][1].as_str().unwrap();
    // The chunk the cut goes through is the cut, not damage; its events are counted.
    assert!(
        message.starts_with(&format!("{} is cut short (truncated: ", cut.display()))
            && message.contains(" in that chunk ")
            && !message.contains("damaged")
            && message.ends_with(" not read): its tables hold what could be read"),
        "{message}"
    );

    // What the input leaves out is no trace's: a trace in a subdirectory is not read, and said
    // with a plain UserWarning, so an error filter on TablesIncomplete still loads the rest.
    let job = dir.path().join("job");
    std::fs::create_dir_all(job.join("node1")).unwrap();
    std::fs::copy(&whole, job.join("rank0.vtrace")).unwrap();
    std::fs::rename(&cut, job.join("node1").join("rank1.vtrace")).unwrap();
    let got = py(INCOMPLETE, &[&job]);
    let warnings = got["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{got}");
    assert_eq!(warnings[0][0], "UserWarning", "{got}");
    assert!(warnings[0][1].as_str().unwrap().contains("node1"), "{got}");
}
