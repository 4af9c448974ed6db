//! Finding the traces a run wrote and summarising each.
//!
//! Every traced process (the program, its forks, what it execs) writes its own file, named by the
//! output pattern (`%p` the pid, `%r` the rank, `%h` the host, `%t` the start time). A process
//! whose name was taken writes beside it with a tag before the extension (`run.4242.vtrace`,
//! `t-42.1.vtrace`: the tracer never replaces a file). The run's traces are the files in the
//! output directory matching the pattern, tagged or not, that are new, or changed, since the run
//! started, and written by one of the run's processes (those that reported in to its status
//! directory): another job sharing the directory writes there too.

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use vramtrace_collector::analysis::GrowthConfig;
use vramtrace_collector::format::{trace_of, Series};
use vramtrace_collector::live::{Accounting, LiveState};
use vramtrace_collector::symbols::{frames_label, Attribution, CallRef, Granularity, Symbolizer};
use vramtrace_collector::units::pattern::NamePattern;

use super::status::Unseen;
use super::Ran;
use rayon::prelude::*;

use crate::load::ReadFrom;
use crate::render::units::{bytes, count};
use crate::report::Report;

/// Call sites listed per trace in the summary.
const SUMMARY_SITES: usize = 5;

/// An output path pattern such as `/tmp/job-%p.vtrace`: its directory, and the names the
/// tracer gives files there ([`NamePattern`]).
#[derive(Clone, Debug)]
pub struct OutputPattern {
    dir: PathBuf,
    name: NamePattern,
}

/// What the matching files looked like before the run: (modified, length).
pub type Snapshot = HashMap<PathBuf, (Option<SystemTime>, u64)>;

impl OutputPattern {
    /// The pattern of an absolute output path.
    pub fn new(path: &Path) -> Self {
        OutputPattern {
            dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
            name: NamePattern::new(path.file_name().unwrap_or_default()),
        }
    }

    /// The matching files now, with their modification time and length.
    pub fn snapshot(&self) -> Snapshot {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Snapshot::new();
        };
        entries
            .filter_map(Result::ok)
            .filter(|e| self.name.matches(&e.file_name()))
            .filter_map(|e| {
                let meta = e.metadata().ok()?;
                meta.is_file()
                    .then(|| (e.path(), (meta.modified().ok(), meta.len())))
            })
            .collect()
    }

    /// The traces whose files are new or changed since `before`, oldest first (a trace cut
    /// into segments once, by its first segment there).
    pub fn written_since(&self, before: &Snapshot) -> Vec<PathBuf> {
        let mut found: Vec<(Option<SystemTime>, PathBuf)> = self
            .snapshot()
            .into_iter()
            .filter(|(path, now)| before.get(path) != Some(now))
            .map(|(path, (modified, _))| (modified, path))
            .collect();
        found.sort();
        crate::load::inputs::one_per_trace(found.into_iter().map(|(_, p)| p).collect())
    }
}

/// Says the traces other processes wrote where the run's go while it ran, left out of it.
pub fn say_others(out: &mut impl Write, ran: &Ran) -> io::Result<()> {
    let Some(first) = ran.others.first() else {
        return Ok(());
    };
    let more = match ran.others.len() {
        1 => String::new(),
        n => format!(" and {} more", n - 1),
    };
    writeln!(
        out,
        "vramtrace: left out {}{more}: written meanwhile by a process this run did not start",
        first.display()
    )
}

/// Traces summarized one by one after a run; the others are counted.
const SUMMARIZED: usize = 8;

/// Prints a short summary of each trace the run wrote (the first [`SUMMARIZED`]), and of each
/// process it did not see.
pub fn summarize(out: &mut impl Write, ran: &Ran) -> io::Result<()> {
    say_others(out, ran)?;
    let unseen = unseen(ran);
    let disabled = ran.reported.as_ref().map_or(0, |r| r.disabled().count());
    if ran.traces.is_empty() && unseen.len() == disabled {
        return writeln!(out, "vramtrace: {}", why_no_trace(ran));
    }
    // A job of many processes gets the first few and a count, not a screen per process.
    let shown = ran.traces.len().min(SUMMARIZED);
    // Read side by side (a job's ranks), said in the run's order.
    let group = indicatif::MultiProgress::new();
    let summaries: Vec<(Vec<u8>, Option<i32>)> = ran.traces[..shown]
        .par_iter()
        .map(|path| {
            let mut text = Vec::new();
            let signal = summarize_one(&mut text, path, ran, &group).unwrap_or(None);
            (text, signal)
        })
        .collect();
    let mut signalled = None;
    for (text, signal) in summaries {
        out.write_all(&text)?;
        signalled = signalled.or(signal);
    }
    // The program died of the signal the tracer sent on its alert: said, since its exit code
    // alone reads as a crash.
    if let Some(signal) = signalled {
        writeln!(
            out,
            "vramtrace: the program was ended by {}, which the tracer sent on its alert \
             (VRAMTRACE_ALERT_SIGNAL) and the program did not handle: give it a handler (to save \
             a checkpoint), or leave the variable unset",
            crate::render::findings::signal_name(signal).unwrap_or("its signal")
        )?;
    }
    if ran.traces.len() > shown {
        let rest = &ran.traces[shown..];
        let dirs: std::collections::BTreeSet<_> = rest.iter().filter_map(|p| p.parent()).collect();
        let place = match dirs.iter().next() {
            Some(dir) if dirs.len() == 1 => dir.display().to_string(),
            _ => "TRACES".to_string(),
        };
        let noun = if rest.len() == 1 { "trace" } else { "traces" };
        writeln!(
            out,
            "vramtrace: and {} more {noun} (vramtrace report {place} ranks every trace)",
            rest.len()
        )?;
    }
    for line in unseen {
        writeln!(out, "vramtrace: {line}")?;
    }
    Ok(())
}

/// Writes the summary of the trace at `path` (the first lines of its report: how it ended, its
/// verdict, what it holds, the command that says more); returns the signal of the tracer's
/// alert that ended the program, when one did.
fn summarize_one(
    out: &mut Vec<u8>,
    path: &Path,
    ran: &Ran,
    group: &indicatif::MultiProgress,
) -> io::Result<Option<i32>> {
    // The end of a trace cut into segments is its last segment's: only that segment is read,
    // so the summary comes in a second or so however long the run was.
    let progress = crate::load::Progress::in_group(group, path, "summarizing");
    let read = crate::load::load_with_steps_observing(
        path,
        ReadFrom::Last(0),
        GrowthConfig::default(),
        &progress,
        |_| (),
    );
    drop(progress);
    let trace = match read {
        Ok((trace, ())) => trace,
        Err(e) => {
            writeln!(out, "vramtrace: {e:#}")?;
            return Ok(None);
        }
    };
    let state = &trace.state;
    let events = state
        .stats()
        .map_or(state.events(), |s| s.events.max(state.events()));
    let lost = match state.lost_events() {
        0 => String::new(),
        n => format!(", {n} lost"),
    };
    let ended = (state.end()).map_or(String::new(), |e| {
        format!(" (the process ended: {})", e.reason)
    });
    // Named as the trace: the name every command reads it by, whichever segments are left.
    let name = trace_of(path);
    writeln!(
        out,
        "vramtrace: {}: pid {}, {}{lost}, {}{ended}",
        name.display(),
        trace.header.pid,
        count(events, "event"),
        trace.ending.describe()
    )?;
    let cut = trace.segments.as_ref().filter(|f| f.is_cut());
    if let Some(f) = cut {
        let deleted = f.removed.as_ref().map_or(String::new(), |r| {
            let first = match r.segments {
                1 => "segment".to_string(),
                n => format!("{n} segments"),
            };
            format!(
                "; rotation (VRAMTRACE_MAX_BYTES) deleted the first {first} ({})",
                count(r.events, "event")
            )
        });
        // The trace's own name may be gone with its first segment: the files there are named,
        // and the name above still reads them.
        let first_file = path.file_name().unwrap_or_default().to_string_lossy();
        writeln!(
            out,
            "  in segments {}-{} on disk (files from {first_file}; every command reads them by \
             the name above){deleted}",
            f.first_there, f.last_there
        )?;
    }
    if ran.reported.as_ref().is_some_and(|r| r.was_cut(path)) {
        writeln!(
            out,
            "  writing it failed part way (the warning above says why): it stops early"
        )?;
    }
    let mut symbols = crate::load::thread_symbolizer();
    let report = Report::new(&trace, 1, Granularity::Site, &mut symbols);
    crate::load::keep_symbolizer(symbols);
    // Growth over the last segment's few steps is not judged: the verdict may then lack a
    // growth the whole trace shows, and says where it is judged.
    let a = &report.analysis;
    let samples = (a.growth.holders.iter())
        .filter(|h| matches!(h.holder, vramtrace_collector::live::Holder::Device { .. }))
        .map(|h| h.course.samples)
        .max()
        .unwrap_or(0);
    let of = match cut {
        Some(f) if a.steps.from_step.is_some() && samples < a.growth.min_samples => format!(
            "(of segment {}, the last: too few steps in it to judge growth, which `vramtrace \
             report` judges over the {} segments on disk) ",
            f.last_there,
            f.last_there - f.first_there + 1
        ),
        // The earlier segments on disk may hold what the last does not (a failure, growth
        // that stopped): said, so that "no finding" is not read as the whole run's.
        Some(f) if f.last_there > f.first_there => format!(
            "(of segment {}, the last; `vramtrace report` reads the {} segments on disk) ",
            f.last_there,
            f.last_there - f.first_there + 1
        ),
        Some(f) => format!("(of segment {}, the last) ", f.last_there),
        None => String::new(),
    };
    let verdict =
        crate::render::findings::diagnosis::verdict(&report.analysis, &report.gaps(), false);
    writeln!(out, "  verdict  {of}{verdict}")?;
    let signalled = (report.analysis.alerts.iter())
        .map(|r| r.alert.signal)
        .find(|&s| s != 0 && i32::from(ran.exit_code) == 128 + s);
    summarize_live(out, state)?;
    writeln!(out, "  next     vramtrace report {}", name.display())?;
    Ok(signalled)
}

/// What the run's traces do not show, one line per process: those that ran untraced (their
/// trace could not be written, or tracing was off), and traces that are gone.
pub fn unseen(ran: &Ran) -> Vec<String> {
    let left = (!ran.left_running.is_empty()).then(|| {
        format!(
            "{} still running after the command exited: what it traces is not whole yet, so what it \
             holds is not known (wait for it in the command, or check its trace once it \
             ends: vramtrace report --fail-on growth TRACE)",
            super::leftover::processes(&ran.left_running)
        )
    });
    let Some(r) = &ran.reported else {
        return left.into_iter().collect();
    };
    let untraced = r
        .untraced()
        .map(|(p, why)| format!("pid {} ran untraced: {why}", p.pid));
    let disabled = r
        .disabled()
        .map(|p| format!("pid {} ran untraced: VRAMTRACE_DISABLE is set", p.pid));
    let exec = r.exec_unseen().map(|(p, program, why)| match why {
        Unseen::NoTracer => format!(
            "pid {} ran {} untraced: the environment it was given no longer preloads the \
             tracer (LD_PRELOAD); keep LD_PRELOAD in what a launcher passes on",
            p.pid,
            program.display()
        ),
        Unseen::OtherSettings => format!(
            "pid {} ran {} unseen by this run: the environment it was given preloads the \
             tracer but no longer names the run ({}), so its trace went where its own \
             settings say; keep the VRAMTRACE_* variables in what a launcher passes on",
            p.pid,
            program.display(),
            super::status::RUN_STATUS
        ),
    });
    // A trace cut into segments loses its first files to rotation: it is gone only when no
    // segment of that process is left either.
    let rotated = |pid: u32, t: &Path| {
        Series::find(t).is_ok_and(|s| s.files.iter().any(|f| f.header.pid == pid))
    };
    let gone = (r.traces()).filter(|(p, t)| !t.is_file() && !rotated(p.pid, t));
    let gone = gone.map(|(p, t)| {
        format!(
            "pid {}: its trace {} is gone (moved or deleted while the program ran)",
            p.pid,
            t.display()
        )
    });
    (left.into_iter())
        .chain(untraced)
        .chain(disabled)
        .chain(exec)
        .chain(gone)
        .collect()
}

/// Why a run wrote no trace, when every process it saw ran traced.
pub fn why_no_trace(ran: &Ran) -> String {
    const NOT_LOADED: &str = "the tracer library was not loaded (no trace written): the loader \
        ignores LD_PRELOAD for setuid programs and static binaries, and says on stderr when it \
        cannot load a library";
    let reported = ran.reported.as_ref();
    let why =
        match reported {
            // An image with tracing off says more than one that saw no call before it exec'd.
            Some(r) if r.disabled().next().is_some() => {
                "tracing was off: VRAMTRACE_DISABLE is set (no trace written)"
            }
            Some(r) if r.tracing() > 0 => "the program made no GPU memory call (no trace written)",
            // No process reported in: a library that is not the tracer is the reason.
            _ if ran.not_tracer.is_some() => {
                return format!(
                "the tracer library was not loaded (no trace written): {} is not the tracer (no \
                 shared object exporting vramtrace_mark_step): give libvramtrace.so to --lib",
                ran.not_tracer.as_ref().map_or(String::new(), |l| l.display().to_string())
            );
            }
            Some(_) => NOT_LOADED,
            None => {
                "no trace was written: the program made no GPU memory call, or the tracer library \
             was not loaded (setuid programs and static binaries ignore LD_PRELOAD)"
            }
        };
    why.to_string()
}

fn summarize_live(out: &mut impl Write, state: &LiveState) -> io::Result<()> {
    let summary = state.summary();
    writeln!(
        out,
        "  live device memory at the end: {} in {}",
        bytes(summary.device_memory.bytes),
        count(summary.device_memory.count, "object")
    )?;
    let sites = state.by_call_site();
    let device_sites: Vec<_> = sites.iter().filter(|s| s.bytes > 0).collect();
    // Named as the report names them (the one rule, from the binaries' symbols).
    let mut symbols = Symbolizer::from_env();
    let mut naming = Attribution::of_state(state, &mut symbols);
    for s in device_sites.iter().take(SUMMARY_SITES) {
        let call = CallRef {
            caller: s.caller,
            stack: s.stack,
            py_stack: s.py_stack,
        };
        let place = frames_label(&naming.stack(call)).unwrap_or_else(|| s.site.clone());
        writeln!(
            out,
            "    {:>10}  {:>13}  {:<24} {place} ({})",
            bytes(s.bytes),
            count(s.count, "object"),
            s.api.name(),
            s.module_name.as_deref().unwrap_or("unknown")
        )?;
    }
    let orphans = state
        .orphans()
        .filter(|o| o.category.accounting() == Accounting::Device)
        .count();
    if orphans > 0 {
        let orphans = count(orphans as u64, "orphaned object");
        writeln!(out, "  {orphans}: see `vramtrace report`")?;
    }
    // A run that ran out of memory says so first thing after it (the report's post-mortem).
    let failures = state.failures();
    let oom = failures.iter().find(|f| f.out_of_memory);
    if let Some(first) = oom {
        let kept = failures.iter().filter(|f| f.out_of_memory).count() as u64;
        let more = match failures.omitted() {
            0 => String::new(),
            _ => " or more".to_string(),
        };
        writeln!(
            out,
            "  out of memory: {}{more}, the first asking {} on device {} with {} live: see \
             `vramtrace report` (or `vramtrace replay TRACE --at oom`)",
            count(kept, "failure"),
            bytes(first.request_bytes),
            first.device,
            bytes(first.live_device_bytes)
        )?;
    }
    Ok(())
}
