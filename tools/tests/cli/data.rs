//! `vramtrace export --format parquet` on traces of planted truth, the dataset read back by the
//! `parquet` crate's own reader: the files where docs/data.md says, every table's rows exact,
//! the run's facts in every file's metadata; and the output rules (a new or empty directory, no
//! half-written dataset, nothing replaced without `--force`).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::{Field, Row};

use crate::support::*;

/// Every Parquet file under `dir`, in name order.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                assert_eq!(p.extension().unwrap(), "parquet", "{}", p.display());
                found.push(p);
            }
        }
    }
    found.sort();
    found
}

/// Every Parquet file under `dir` within the dataset at `root`, named from `root`, in name
/// order.
fn names_in(root: &Path, dir: &Path) -> Vec<String> {
    (files(dir).iter())
        .map(|p| p.strip_prefix(root).unwrap().display().to_string())
        .collect()
}

/// The rows of `table` in the dataset at `root`, all files together.
fn table(root: &Path, table: &str) -> Rows {
    let mut rows = Vec::new();
    for f in files(&root.join(table)) {
        let reader = SerializedFileReader::new(File::open(&f).unwrap()).unwrap();
        rows.extend(reader.get_row_iter(None).unwrap().map(Result::unwrap));
    }
    Rows(rows)
}

/// A table read back, its columns by name.
struct Rows(Vec<Row>);

impl Rows {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn column<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Field> + 'a {
        self.0.iter().map(move |r| {
            (r.get_column_iter().find(|(n, _)| *n == name))
                .unwrap_or_else(|| panic!("no column {name}"))
                .1
        })
    }

    fn int(&self, name: &str) -> Vec<Option<i64>> {
        (self.column(name))
            .map(|f| match f {
                Field::Long(v) => Some(*v),
                Field::Int(v) => Some(i64::from(*v)),
                Field::Null => None,
                other => panic!("{name}: {other:?} is no number"),
            })
            .collect()
    }

    fn text(&self, name: &str) -> Vec<Option<String>> {
        (self.column(name))
            .map(|f| match f {
                Field::Str(v) => Some(v.clone()),
                Field::Null => None,
                other => panic!("{name}: {other:?} is no text"),
            })
            .collect()
    }

    fn real(&self, name: &str) -> Vec<Option<f64>> {
        (self.column(name))
            .map(|f| match f {
                Field::Double(v) => Some(*v),
                Field::Null => None,
                other => panic!("{name}: {other:?} is no double"),
            })
            .collect()
    }

    fn flag(&self, name: &str) -> Vec<Option<bool>> {
        (self.column(name))
            .map(|f| match f {
                Field::Bool(v) => Some(*v),
                Field::Null => None,
                other => panic!("{name}: {other:?} is no boolean"),
            })
            .collect()
    }
}

/// `vramtrace report --json TRACE`, read.
fn report_json(trace: &Path) -> serde_json::Value {
    let out = vramtrace()
        .args(["report", "--json"])
        .arg(trace)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

fn export(trace: &Path, out: &Path, extra: &[&str]) -> assert_cmd::assert::Assert {
    vramtrace()
        .args(["export", "--format", "parquet", "-o"])
        .arg(out)
        .args(extra)
        .arg(trace)
        .assert()
}

/// Counts of each distinct value.
fn tally<T: Ord + Clone>(values: &[T]) -> BTreeMap<T, usize> {
    let mut m = BTreeMap::new();
    for v in values {
        *m.entry(v.clone()).or_insert(0) += 1;
    }
    m
}

// The training loop: a 2 MiB NCCL buffer, 12 steps each with an 8 MiB temporary freed in its
// step (train.py:30 in forward) and a 1 MiB leak (train.py:42 in step), then a 64 GiB
// allocation that fails out of memory.
#[test]
fn the_training_loop_as_tables() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_training(dir.path(), "train.vtrace");
    let out = dir.path().join("data");
    let done = export(&trace, &out, &[]).success();
    let said = String::from_utf8_lossy(&done.get_output().stderr).into_owned();
    assert!(
        said.starts_with(&format!(
            "wrote {} (run train, 1 trace: 75 events as 25 allocations (13 live at the end), ",
            out.display()
        )),
        "{said}"
    );

    // Where docs/data.md puts them: one file per table, under the run and the rank.
    let names = names_in(&out, &out);
    let expected: Vec<String> = [
        "allocations",
        "communicators",
        "failures",
        "findings",
        "samples",
        "sites",
        "steps",
        "tensors",
        "traces",
    ]
    .iter()
    .map(|t| format!("{t}/run=train/rank=3/train.parquet"))
    .collect();
    assert_eq!(names, expected);

    let a = table(&out, "allocations");
    assert_eq!(a.len(), 25);
    let live: Vec<usize> = (0..a.len())
        .filter(|&i| a.int("free_seq")[i].is_none())
        .collect();
    assert_eq!(live.len(), 13);
    let live_bytes: i64 = live.iter().map(|&i| a.int("bytes")[i].unwrap()).sum();
    assert_eq!(live_bytes, 14 * MIB as i64);
    let label = a.text("label");
    let by_label = tally(&label);
    assert_eq!(by_label[&Some("train.py:30 in forward".into())], 12);
    assert_eq!(by_label[&Some("train.py:42 in step".into())], 12);
    let (bytes, alloc_step, free_step) = (a.int("bytes"), a.int("alloc_step"), a.int("free_step"));
    let (alloc_seq, free_seq) = (a.int("alloc_seq"), a.int("free_seq"));
    let (alloc_time, free_time) = (a.int("alloc_time_ns"), a.int("free_time_ns"));
    let (free_api, module) = (a.text("free_api"), a.text("module"));
    for (i, l) in label.iter().enumerate() {
        match l.as_deref() {
            // Each temporary is freed in the step that made it, by cudaFree.
            Some("train.py:30 in forward") => {
                assert_eq!(bytes[i], Some(8 * MIB as i64));
                assert_eq!(free_step[i], alloc_step[i]);
                assert_eq!(free_api[i].as_deref(), Some("cudaFree"));
                assert!(free_seq[i] > alloc_seq[i]);
                assert!(free_time[i] > alloc_time[i]);
            }
            Some("train.py:42 in step") => {
                assert_eq!(bytes[i], Some(MIB as i64));
                assert_eq!(free_step[i], None);
                assert_eq!(module[i].as_deref(), Some("libtorch_cuda.so"));
            }
            _ => assert_eq!(bytes[i], Some(2 * MIB as i64)),
        }
    }
    for (column, value) in [
        ("category", "device"),
        ("accounting", "device"),
        ("api", "cudaMalloc"),
    ] {
        assert!(
            a.text(column).iter().all(|v| v.as_deref() == Some(value)),
            "{column}"
        );
    }
    assert!(a.int("pid").iter().all(|p| *p == Some(4242)));
    // One leak per step, steps 1 to 12.
    let mut leak_steps: Vec<i64> = (0..a.len())
        .filter(|&i| label[i].as_deref() == Some("train.py:42 in step"))
        .map(|i| a.int("alloc_step")[i].unwrap())
        .collect();
    leak_steps.sort();
    assert_eq!(leak_steps, (1..=12).collect::<Vec<_>>());

    let steps = table(&out, "steps");
    assert_eq!(steps.len(), 12);
    assert_eq!(steps.int("step"), (1..=12).map(Some).collect::<Vec<_>>());
    // Live when step k began: the NCCL buffer and k - 1 leaks.
    let at_begin: Vec<Option<i64>> = (0..12).map(|k| Some(((2 + k) * MIB) as i64)).collect();
    assert_eq!(steps.int("device_bytes"), at_begin);

    let f = table(&out, "failures");
    assert_eq!(f.len(), 1);
    assert_eq!(f.flag("out_of_memory"), [Some(true)]);
    assert_eq!(f.int("request_bytes"), [Some(64 << 30)]);
    assert_eq!(f.int("live_device_bytes"), [Some(14 * MIB as i64)]);
    assert_eq!(f.int("step"), [Some(12)]);
    assert_eq!(f.text("label"), [Some("train.py:42 in step".to_string())]);
    assert_eq!(f.int("seq"), [Some(TRAINING_EVENTS as i64)]);

    // Every site a row names is in `sites`, with its label and Python line.
    let s = table(&out, "sites");
    let site_ids = s.int("site");
    for id in a.int("site").iter().chain(&f.int("site")) {
        let row = site_ids.iter().position(|s| s == id).expect("a named site");
        if s.text("label")[row].as_deref() == Some("train.py:42 in step") {
            assert_eq!(
                s.text("python_file")[row].as_deref(),
                Some("/work/app/train.py")
            );
            assert_eq!(s.int("python_line")[row], Some(42));
            assert_eq!(s.text("python_function")[row].as_deref(), Some("step"));
        }
    }
    assert_eq!(
        site_ids,
        (0..site_ids.len() as i64).map(Some).collect::<Vec<_>>()
    );

    for (name, rows) in [
        ("samples", 0),
        ("communicators", 0),
        ("tensors", 0),
        ("traces", 1),
    ] {
        assert_eq!(table(&out, name).len(), rows, "{name}");
    }
    // The report's diagnosis, finding by finding: the leak first, at its line and rate.
    let f = table(&out, "findings");
    let report = report_json(&trace);
    let diagnosis = report["analysis"]["diagnosis"].as_array().unwrap();
    assert_eq!(f.len(), diagnosis.len());
    let classes: Vec<Option<String>> = diagnosis
        .iter()
        .map(|d| d["class"].as_str().map(str::to_string))
        .collect();
    assert_eq!(f.text("class"), classes);
    assert_eq!(
        f.int("finding"),
        (1..=f.len() as i64).map(Some).collect::<Vec<_>>()
    );
    assert_eq!(f.text("class")[0].as_deref(), Some("steady-growth"));
    assert_eq!(f.text("severity")[0].as_deref(), Some("alert"));
    assert_eq!(f.text("label")[0].as_deref(), Some("train.py:42 in step"));
    assert_eq!(f.text("file")[0].as_deref(), Some("/work/app/train.py"));
    assert_eq!(f.int("line")[0], Some(42));
    assert_eq!(f.real("rate")[0], Some(MIB as f64));
    assert_eq!(f.text("axis")[0].as_deref(), Some("steps"));
    assert_eq!(f.int("live_at_end")[0], Some(12 * MIB as i64));
    assert_eq!(f.int("device")[0], Some(0));
    assert_eq!(f.text("memory")[0].as_deref(), Some("device"));

    let t = table(&out, "traces");
    assert_eq!(t.text("host"), [Some("gpu-node-7".to_string())]);
    assert_eq!(t.int("steps"), [Some(12)]);
    assert_eq!(t.int("events"), [Some(TRAINING_EVENTS as i64)]);
    assert_eq!(t.text("ending"), [Some("complete".to_string())]);

    // The run's facts ride in every file's footer.
    for f in files(&out) {
        let reader = SerializedFileReader::new(File::open(&f).unwrap()).unwrap();
        let kv: BTreeMap<String, String> = reader
            .metadata()
            .file_metadata()
            .key_value_metadata()
            .unwrap()
            .iter()
            .map(|kv| (kv.key.clone(), kv.value.clone().unwrap_or_default()))
            .collect();
        assert_eq!(kv["vramtrace.schema"], "vramtrace-data/1");
        assert_eq!(kv["vramtrace.run"], "train");
        assert_eq!(kv["vramtrace.rank"], "3");
        assert_eq!(kv["vramtrace.host"], "gpu-node-7");
        assert_eq!(kv["vramtrace.pid"], "4242");
        assert_eq!(
            kv["vramtrace.command_line"],
            r#"["python","train.py","--epochs","1"]"#
        );
    }
}

// A directory of traces is one run, a partition per rank; a trace without a rank goes under
// Hive's null partition; `--run` names the run.
#[test]
fn a_directory_is_one_run_with_a_partition_per_rank() {
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("job");
    std::fs::create_dir(&traces).unwrap();
    write_training(&traces, "a.vtrace");
    write_six_step_training(&traces, "b.vtrace");
    // A third trace of no rank: the workload's header, rank taken away, of a third process.
    let path = traces.join("c.vtrace");
    let file = File::create(&path).unwrap();
    let mut header = header();
    header.rank = None;
    header.pid += 2;
    let mut w = vramtrace_collector::format::TraceWriter::new(file, &header).unwrap();
    for r in workload() {
        w.write(&r).unwrap();
    }
    w.finish().unwrap();

    let out = dir.path().join("data");
    let done = export(&traces, &out, &["--run", "job-7"]).success();
    // Two traces of rank 3 (here two processes; in life a restarted job, or two jobs): a query
    // by rank would add them up, which the export says.
    let stderr = String::from_utf8_lossy(&done.get_output().stderr).into_owned();
    assert!(
        stderr.contains(
            "warning: rank 3 in more than one trace (a restarted job, or traces of several \
             jobs): their rows share the partition rank=3 of run job-7, and a query by rank adds \
             them together (tell them apart by pid, or export each job on its own with --run)\n"
        ),
        "{stderr}"
    );
    let names = names_in(&out, &out.join("allocations"));
    assert_eq!(
        names,
        [
            "allocations/run=job-7/rank=3/a.parquet",
            "allocations/run=job-7/rank=3/b.parquet",
            "allocations/run=job-7/rank=__HIVE_DEFAULT_PARTITION__/c.parquet",
        ]
    );
    assert_eq!(table(&out, "traces").len(), 3);
    // 25, 7, and the workload's 6 objects (2 freed).
    let a = table(&out, "allocations");
    assert_eq!(a.len(), 25 + 7 + 6);
    let freed = a.int("free_seq").iter().filter(|s| s.is_some()).count();
    assert_eq!(freed, 12 + 2);
}

/// A job's directory `job/` under `dir` with two traces of rank 3: the training loop
/// (`a.vtrace`) and its six-step run (`b.vtrace`).
fn two_traces(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let traces = dir.join("job");
    std::fs::create_dir(&traces).unwrap();
    let a = write_training(&traces, "a.vtrace");
    let b = write_six_step_training(&traces, "b.vtrace");
    (traces, a, b)
}

// Traces given one by one (a shell's glob) are one run as their directory is, named after it;
// traces of several directories need a name; the other formats read one trace.
#[test]
fn traces_given_one_by_one_are_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let (_, a, b) = two_traces(dir.path());
    let out = dir.path().join("data");
    vramtrace()
        .args(["export", "--format", "parquet", "-o"])
        .arg(&out)
        .args([&a, &b])
        .assert()
        .success();
    let names = names_in(&out, &out.join("allocations"));
    assert_eq!(
        names,
        [
            "allocations/run=job/rank=3/a.parquet",
            "allocations/run=job/rank=3/b.parquet"
        ]
    );
    assert_eq!(table(&out, "allocations").len(), 25 + 7);

    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let c = write_six_step_training(&other, "c.vtrace");
    let out = dir.path().join("data2");
    let refused = vramtrace()
        .args(["export", "--format", "parquet", "-o"])
        .arg(&out)
        .args([&a, &c])
        .assert()
        .code(2);
    assert_eq!(
        String::from_utf8_lossy(&refused.get_output().stderr),
        "error: the traces given are not in one directory: name their run with --run NAME (its \
         partition, run=NAME/)\n"
    );
    assert!(!out.exists());
    vramtrace()
        .args(["export", "--format", "parquet", "--run", "both", "-o"])
        .arg(&out)
        .args([&a, &c])
        .assert()
        .success();
    assert_eq!(table(&out, "traces").len(), 2);

    let err = vramtrace()
        .args(["export", "--format", "csv-live", "-o", "-"])
        .args([&a, &b])
        .assert()
        .code(2);
    assert_eq!(
        String::from_utf8_lossy(&err.get_output().stderr),
        "error: --format csv-live reads one trace file (--format parquet takes several, or a \
         directory)\n"
    );
}

// A reader of `--json` that leaves early (`| head -1`; here one that reads nothing) is no failure: the dataset is written, the
// exit is 0 and nothing panics.
#[test]
fn json_read_in_part_is_no_failure() {
    let dir = tempfile::tempdir().unwrap();
    let a = write_training(dir.path(), "a.vtrace");
    let out = dir.path().join("data");
    let script = format!(
        "set -o pipefail; {} export --format parquet --json -o {} {} | true",
        assert_cmd::cargo::cargo_bin("vramtrace").display(),
        out.display(),
        a.display()
    );
    let done = std::process::Command::new("bash")
        .args(["-c", &script])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(table(&out, "allocations").len(), 25);
}

// `--json`: what was written, per trace, for scripts: the rows of each table as the files hold
// them, the trace's rank and process, and its warnings.
#[test]
fn json_says_what_each_trace_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let (traces, a, b) = two_traces(dir.path());
    let out = dir.path().join("data");
    let done = export(&traces, &out, &["--json"]).success();
    let json: serde_json::Value = serde_json::from_slice(&done.get_output().stdout).unwrap();
    assert_eq!(json["output"], out.display().to_string());
    assert_eq!(json["run"], "job");
    // Both traces are rank 3's.
    let warnings = json["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        (warnings[0].as_str().unwrap()).starts_with("rank 3 in more than one trace"),
        "{warnings:?}"
    );
    let written = json["traces"].as_array().unwrap();
    assert_eq!(written.len(), 2);
    for (w, (trace, file)) in written.iter().zip([(&a, "a"), (&b, "b")]) {
        assert_eq!(w["trace"], trace.display().to_string());
        assert_eq!(w["file"], file);
        assert_eq!(w["rank"], 3);
        assert_eq!(w["warnings"], serde_json::json!([]));
    }
    let first = &written[0];
    assert_eq!(first["allocations"], 25);
    assert_eq!(first["live_at_end"], 13);
    assert_eq!(first["steps"], 12);
    assert_eq!(first["failures"], 1);
    for table in ["allocations", "steps", "failures", "findings"] {
        let rows = table_of(&out, table, "a");
        assert_eq!(first[table], rows as u64, "{table}");
    }
    // Traces below the directory given, which it leaves out, are said there too.
    std::fs::create_dir(traces.join("node1")).unwrap();
    write_training(&traces.join("node1"), "c.vtrace");
    let out = dir.path().join("data2");
    let done = export(&traces, &out, &["--json"]).success();
    let json: serde_json::Value = serde_json::from_slice(&done.get_output().stdout).unwrap();
    assert_eq!(
        json["warnings"][0],
        format!(
            "{}: 1 trace in its subdirectory node1/ is not read (a directory is read one level \
             deep)",
            traces.display()
        )
    );
    // The other formats write their output, not a summary.
    let trace = &a;
    let err = vramtrace()
        .args(["export", "--format", "csv-live", "--json", "-o", "-"])
        .arg(trace)
        .assert()
        .code(2);
    assert_eq!(
        String::from_utf8_lossy(&err.get_output().stderr),
        "error: --json is an option of --format parquet\n"
    );
}

// On every real GPU trace of the fixtures (PyTorch, JAX, CuPy, an extension, four ranks;
// healthy and leaky), the `findings` rows are the report's diagnosis: the same findings in
// the same order, at the same lines, with the same numbers — time-sampled ones with their
// window. The H100's traces, whose hooks mark a loop's first iteration before the optimizer's
// step marks, were exported with one step more than the report counts (41 for 40): a third
// finding, and no time to full.
#[test]
fn findings_are_the_reports_diagnosis_on_real_gpu_traces() {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/gpu");
    let mut traces: Vec<PathBuf> = files_named(&fixtures, "vtrace");
    traces.extend(files_named(&fixtures.join("ranks_gloo"), "vtrace"));
    traces.extend(files_named(&fixtures.join("h100"), "vtrace"));
    traces.extend(files_named(&fixtures.join("oom"), "vtrace"));
    assert_eq!(traces.len(), 35);
    let dir = tempfile::tempdir().unwrap();
    let (mut growing, mut by_time) = (0, 0);
    for (i, trace) in traces.iter().enumerate() {
        let out = dir.path().join(format!("d{i}"));
        export(trace, &out, &[]).success();
        let report = report_json(trace);
        let analysis = &report["analysis"];
        let diagnosis = analysis["diagnosis"].as_array().unwrap();
        let f = table(&out, "findings");
        let name = trace.display();
        assert_eq!(f.len(), diagnosis.len(), "{name}");
        let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
        for (row, d) in diagnosis.iter().enumerate() {
            let site = &d["site"];
            let label = text(&site["label"]).or_else(|| text(&site["site"]));
            let e = &d["evidence"];
            assert_eq!(f.int("finding")[row], Some(row as i64 + 1), "{name}");
            assert_eq!(f.text("class")[row], text(&d["class"]), "{name}");
            assert_eq!(f.text("severity")[row], text(&d["severity"]), "{name}");
            assert_eq!(f.text("label")[row], label, "{name}");
            assert_eq!(f.int("bytes")[row], e["bytes"].as_i64(), "{name}");
            assert_eq!(f.real("rate")[row], e["rate"].as_f64(), "{name}");
            assert_eq!(f.text("axis")[row], text(&e["axis"]), "{name}");
            assert_eq!(
                f.int("growth_from")[row],
                e["growth_from"].as_i64(),
                "{name}"
            );
            assert_eq!(
                f.int("live_at_end")[row],
                e["live_at_end"].as_i64(),
                "{name}"
            );
            // Times to full, to the last bits of a sum taken in another order.
            for k in ["steps_to_full", "seconds_to_full"] {
                match (f.real(k)[row], e[k].as_f64()) {
                    (Some(x), Some(y)) => assert!((x - y).abs() <= 1e-9 * y.abs(), "{name} {k}"),
                    (x, y) => assert_eq!(x, y, "{name} {k}"),
                }
            }
            let freed = e["freed_at_teardown"].as_i64();
            assert_eq!(f.int("freed_at_teardown")[row], freed, "{name}");
            assert_eq!(f.text("view")[row], text(&e["view"]), "{name}");
            assert_eq!(f.text("line_means")[row], text(&e["line_means"]), "{name}");
            for k in ["kept_from", "alerted_at_step"] {
                assert_eq!(f.int(k)[row], e[k].as_i64(), "{name} {k}");
            }
            assert_eq!(f.text("cause")[row], text(&d["cause"]), "{name}");
            let window = analysis["growth"]["window_ns"].as_i64();
            let per_window = e["axis"] == "time";
            assert_eq!(
                f.int("window_ns")[row],
                window.filter(|_| per_window),
                "{name}"
            );
            growing += usize::from(d["class"] == "steady-growth");
            by_time += usize::from(per_window);
        }
    }
    // The planted leaks, each trace's (leak_three's three lines in both runs, rank 2's of the
    // four in both, and leak_oom's until its failure): 23 steady growths; 4 findings of traces
    // without steps are judged along time.
    assert_eq!((growing, by_time), (23, 4));
}

/// The files of `dir` (not below) whose names end in `.ext`, in name order.
fn files_named(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    found.sort();
    found
}

/// A Parquet file as another tool writes one (one int64 column, no vramtrace metadata).
fn write_foreign_parquet(path: &Path) {
    use parquet::data_type::Int64Type;
    use parquet::file::writer::SerializedFileWriter;
    let schema = parquet::schema::parser::parse_message_type("message m { required int64 x; }");
    let mut w = SerializedFileWriter::new(
        File::create(path).unwrap(),
        std::sync::Arc::new(schema.unwrap()),
        Default::default(),
    )
    .unwrap();
    let mut group = w.next_row_group().unwrap();
    let mut column = group.next_column().unwrap().unwrap();
    (column.typed::<Int64Type>())
        .write_batch(&[7], None, None)
        .unwrap();
    column.close().unwrap();
    group.close().unwrap();
    w.close().unwrap();
}

/// The rows of `table`'s file of trace `file` in the dataset at `root`.
fn table_of(root: &Path, table: &str, file: &str) -> usize {
    let path = files(&root.join(table))
        .into_iter()
        .find(|p| p.file_stem().is_some_and(|s| s == file))
        .unwrap();
    let reader = SerializedFileReader::new(File::open(path).unwrap()).unwrap();
    reader.metadata().file_metadata().num_rows() as usize
}

#[test]
fn an_existing_output_is_replaced_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_training(dir.path(), "train.vtrace");
    let out = dir.path().join("data");

    // An empty directory is taken.
    std::fs::create_dir(&out).unwrap();
    export(&trace, &out, &[]).success();
    assert_eq!(files(&out).len(), 9);

    // A directory with something in it is refused, untouched.
    let mine = out.join("notes.txt");
    std::fs::write(&mine, "mine").unwrap();
    let refused = export(&trace, &out, &[]).code(2);
    let err = String::from_utf8_lossy(&refused.get_output().stderr).into_owned();
    assert_eq!(
        err,
        format!(
            "error: {}: the directory exists and is not empty; give a new one (it holds more than \
             an earlier dataset, which is all --force replaces)\n",
            out.display()
        )
    );
    assert_eq!(std::fs::read_to_string(&mine).unwrap(), "mine");

    // So is a file in its place.
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    export(&trace, &file, &[]).code(2);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");

    // --force never replaces a directory that holds anything but a dataset: notes.txt stays,
    // and so does the dataset beside it.
    let refused = export(&trace, &out, &["--force"]).code(2);
    let err = String::from_utf8_lossy(&refused.get_output().stderr).into_owned();
    assert_eq!(
        err,
        format!(
            "error: {}: holds {}, which is not part of a vramtrace dataset; --force replaces \
             only an earlier dataset (its tables' files and nothing else): give a new \
             directory\n",
            out.display(),
            mine.display()
        )
    );
    assert_eq!(std::fs::read_to_string(&mine).unwrap(), "mine");
    std::fs::remove_file(&mine).unwrap();

    // Nor anything deeper in it, where a table's name is a directory of the user's: a trace
    // under `traces/`, a note in a partition, a link.
    let held = out.join("traces").join("job.vtrace");
    let note = (out.join("sites").read_dir().unwrap())
        .map(|run| {
            run.unwrap()
                .path()
                .read_dir()
                .unwrap()
                .next()
                .unwrap()
                .unwrap()
                .path()
        })
        .next()
        .unwrap()
        .join("notes.txt");
    for planted in [&held, &note] {
        std::fs::write(planted, "mine").unwrap();
        let refused = export(&trace, &out, &["--force"]).code(2);
        let err = String::from_utf8_lossy(&refused.get_output().stderr).into_owned();
        assert!(
            err.contains(&format!("holds {}, which is not part", planted.display())),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(planted).unwrap(), "mine");
        std::fs::remove_file(planted).unwrap();
    }
    std::os::unix::fs::symlink(&trace, &held).unwrap();
    export(&trace, &out, &["--force"]).code(2);
    assert!(held.exists());
    std::fs::remove_file(&held).unwrap();
    // Nor a Parquet file of the user's in a partition's place: the footer says whose it is.
    let theirs = note.with_file_name("important.parquet");
    write_foreign_parquet(&theirs);
    let refused = export(&trace, &out, &["--force"]).code(2);
    let err = String::from_utf8_lossy(&refused.get_output().stderr).into_owned();
    assert!(
        err.contains(&format!("holds {}, which is not part", theirs.display())),
        "{err}"
    );
    assert!(theirs.exists());
    std::fs::remove_file(&theirs).unwrap();
    // A symbolic link to a dataset is not replaced, nor written through, even with --force.
    let link = dir.path().join("latest");
    std::os::unix::fs::symlink(&out, &link).unwrap();
    let before = files(&out);
    // `latest/` names the link's target: refused all the same (it emptied the dataset, then
    // failed), and the dataset is left whole.
    let slashed = PathBuf::from(format!("{}/", link.display()));
    for (flags, named) in [
        (&[][..], &link),
        (&["--force"], &link),
        (&["--force"], &slashed),
    ] {
        let refused = export(&trace, named, flags).code(2);
        let err = String::from_utf8_lossy(&refused.get_output().stderr).into_owned();
        assert_eq!(
            err,
            format!(
                "error: {} is a symbolic link (to {}); name the directory itself\n",
                link.display(),
                out.display()
            )
        );
    }
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(files(&out), before);
    std::fs::remove_file(&link).unwrap();
    std::fs::write(&mine, "mine").unwrap();

    // It replaces an earlier dataset, and a file.
    std::fs::remove_file(&mine).unwrap();
    let earlier = files(&out);
    export(&trace, &out, &["--force"]).success();
    assert_eq!(files(&out), earlier);
    export(&trace, &file, &["--force"]).success();
    assert_eq!(files(&file).len(), 9);

    // Never the working directory or one above it, and never standard output.
    for (cwd, target) in [
        (out.as_path(), "."),
        (out.as_path(), ".."),
        (dir.path(), "-"),
    ] {
        let refused = vramtrace()
            .current_dir(cwd)
            .args(["export", "--format", "parquet", "--force", "-o", target])
            .arg(&trace)
            .assert()
            .code(2);
        let err = String::from_utf8_lossy(&refused.get_output().stderr).into_owned();
        let expected = if target == "-" {
            "error: -o -: a Parquet dataset is a directory of files and cannot go to standard \
             output; give a directory\n"
                .to_string()
        } else {
            format!(
                "error: {target}: the working directory, or one above it; give a new directory \
                 for the dataset\n"
            )
        };
        assert_eq!(err, expected);
    }
    assert_eq!(files(&out), earlier);
    assert!(!dir.path().join("-").exists());

    // Nothing is left beside them.
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["data", "file", "train.vtrace"]);
}

#[test]
fn a_failed_export_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.vtrace");
    std::fs::write(&bad, "not a trace").unwrap();
    let out = dir.path().join("data");
    let failed = export(&bad, &out, &[]).code(2);
    let err = String::from_utf8_lossy(&failed.get_output().stderr).into_owned();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!("error: {}", bad.display())),
        "{err}"
    );
    assert!(!out.exists());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

    // A run name that is not one path component is refused before anything is read.
    let trace = write_training(dir.path(), "train.vtrace");
    let err = export(&trace, &out, &["--run", "a/b"]).code(2);
    let err = String::from_utf8_lossy(&err.get_output().stderr).into_owned();
    assert_eq!(
        err,
        "error: --run \"a/b\": a run's name is ASCII letters, digits, '.', '_' and '-' (not \
         first '.')\n"
    );
    assert!(!out.exists());
    let long = "r".repeat(201);
    let err = export(&trace, &out, &["--run", &long]).code(2);
    assert_eq!(
        String::from_utf8_lossy(&err.get_output().stderr),
        "error: --run: a run's name is at most 200 characters (this one has 201)\n"
    );
    // The trace itself, as the output, is refused as every output refuses it.
    let err = export(&trace, &trace, &["--force"]).code(2);
    assert_eq!(
        String::from_utf8_lossy(&err.get_output().stderr),
        format!(
            "error: {0} is the trace being read ({0}); it is never replaced, not even with \
             --force\n",
            trace.display()
        )
    );
    // A mistyped parent directory is an error, as for every output, not a new tree.
    let nowhere = dir.path().join("no-such-dir").join("data");
    let err = export(&trace, &nowhere, &[]).code(2);
    assert_eq!(
        String::from_utf8_lossy(&err.get_output().stderr),
        format!(
            "error: creating {}: no directory {1} (a mistyped path is not made into a new \
             tree: create it first, mkdir -p {1})\n",
            nowhere.display(),
            nowhere.parent().unwrap().display()
        )
    );
    assert!(!dir.path().join("no-such-dir").exists());
    // The other formats' window is not the dataset's: it holds the whole trace.
    let err = export(&trace, &out, &["--since", "step 3"]).code(2);
    assert_eq!(
        String::from_utf8_lossy(&err.get_output().stderr),
        "error: --since and --last are not options of --format parquet: its tables hold the \
         whole trace (filter them by alloc_time_ns or alloc_step)\n"
    );
    assert!(!out.exists());
}

/// A copy of a trace beside it is one process twice: its rows would be in the dataset twice
/// under one rank and pid, every sum doubled. Refused before anything is written.
#[test]
fn a_copy_of_a_trace_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job");
    std::fs::create_dir(&job).unwrap();
    let a = write_training(&job, "a.vtrace");
    let b = job.join("b.vtrace");
    std::fs::copy(&a, &b).unwrap();
    let out = dir.path().join("data");
    let refused = export(&job, &out, &[]).code(2);
    assert_eq!(
        String::from_utf8_lossy(&refused.get_output().stderr),
        format!(
            "error: {} and {} are traces of one process (pid {} on {}): a copy? Its rows would \
             be in the dataset twice; move one aside\n",
            a.display(),
            b.display(),
            header().pid,
            header().host
        )
    );
    assert!(!out.exists());
    std::fs::remove_file(&b).unwrap();
    export(&job, &out, &[]).success();
}

/// The words of a list column's rows.
fn words(rows: &Rows, name: &str) -> Vec<Vec<String>> {
    (rows.column(name))
        .map(|f| match f {
            Field::ListInternal(list) => (list.elements().iter())
                .map(|w| match w {
                    Field::Str(s) => s.clone(),
                    other => panic!("{name}: {other:?} is no text"),
                })
                .collect(),
            Field::Null => Vec::new(),
            other => panic!("{name}: {other:?} is no list"),
        })
        .collect()
}

// A trace whose tracer lost events after the last one written: any object still live may have
// been freed by one of them, as the report says (it leaves them out of the live set it judges).
// Their rows say so, where `free_seq IS NULL` alone would read as a leak; the whole trace's rows
// carry no such flag.
#[test]
fn a_live_row_whose_free_may_be_lost_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let records: Vec<vramtrace_collector::format::Record> = (workload().into_iter())
        .map(|r| match r {
            vramtrace_collector::format::Record::End(mut e) => {
                e.stats.dropped = 5;
                vramtrace_collector::format::Record::End(e)
            }
            other => other,
        })
        .collect();
    let lossy = write_records(dir.path(), "lossy.vtrace", &records);
    let (whole, _) = write_workload(dir.path(), "whole.vtrace");
    for (trace, flagged) in [(&lossy, true), (&whole, false)] {
        let out = dir.path().join(format!("d-{flagged}"));
        export(trace, &out, &[]).success();
        let rows = table(&out, "allocations");
        let live: Vec<bool> = rows.int("free_seq").iter().map(Option::is_none).collect();
        let lost: Vec<bool> = (words(&rows, "flags").iter())
            .map(|w| w.iter().any(|f| f == "free-maybe-lost"))
            .collect();
        assert!(live.iter().any(|&l| l));
        let want: Vec<bool> = live.iter().map(|&l| l && flagged).collect();
        assert_eq!(lost, want, "{}", trace.display());
    }
}

// A job whose rank 3 left no trace: the dataset holds the others, and says which is missing,
// as the report does.
#[test]
fn a_job_missing_a_rank_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job");
    std::fs::create_dir(&job).unwrap();
    let ranks = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/gpu/ranks_gloo");
    for e in std::fs::read_dir(ranks).unwrap() {
        let p = e.unwrap().path();
        if !p.to_string_lossy().contains("rank3") {
            std::fs::copy(&p, job.join(p.file_name().unwrap())).unwrap();
        }
    }
    let out = export(&job, &dir.path().join("data"), &["--json"]).success();
    let said = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    let warning = "INCOMPLETE: rank 3 of 4 has no trace here (a rank that died before its tracer \
                   wrote, or a file not copied): the dataset holds the others";
    assert!(said.contains(&format!("warning: {warning}\n")), "{said}");
    let d: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(d["warnings"], serde_json::json!([warning]));
}

// A trace whose first segments rotation deleted: its last segment's few steps do not show the
// leak of line 42, what the line still holds at the end does, and the `findings` row says the
// growth rests on it (`kept_from`, the first step read) as the report does.
#[test]
fn a_rotated_traces_findings_say_what_the_growth_rests_on() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_segments(dir.path(), "t.vtrace", &training(), 13);
    for f in &files[..files.len() - 1] {
        std::fs::remove_file(f).unwrap();
    }
    let trace = &files[0];
    let report = report_json(trace);
    let e = &report["analysis"]["diagnosis"][0]["evidence"];
    assert_eq!(e["kept_from"], 11, "{e}");
    let out = dir.path().join("data");
    export(trace, &out, &[]).success();
    let f = table(&out, "findings");
    assert_eq!(f.text("label")[0].as_deref(), Some("train.py:42 in step"));
    assert_eq!(f.int("kept_from")[0], Some(11));
    assert_eq!(f.int("alerted_at_step")[0], None);
    assert_eq!(f.real("rate")[0], e["rate"].as_f64());
    // Step 11 began before the snapshot the reading starts from: no row says it began at the
    // first event read (it had one, with that event's sequence number, time and bytes).
    let steps = table(&out, "steps");
    assert_eq!(steps.int("step"), [Some(12)]);
}
