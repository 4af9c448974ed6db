//! The rank table: one row per trace of a job (rank, host, pid, live at the end, peak, growth
//! and its first cause, orphans, failures), the trace farthest from the median first and named
//! in a headline, the traces that differ from the others marked. Printed by `report` of several
//! traces and by `diff --rank`.

use std::io::{self, Write};

use vramtrace_collector::analysis::{Analysis, FindingClass, LineMeaning, Severity};
use vramtrace_collector::compare::{growth_unit, main_script, unit_converter};
use vramtrace_collector::compare::{RankCause, RankInput, RankRow, RunTotals};

use crate::load::inputs::Run;
use crate::render::findings::site_label;
use crate::render::tables::{emit, table};
use crate::render::units::{bytes, signed_bytes};

/// What the rank table needs of a run, with its `analysis` labelled (the report's).
pub fn rank_input(run: &Run, analysis: &Analysis) -> RankInput {
    let t = &run.trace;
    let per_unit = unit_converter(&analysis.growth);
    let diagnosis = &analysis.diagnosis;
    let first_cause = (diagnosis.iter())
        .find(|f| f.class == FindingClass::SteadyGrowth)
        .map(|f| RankCause {
            site: f.site.as_ref().map_or_else(String::new, site_label),
            rate: per_unit(f.evidence.rate.unwrap_or(0.0)),
            line_means: f.evidence.line_means.unwrap_or(LineMeaning::Keeps),
        });
    let findings = (diagnosis.iter())
        .filter(|f| f.severity != Severity::Note)
        .map(|f| match &f.site {
            Some(s) => format!("{} at {}", f.class.name(), site_label(s)),
            None => f.class.name().to_string(),
        })
        .collect();
    RankInput {
        path: t.path.display().to_string(),
        rank: t.header.rank,
        host: t.header.host.clone(),
        pid: t.header.pid,
        unit: growth_unit(&analysis.growth),
        step_source: analysis.steps.source,
        totals: RunTotals::of(&t.state, analysis, &run.tally),
        first_cause,
        findings,
        gaps: t.gaps(),
        program: program_of(
            &t.header.command_line,
            main_script(t.state.python_stacks(), &run.tally),
        ),
    }
}

/// The program a trace ran, by file name: its Python main script (from its Python stacks, so a
/// launcher's `runpy` is not it), else the executable of a command that is no Python
/// interpreter; `None` for a Python program whose stacks the trace lacks.
pub fn program_of(command_line: &[String], main_script: Option<String>) -> Option<String> {
    let name = |p: &str| vramtrace_collector::units::base_name(p).to_string();
    if let Some(script) = main_script {
        return Some(name(&script));
    }
    let first = name(command_line.first()?);
    (!first.starts_with("python")).then_some(first)
}

/// A trace's place in its job: `RANK`, `LOCAL_RANK` and `WORLD_SIZE`, as its header has them.
pub type JobPlace = (Option<i32>, Option<i32>, Option<i32>);

/// The ranks of the job the traces name that none of them has: a rank that died before its
/// tracer wrote a file, or a file not copied. Of a job on one machine (each trace's rank its
/// local rank), every rank below the world size (`WORLD_SIZE`); of a job on several, whose
/// machines may each keep their own ranks' traces, the ranks between the lowest and the highest
/// here. Nothing where the traces name no world size, or disagree on it (several jobs).
pub fn missing_ranks(traces: &[JobPlace]) -> Vec<i32> {
    let mut sizes = traces.iter().filter_map(|t| t.2);
    let Some(world) = sizes.next().filter(|w| sizes.all(|s| s == *w)) else {
        return Vec::new();
    };
    let ranks: Vec<i32> = traces.iter().filter_map(|t| t.0).collect();
    let one_machine = traces.iter().all(|t| t.0 == t.1);
    let span = match (one_machine, ranks.iter().min(), ranks.iter().max()) {
        (true, _, _) => 0..world,
        (false, Some(&lo), Some(&hi)) => lo..hi + 1,
        _ => 0..0,
    };
    span.filter(|r| !ranks.contains(r)).collect()
}

/// The missing ranks in words: `rank 3 of 4 has no trace here`.
pub fn missing_words(traces: &[JobPlace]) -> Option<String> {
    let missing = missing_ranks(traces);
    let world = traces.iter().find_map(|t| t.2)?;
    let list: Vec<String> = missing.iter().map(i32::to_string).collect();
    match missing[..] {
        [] => None,
        [_] => Some(format!("rank {} of {world} has no trace here", list[0])),
        _ => Some(format!(
            "ranks {} of {world} have no trace here",
            list.join(", ")
        )),
    }
}

/// `rank 3`, or `pid 4242` for a trace without a rank.
pub fn who(rank: Option<i32>, pid: u32) -> String {
    match rank {
        Some(r) => format!("rank {r}"),
        None => format!("pid {pid}"),
    }
}

/// A number of the rank table in words.
fn amount(metric: &str, value: f64, unit: &str) -> String {
    match metric {
        "failures" => format!("{value:.0}"),
        "growth" => format!("{} per {unit}", signed_bytes(value)),
        _ => bytes(value.max(0.0) as u64),
    }
}

fn metric_name(metric: &str) -> &str {
    match metric {
        "live_bytes" => "live at end",
        "peak_bytes" => "peak",
        "orphan_bytes" => "orphaned memory",
        "growth" => "growth",
        "failures" => "failed calls",
        other => other,
    }
}

/// The headline: which trace differs most from the others, and in what; then each trace that
/// does not hold its whole run (its numbers are what could be read).
pub fn headline(rows: &[RankRow]) -> String {
    let mut line = differs_most(rows);
    if let Some(twice) = repeated_ranks(rows.iter().filter_map(|r| r.rank)) {
        line.push_str(&format!("; {twice}"));
    }
    // Traces of several programs side by side are no job's ranks: the table compares programs.
    let mut programs: Vec<&str> = rows.iter().filter_map(|r| r.program.as_deref()).collect();
    programs.sort_unstable();
    programs.dedup();
    if programs.len() > 1 {
        line.push_str(&format!(
            "; the traces ran {} programs ({}): the table compares programs, not ranks of one job",
            programs.len(),
            programs.join(", ")
        ));
    }
    for r in rows.iter().filter(|r| !r.gaps.is_empty()) {
        line.push_str(&format!(
            "; NOT WHOLE: {}'s trace {}",
            who(r.rank, r.pid),
            r.gaps.join(", and ")
        ));
    }
    line
}

/// Ranks that more than one trace has: a restarted job, or traces of different jobs side by
/// side, in words (`rank 0, 2 in more than one trace (…)`); `None` where each rank is one
/// trace's.
pub fn repeated_ranks(ranks: impl Iterator<Item = i32>) -> Option<String> {
    let twice = ranks_twice(ranks);
    (!twice.is_empty()).then(|| {
        let list: Vec<String> = twice.iter().map(i32::to_string).collect();
        format!(
            "rank {} in more than one trace (a restarted job, or traces of several jobs)",
            list.join(", ")
        )
    })
}

/// The ranks that more than one trace has, in order.
pub fn ranks_twice(ranks: impl Iterator<Item = i32>) -> Vec<i32> {
    let mut ranks: Vec<i32> = ranks.collect();
    ranks.sort_unstable();
    let mut twice: Vec<i32> = (ranks.windows(2))
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    twice.dedup();
    twice
}

/// Which trace differs most from the others, and in what; where the next is as far from the
/// median and no finding of its own tells them apart (two ranks always are), both are named.
fn differs_most(rows: &[RankRow]) -> String {
    if let Some(shared) = shared_growth(rows) {
        return shared;
    }
    // What most traces share is said first: a rank that does not leak where the others do is
    // what differs, not what the job is about.
    let most = majority_growth(rows).map_or(String::new(), |(said, _)| format!("{said}; "));
    let odd = match rows.first() {
        Some(r) if r.distance > 0.0 => {
            let alike = rows.get(1).filter(|n| {
                n.distance == r.distance && n.own_findings.is_empty() == r.own_findings.is_empty()
            });
            let metric = r.differs_in.unwrap_or("live_bytes");
            let unit = r.growth_unit.name();
            // Growth with a cause: the cause first, at its own rate (the line to fix, as the
            // report's verdict names it), then its devices' in all, which a framework's
            // allocator reserving ahead can make larger.
            let cause = match (&r.growth_at, r.cause_growth, metric) {
                (Some(site), Some(rate), "growth") if !site.is_empty() => Some(format!(
                    "first cause {} at {site}{}",
                    amount(metric, rate, unit),
                    asked(r)
                )),
                _ => None,
            };
            // What it has that the others do not, where no growth's cause says it.
            let own = (r.own_findings.first())
                .map_or(String::new(), |f| format!("; its own finding: {f}"));
            match alike {
                Some(n) => format!(
                    "{} and {} differ alike from the median: {} {} and {} against {}",
                    who(r.rank, r.pid),
                    who(n.rank, n.pid),
                    metric_name(metric),
                    amount(metric, r.value, unit),
                    amount(metric, n.value, unit),
                    amount(metric, r.median, unit)
                ),
                None => match cause {
                    Some(cause) => format!(
                        "{} differs most in growth: {cause}; its devices grow {} against a \
                         median of {}",
                        who(r.rank, r.pid),
                        amount(metric, r.value, unit),
                        amount(metric, r.median, unit)
                    ),
                    // Odd by a finding of its own alone: that is what differs, not a number
                    // nearer the median than the table counts.
                    None if r.distance < vramtrace_collector::compare::ODD_DISTANCE
                        && !r.own_findings.is_empty() =>
                    {
                        format!(
                            "{} differs most by a finding the others lack: {}",
                            who(r.rank, r.pid),
                            r.own_findings.join(", ")
                        )
                    }
                    None => format!(
                        "{} differs most: {} {} against a median of {}{own}",
                        who(r.rank, r.pid),
                        metric_name(metric),
                        amount(metric, r.value, unit),
                        amount(metric, r.median, unit)
                    ),
                },
            }
        }
        _ => format!("all {} traces alike", rows.len()),
    };
    format!("{most}{odd}")
}

/// The first cause of steady growth of a trace, where it has one.
fn cause(r: &RankRow) -> Option<&str> {
    match (&r.growth_at, r.cause_growth) {
        (Some(site), Some(_)) if !site.is_empty() => Some(site.as_str()),
        _ => None,
    }
}

/// The rates of `rows`' first causes, in each unit apart (a guessed step may be four of a
/// marked one): `+4.0 MiB/step`, or `+3.9 MiB/step to +4.1 MiB/step`.
fn cause_rates<'a>(rows: impl Iterator<Item = &'a RankRow> + Clone) -> String {
    let mut units: Vec<&str> = rows.clone().map(RankRow::per).collect();
    units.sort_unstable();
    units.dedup();
    units
        .iter()
        .map(|&unit| {
            let rates = rows.clone().filter(|x| x.per() == unit);
            let rates = rates.filter_map(|x| x.cause_growth);
            let (lo, hi) = rates.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
            let (lo, hi) = (signed_bytes(lo), signed_bytes(hi));
            match lo == hi {
                true => format!("{lo}/{unit}"),
                false => format!("{lo}/{unit} to {hi}/{unit}"),
            }
        })
        .collect::<Vec<_>>()
        .join(" and ")
}

/// More than half of the traces growing with the same first cause while one of them differs
/// (`3 of 4 traces grow alike: first cause +1.0 MiB/step at …`), and that cause's place; `None`
/// where no cause is most traces'.
pub fn majority_growth(rows: &[RankRow]) -> Option<(String, String)> {
    let mut sites: Vec<&str> = rows.iter().filter_map(cause).collect();
    sites.sort_unstable();
    let (site, n) = (sites.chunk_by(|a, b| a == b))
        .map(|g| (g[0], g.len()))
        .max_by_key(|&(_, n)| n)?;
    if 2 * n <= rows.len() {
        return None;
    }
    let alike = rows.iter().filter(|r| cause(r) == Some(site));
    let first = alike.clone().next()?;
    let who = match n == rows.len() {
        true => format!("all {n} traces grow"),
        false => format!("{n} of {} traces grow alike", rows.len()),
    };
    Some((
        format!(
            "{who}: first cause {} at {site}{}",
            cause_rates(alike),
            asked(first)
        ),
        site.to_string(),
    ))
}

/// Traces alike, each growing at the same place (every rank of a data-parallel job leaking the
/// same way): the cause is the answer, said once for all (`all 4 traces alike, each growing:
/// first cause +4.0 MiB/step at train.py:47 in <module> (PyTorch tensors)`), before which of
/// them is a little farther from the median. `None` where a trace is odd, or one does not grow
/// there.
pub fn shared_growth(rows: &[RankRow]) -> Option<String> {
    let r = rows.first()?;
    let alike = rows.len() > 1
        && !rows.iter().any(|x| x.odd)
        && cause(r).is_some()
        && rows.iter().all(|x| cause(x) == cause(r));
    if !alike {
        return None;
    }
    let site = cause(r).unwrap_or_default();
    Some(format!(
        "all {} traces alike, each growing: first cause {} at {site}{}",
        rows.len(),
        cause_rates(rows.iter()),
        asked(r)
    ))
}

/// What makes a row odd, in a word or two; empty for a trace like the others.
fn differs(r: &RankRow) -> String {
    if !r.odd {
        String::new()
    } else if !r.gaps.is_empty() {
        "not whole".to_string()
    } else if r.distance >= vramtrace_collector::compare::ODD_DISTANCE {
        metric_name(r.differs_in.unwrap_or("live_bytes")).to_string()
    } else {
        "own finding".to_string()
    }
}

/// The first cause: its own rate (the growth column is the devices' in all) and its place.
pub(crate) fn first_cause(r: &RankRow) -> String {
    match (&r.growth_at, r.cause_growth) {
        (Some(site), Some(rate)) if !site.is_empty() => {
            format!("{}/{} at {site}{}", signed_bytes(rate), r.per(), asked(r))
        }
        (Some(site), _) => site.clone(),
        _ => String::new(),
    }
}

/// Said after a first cause whose line is where a framework's allocator asked the driver for
/// memory, as the report's verdict says it: what keeps the memory may be another line.
pub(crate) fn asked(r: &RankRow) -> &'static str {
    match r.cause_line_means {
        Some(LineMeaning::Asked) => " (where the allocator asked the driver for memory)",
        _ => "",
    }
}

/// Writes the rank table under its headline.
pub fn render(out: &mut impl Write, rows: &[RankRow]) -> io::Result<()> {
    let headers = [
        "#",
        "rank",
        "host",
        "pid",
        "live at end",
        "peak",
        "growth",
        "first cause",
        "orphans",
        "failures",
        "distance",
        "differs",
        "trace",
    ];
    let mut t = table(&headers, &[0, 1, 3, 4, 5, 6, 8, 9, 10]);
    for (i, r) in rows.iter().enumerate() {
        t.add_row(vec![
            (i + 1).to_string(),
            r.rank.map_or("-".to_string(), |x| x.to_string()),
            r.host.clone(),
            r.pid.to_string(),
            bytes(r.live_bytes),
            bytes(r.peak_bytes),
            format!("{}/{}", signed_bytes(r.growth), r.per()),
            first_cause(r),
            // How many, and the device memory they hold (a registration holds none).
            format!("{} ({})", r.orphans, bytes(r.orphan_bytes)),
            r.failures.to_string(),
            format!("{:.2}", r.distance),
            differs(r),
            r.path.clone(),
        ]);
    }
    let title = format!("Ranks ({} traces): {}", rows.len(), headline(rows));
    emit(out, &title, &t)?;
    writeln!(out, "  {}", distance_means(rows.first().map(RankRow::per)))
}

/// What the distance column is.
fn distance_means(unit: Option<&str>) -> String {
    use vramtrace_collector::compare::{FAILURES_FLOOR, GROWTH_FLOOR, MEMORY_FLOOR, ODD_DISTANCE};
    format!(
        "distance: the largest gap between a trace's number and the traces' median, in units \
         of the median (or of {}, {} per {} or {} failed call, where the median is less); {:.2} \
         or more differs",
        bytes(MEMORY_FLOOR as u64),
        bytes(GROWTH_FLOOR as u64),
        unit.unwrap_or("step"),
        FAILURES_FLOOR,
        ODD_DISTANCE
    )
}
