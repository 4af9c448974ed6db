//! `export --format parquet`: a trace, or a directory of them (one per rank or process), as a
//! Parquet dataset for DuckDB, Spark, pandas and pyarrow — one dataset per table, partitioned
//! Hive-style by run and rank (`allocations/run=job/rank=3/t-4242.parquet`). The tables and
//! their columns are `docs/data.md`'s; every file says in its metadata which run, host, process
//! and versions it came from.
//!
//! The dataset is written under a temporary name beside the output directory and takes its
//! name only once complete: a failed export leaves nothing behind. An existing output that is
//! not an empty directory is replaced only with `--force`.

mod allocations;
mod column;
mod communicators;
mod encode;
mod failures;
mod findings;
mod names;
mod output;
mod sites;
mod steps;
pub(crate) mod table;
mod tensors;
mod trace;
mod traces;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use indicatif::MultiProgress;
use rayon::prelude::*;
use serde::Serialize;
use std::io::Write;
use vramtrace_collector::analysis::GrowthConfig;
use vramtrace_collector::format::{trace_of, SegmentFile};

use self::output::Staged;
use self::trace::{Place, Rows};
use crate::load::Progress;
use crate::render::units::count;

/// What to export, and where.
pub struct Job<'a> {
    /// Traces, or directories of them.
    pub inputs: &'a [PathBuf],
    /// The dataset's directory.
    pub output: &'a Path,
    /// The run's name (`--run`).
    pub run: Option<&'a str>,
    /// Replace what is at `output` (`--force`).
    pub force: bool,
    /// The growth analysis's settings, for the `findings` table.
    pub growth: GrowthConfig,
    /// Print what was written as JSON on standard output (`--json`).
    pub json: bool,
}

/// What `--json` prints (docs/data.md).
#[derive(Serialize)]
struct Written<'a> {
    output: String,
    run: &'a str,
    seconds: f64,
    /// What the dataset leaves out of the input besides each trace's own (traces in
    /// subdirectories of the directory given).
    warnings: Vec<String>,
    traces: &'a [Rows],
}

/// Runs `vramtrace export --format parquet`.
pub fn run(job: &Job<'_>) -> Result<()> {
    let started = Instant::now();
    let traces = crate::load::inputs::expand(job.inputs)?;
    let run = match job.run {
        Some(name) => partition_value(name)?,
        None => default_run(job.inputs)?,
    };
    one_file_per_process(&traces)?;
    let inputs = crate::load::inputs::files_of(&traces);
    let staged = Staged::claim(job.output, job.force, &inputs)?;
    let group = MultiProgress::new();
    let files = file_names(&traces);
    let rows: Vec<Rows> = traces
        .par_iter()
        .zip(files)
        .map(|(path, file)| {
            let place = Place {
                root: staged.path().to_path_buf(),
                run: run.clone(),
                file,
            };
            let progress = Progress::in_group(&group, path, "exporting");
            // Its errors name the trace, or the file they could not write.
            trace::export(path, &place, job.growth, &progress)
        })
        .collect::<Result<_>>()?;
    staged.commit()?;
    for warning in rows.iter().flat_map(|r| &r.warnings) {
        say!("warning: {warning}");
    }
    // Two jobs' ranks (or a restarted job's) under one run: a query by rank adds them up.
    let ranks = || rows.iter().filter_map(|r| r.rank);
    let repeated = crate::ranks::repeated_ranks(ranks()).map(|r| {
        let partitions: Vec<String> = (crate::ranks::ranks_twice(ranks()).iter())
            .map(|n| format!("rank={n}"))
            .collect();
        let share = match partitions.len() {
            1 => "the partition",
            _ => "the partitions",
        };
        format!(
            "{r}: their rows share {share} {} of run {run}, and a query by rank adds them \
             together (tell them apart by pid, or export each job on its own with --run)",
            partitions.join(", ")
        )
    });
    if let Some(warning) = &repeated {
        say!("warning: {warning}");
    }
    // A rank of the job that no trace has: a query over the ranks (a median, the odd rank) is
    // over those here, as the report says it.
    let jobs: Vec<crate::ranks::JobPlace> = rows.iter().map(|r| r.job).collect();
    let missing = crate::ranks::missing_words(&jobs).map(|m| {
        format!(
            "INCOMPLETE: {m} (a rank that died before its tracer wrote, or a file not copied): \
             the dataset holds the others"
        )
    });
    if let Some(warning) = &missing {
        say!("warning: {warning}");
    }
    if job.json {
        let written = Written {
            output: job.output.display().to_string(),
            run: &run,
            seconds: started.elapsed().as_secs_f64(),
            warnings: (job.inputs.iter())
                .filter(|i| i.is_dir())
                .filter_map(|i| crate::load::inputs::unread_below(i))
                .chain(repeated)
                .chain(missing)
                .collect(),
            traces: &rows,
        };
        // A reader that leaves early (`| head`) is no failure: the dataset is written.
        let mut out = crate::output::reader_gone::stdout();
        serde_json::to_writer_pretty(&mut out, &written)
            .map_err(std::io::Error::from)
            .context("writing the JSON")?;
        writeln!(out).context("writing the JSON")?;
        out.flush().context("writing the JSON")?;
    }
    let sum = |f: fn(&Rows) -> u64, noun: &str| count(rows.iter().map(f).sum::<u64>(), noun);
    say!(
        "wrote {} (run {run}, {}: {} as {} ({} live at the end), {}, {}, {}, {}, {}, {}, {}) in {:.2} s",
        job.output.display(),
        count(rows.len() as u64, "trace"),
        sum(|r| r.events, "event"),
        sum(|r| r.allocations, "allocation"),
        rows.iter().map(|r| r.live).sum::<u64>(),
        sum(|r| r.sites, "site"),
        sum(|r| r.steps, "step"),
        sum(|r| r.samples, "sample"),
        sum(|r| r.communicators, "communicator"),
        sum(|r| r.failures, "failure"),
        sum(|r| r.tensors, "tensor"),
        sum(|r| r.findings, "finding"),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Refuses two traces of one process (a copy of a trace beside it): its rows would be in the
/// dataset twice, under one rank and pid, and every sum over them doubled.
fn one_file_per_process(traces: &[PathBuf]) -> Result<()> {
    let mut seen: Vec<(vramtrace_collector::format::TraceKey, &Path)> = Vec::new();
    for path in traces {
        let Ok(file) = SegmentFile::open(path) else {
            continue;
        };
        let key = file.trace_key();
        if let Some((_, first)) = seen.iter().find(|(k, _)| *k == key) {
            return Err(anyhow!(
                "{} and {} are traces of one process (pid {} on {}): a copy? Its rows would be \
                 in the dataset twice; move one aside",
                first.display(),
                path.display(),
                key.0,
                key.1
            ));
        }
        seen.push((key, path));
    }
    Ok(())
}

/// The run's default name: the directory given, or the trace file's name without `.vtrace`; of
/// several, the directory that holds them all. Any character a partition value cannot hold is
/// `_`.
fn default_run(inputs: &[PathBuf]) -> Result<String> {
    let dir_name = |dir: &Path| {
        (dir.canonicalize().ok())
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
    };
    let name = match inputs {
        [input] if input.is_dir() => dir_name(input),
        [input] => trace_of(input)
            .file_stem()
            .map(|n| n.to_string_lossy().into_owned()),
        _ => {
            let parent = |p: &PathBuf| match p.is_dir() {
                true => p.canonicalize().ok(),
                false => (p.canonicalize().ok()).and_then(|c| c.parent().map(Path::to_path_buf)),
            };
            let dirs: Vec<Option<PathBuf>> = inputs.iter().map(parent).collect();
            match dirs.first() {
                Some(Some(first)) if dirs.iter().all(|d| d.as_ref() == Some(first)) => {
                    dir_name(first)
                }
                _ => {
                    return Err(anyhow!(
                        "the traces given are not in one directory: name their run with --run \
                         NAME (its partition, run=NAME/)"
                    ))
                }
            }
        }
    };
    let name: String = name
        .unwrap_or_default()
        .trim_start_matches('.')
        .chars()
        .map(|c| if allowed(c) { c } else { '_' })
        .collect();
    Ok(match name.get(..MAX_RUN) {
        _ if name.is_empty() => "run".to_string(),
        Some(head) => head.to_string(),
        None => name,
    })
}

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// Each trace's file name in its partition: the trace's (the first segment's, for a trace cut
/// into segments, whichever was given), without `.vtrace`; where two traces would share one
/// (a name freed by rotation and taken again), each gets its process id after it, then its
/// place in the list: a file is never written by two traces.
fn file_names(traces: &[PathBuf]) -> Vec<String> {
    // pyarrow, Spark and Hadoop skip files whose names start with '_' or '.' (their own
    // markers): those characters are left off, or a trace would be silently missing there.
    let stem = |p: &Path| {
        let stem = trace_of(p)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned());
        let stem = stem.unwrap_or_default();
        let kept = stem.trim_start_matches(['_', '.']);
        if kept.is_empty() {
            "trace".to_string()
        } else {
            kept.to_string()
        }
    };
    let shared = |names: &[String]| -> Vec<bool> {
        (names.iter())
            .map(|n| names.iter().filter(|m| *m == n).count() > 1)
            .collect()
    };
    let mut names: Vec<String> = traces.iter().map(|p| stem(p)).collect();
    for (i, shared) in shared(&names).into_iter().enumerate() {
        if shared {
            let pid = SegmentFile::open(&traces[i]).map_or(0, |f| f.header.pid);
            names[i] = format!("{}.{pid}", names[i]);
        }
    }
    for (i, shared) in shared(&names).into_iter().enumerate() {
        if shared {
            names[i] = format!("{}.{i}", names[i]);
        }
    }
    names
}

/// The longest run name: `run=NAME` is one path component, which file systems keep under 256
/// bytes.
const MAX_RUN: usize = 200;

/// `name` as a Hive partition value: one path component that every reader takes as written
/// (letters, digits, `.`, `_` and `-`).
fn partition_value(name: &str) -> Result<String> {
    if name.is_empty() || name.starts_with('.') || !name.chars().all(allowed) {
        return Err(anyhow!(
            "--run {name:?}: a run's name is ASCII letters, digits, '.', '_' and '-' (not \
             first '.')"
        ));
    }
    if name.len() > MAX_RUN {
        return Err(anyhow!(
            "--run: a run's name is at most {MAX_RUN} characters (this one has {})",
            name.len()
        ));
    }
    if name == trace::NO_RANK {
        return Err(anyhow!(
            "--run {name:?}: readers take that partition value for null; give the run a name"
        ));
    }
    Ok(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::table::Table;
    use super::*;

    /// docs/data.md's columns of `table`: the backquoted names in the first cell of each row of
    /// the table under its heading, in order.
    fn documented(doc: &str, table: &str) -> Vec<String> {
        let heading = format!("## {table}\n");
        let start = doc
            .find(&heading)
            .unwrap_or_else(|| panic!("no {heading:?}"))
            + heading.len();
        let section = doc[start..].split("\n## ").next().unwrap_or("");
        section
            .lines()
            .filter(|l| l.starts_with("| `"))
            .flat_map(|l| {
                let cell = l.split('|').nth(1).unwrap_or("");
                cell.split(',')
                    .map(|c| c.trim().trim_matches('`').to_string())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn two_traces_never_share_a_file() {
        // Files that cannot be opened keep their own names, and no process id (0).
        let paths = [
            "/none/a/run.vtrace",
            "/none/b/run.vtrace",
            "/none/other.vtrace",
        ];
        let paths: Vec<PathBuf> = paths.iter().map(PathBuf::from).collect();
        assert_eq!(file_names(&paths), ["run.0.0", "run.0.1", "other"]);
    }

    #[test]
    fn no_file_name_starts_as_readers_own_markers_do() {
        // pyarrow and Spark would skip `_rank0.parquet` and `.rank2.parquet` unsaid.
        let paths = [
            "/none/_rank0.vtrace",
            "/none/.rank2.vtrace",
            "/none/_.vtrace",
        ];
        let paths: Vec<PathBuf> = paths.iter().map(PathBuf::from).collect();
        assert_eq!(file_names(&paths), ["rank0", "rank2", "trace"]);
        // Left off, a name another trace has is told apart as any shared name is.
        let paths = ["/none/_a.vtrace", "/none/a.vtrace"];
        let paths: Vec<PathBuf> = paths.iter().map(PathBuf::from).collect();
        assert_eq!(file_names(&paths), ["a.0.0", "a.0.1"]);
    }

    #[test]
    fn a_runs_name_is_one_partition_value_readers_do_not_take_for_null() {
        assert_eq!(partition_value("job-1.a_b").unwrap(), "job-1.a_b");
        for bad in [
            "",
            ".hidden",
            "a b",
            "a/b",
            "a=b",
            "__HIVE_DEFAULT_PARTITION__",
        ] {
            let err = partition_value(bad).unwrap_err().to_string();
            assert!(err.starts_with(&format!("--run {bad:?}: ")), "{err}");
        }
    }

    #[test]
    fn every_table_has_the_columns_docs_data_md_names() {
        let doc = include_str!("../../../../docs/data.md");
        let tables = [
            ("allocations", allocations::Allocations::column_names()),
            ("sites", sites::Sites::column_names()),
            ("steps", steps::Steps::column_names()),
            ("samples", steps::Samples::column_names()),
            (
                "communicators",
                communicators::Communicators::column_names(),
            ),
            ("failures", failures::Failures::column_names()),
            ("tensors", tensors::Tensors::column_names()),
            ("findings", findings::Findings::column_names()),
            ("traces", traces::Traces::column_names()),
        ];
        for (name, columns) in tables {
            assert_eq!(documented(doc, name), columns.unwrap(), "{name}");
        }
    }
}
