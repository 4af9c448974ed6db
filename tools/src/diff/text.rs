//! A comparison as terminal tables: the verdict and the top difference first, then the likely
//! cause when the sources tell one, the totals, the aligned steps, the changed call sites with
//! their stacks (the driver's view) and the changed Python lines of PyTorch's recorder (the
//! per-tensor view; first when it explains the change), and how Python files and lines were
//! matched.

use std::io::{self, Write};

use vramtrace_collector::analysis::{LineMeaning, Role};
use vramtrace_collector::compare::Count;
use vramtrace_collector::compare::LineChangeKind;
use vramtrace_collector::compare::{Check, NewGrowth};
use vramtrace_collector::compare::{
    GrowthUnit, MatchHow, PythonLine, SiteMetrics, SiteStatus, Thresholds,
};
use vramtrace_collector::compare::{LineMapping, PairedBy};
use vramtrace_collector::compare::{StepRow, TopDifference};
use vramtrace_collector::compare::{TensorLine, DRIVER_VIEW_NAME};
use vramtrace_collector::symbols::collapse;
use vramtrace_collector::torch::View;
use vramtrace_collector::units::base_name;

use super::{Comparison, DiffArgs, RunFacts};
use crate::ranks;
use crate::render::tables::{emit, table};
use crate::render::units::{bytes, signed_bytes};
use vramtrace_collector::units::when_full_in;

/// Steps shown at most in the aligned-steps table.
const STEP_ROWS: usize = 12;

fn run_line(f: &RunFacts) -> String {
    let steps = match f.step_source {
        "marks" => format!("{} steps from step marks", f.steps),
        "pattern" => format!("{} steps from a repeating allocation", f.steps),
        _ => "no steps".to_string(),
    };
    let mut who = Vec::new();
    if let Some(pid) = f.pid {
        who.push(format!("pid {pid}"));
    }
    if let Some(rank) = f.rank {
        who.push(format!("rank {rank}"));
    }
    if let Some(host) = &f.host {
        who.push(format!("host {host}"));
    }
    who.push(steps);
    let line = format!("{}  ({})", f.path, who.join(", "));
    match &f.segments {
        Some(s) => format!("{line}\n     segments {s}"),
        None => line,
    }
}

fn signed(n: i64) -> String {
    signed_bytes(n as f64)
}

fn growth(g: f64, unit: GrowthUnit) -> String {
    format!("{}/{}", signed_bytes(g), unit.name())
}

/// B's unit of growth: a step, a guessed step (B's steps come from its allocation pattern: one
/// may be several of the program's, as the report says), or a second.
fn b_unit(unit: GrowthUnit, guessed: bool) -> &'static str {
    match (unit, guessed) {
        (GrowthUnit::Step, true) => "guessed step",
        (u, _) => u.name(),
    }
}

fn check_line(c: &Check) -> String {
    let (change, limit) = match c.metric {
        "failures" | "orphans" | "alerts" => {
            (format!("{:+}", c.change as i64), c.threshold.to_string())
        }
        "growth_per_step" | "tensor_growth_per_step" => (
            format!("{} per step", signed_bytes(c.change)),
            format!("{} per step", bytes(c.threshold as u64)),
        ),
        _ => (signed_bytes(c.change), bytes(c.threshold as u64)),
    };
    let name = match c.metric {
        "live_bytes" => "live at end",
        "peak_bytes" => "peak",
        "growth_per_step" => "growth",
        "orphans" => "orphans",
        "orphan_bytes" => "orphaned memory",
        "tensor_live_bytes" => "tensors live at end",
        "tensor_growth_per_step" => "tensor growth",
        "failures" => "failed calls",
        "alerts" => "tracer alerts",
        other => other,
    };
    format!("{name} {change} (limit {limit})")
}

/// The summary table of a rank-by-rank comparison; `unpaired`, the ranks only one run has.
/// What made the comparison a regression, each in words: the limits B passed, then its new
/// growths.
fn exceeded(c: &Comparison, thresholds: &Thresholds) -> Vec<String> {
    let guessed = c.b.step_source == "pattern";
    let new_growth = (c.diff.verdict.new_growth.iter())
        .filter(|g| g.regression)
        .map(|g| new_growth_line(g, thresholds, guessed));
    (c.diff.verdict.checks.iter())
        .filter(|c| c.exceeded && !c.metric.ends_with("new_growth"))
        .map(check_line)
        .chain(new_growth)
        .collect()
}

pub fn pairs_summary(
    out: &mut impl Write,
    all: &[Comparison],
    unpaired: &[String],
    thresholds: &Thresholds,
) -> io::Result<()> {
    let headers = ["rank", "A", "B", "live at end", "peak", "growth", "verdict"];
    let mut t = table(&headers, &[0, 3, 4, 5]);
    for c in all {
        let d = &c.diff;
        t.add_row(vec![
            c.b.rank.map_or("-".to_string(), |r| r.to_string()),
            c.a.path.clone(),
            c.b.path.clone(),
            signed(d.totals.counts.live_bytes.change),
            signed(d.totals.counts.peak_bytes.change),
            match (d.totals.growth, d.totals.growth_unit) {
                (Some(g), Some(u)) => growth(g.change, u),
                _ => "-".to_string(),
            },
            // A pair with a trace that is not whole has no verdict, whatever it found.
            if !c.gaps().is_empty() {
                "none: not whole"
            } else if d.verdict.regression {
                "REGRESSION"
            } else {
                "ok"
            }
            .to_string(),
        ]);
    }
    let bad: Vec<String> = (all.iter())
        .filter(|c| c.diff.verdict.regression)
        .map(|c| match c.b.rank {
            Some(r) => format!("rank {r}"),
            None => c.b.path.clone(),
        })
        .collect();
    // The set's own verdict, which the exit code is; each pair's below is that pair's alone.
    let gaps: Vec<String> = (unpaired.iter().cloned())
        .chain(all.iter().flat_map(Comparison::gaps))
        .collect();
    if let Some(first) = gaps.first() {
        let more = match gaps.len() {
            1 => String::new(),
            n => format!("; and {} more (named below)", n - 1),
        };
        // What the pairs that could be compared found, which the exit code cannot say.
        let found = match bad.len() {
            0 => String::new(),
            n => format!(
                "; in what could be compared, REGRESSION in {n} of {} pairs ({})",
                all.len(),
                bad.join(", ")
            ),
        };
        writeln!(
            out,
            "VERDICT  none (exit 2): a trace could not be compared in full: {first}{more}{found}"
        )?;
    } else if bad.is_empty() {
        writeln!(out, "VERDICT  no regression (exit 0): {} pairs", all.len())?;
    } else {
        // The worst regressed pair's reason — the pair whose growth, then memory live at the
        // end, rose the most — its new growth where it has one: the line and rate a CI log is
        // read for, not only which pair. Where the pairs differ, the first pair's is not it.
        let worst = (all.iter().filter(|c| c.diff.verdict.regression)).max_by(|x, y| {
            let key = |c: &Comparison| {
                let t = &c.diff.totals;
                (
                    t.growth.map_or(0.0, |g| g.change),
                    t.counts.live_bytes.change,
                )
            };
            let (kx, ky) = (key(x), key(y));
            (kx.0.total_cmp(&ky.0))
                .then(kx.1.cmp(&ky.1))
                // The first pair among equals.
                .then(std::cmp::Ordering::Greater)
        });
        let first = worst.map(|c| {
            let reasons = exceeded(c, thresholds);
            let growth = reasons.iter().find(|r| r.starts_with("new steady growth"));
            let reason = growth.or(reasons.first()).cloned().unwrap_or_default();
            let pair = match c.b.rank {
                Some(r) => format!("rank {r}"),
                None => c.b.path.clone(),
            };
            let which = if bad.len() > 1 { "worst, " } else { "" };
            format!("; {which}{pair}: {reason}")
        });
        let first = first.unwrap_or_default();
        writeln!(
            out,
            "VERDICT  REGRESSION (exit 1): {} of {} pairs ({}){first}",
            bad.len(),
            all.len(),
            bad.join(", ")
        )?;
    }
    let bad = bad.len();
    emit(
        out,
        &format!(
            "Rank by rank ({} pairs, {bad} regressed; each compared below)",
            all.len()
        ),
        &t,
    )?;
    // What is in no pair, each named (the verdict names the first); a pair's own gaps are in
    // its comparison below.
    if !unpaired.is_empty() {
        writeln!(out, "\nNot compared ({})", unpaired.len())?;
        for u in unpaired {
            writeln!(out, "  {u}")?;
        }
    }
    Ok(())
}

/// Writes one comparison; `in_set` when it is one pair of several, whose verdict is not the
/// exit code (the set's, written above the pairs, is).
pub fn render(
    out: &mut impl Write,
    c: &Comparison,
    args: &DiffArgs,
    in_set: bool,
) -> io::Result<()> {
    let exit = |code: u8| {
        if in_set {
            String::new()
        } else {
            format!(" (exit {code})")
        }
    };
    let d = &c.diff;
    // One pair alone opens with its verdict, the line a CI log is read for; a pair of several
    // opens with its runs, the set's verdict being above them all.
    if in_set {
        writeln!(out, "vramtrace diff")?;
        runs(out, c)?;
    }
    let guessed = c.b.step_source == "pattern";
    let exceeded = exceeded(c, &args.thresholds.thresholds());
    let gaps = c.gaps();
    let gap = if in_set { "\n" } else { "" };
    if !gaps.is_empty() {
        writeln!(out, "{gap}VERDICT  none{}: {}", exit(2), gaps.join("; "))?;
        if !exceeded.is_empty() {
            writeln!(out, "  in what could be read: {}", exceeded.join("; "))?;
        }
    } else if exceeded.is_empty() {
        writeln!(out, "{gap}VERDICT  no regression{}", exit(0))?;
    } else {
        writeln!(
            out,
            "{gap}VERDICT  REGRESSION{}: {}",
            exit(1),
            exceeded.join("; ")
        )?;
    }
    if let Some(top) = &d.top {
        // The verdict's own growth is in B's unit, compared or not.
        let named = |g: &&NewGrowth| g.label == top.label || top.kept_at.as_ref() == Some(&g.label);
        let own =
            (d.verdict.new_growth.iter()).find(|g| g.regression && g.view == top.view && named(g));
        let unit = d.totals.growth_unit.or(own.map(|g| g.unit));
        writeln!(
            out,
            "  top difference, view {}: {}",
            top.view_name,
            top_line(top, unit, guessed)
        )?;
    }
    for note in &d.verdict.notes {
        writeln!(out, "  note: {note}")?;
    }
    if !in_set {
        runs(out, c)?;
    }
    // The ranks after the verdict on the one asked for: what a reader acts on comes first.
    if let Some(rows) = &c.ranks {
        ranks::render(out, rows)?;
    }
    suspects(out, c, args)?;
    totals(out, c)?;
    steps(out, &d.steps.rows, d.steps.first_difference)?;
    let tensors_first = d.tensors.as_ref().is_some_and(|t| t.explains);
    if tensors_first {
        tensor_lines(out, c, args)?;
    }
    sites(out, c, args)?;
    if !tensors_first {
        tensor_lines(out, c, args)?;
    }
    files(out, c)
}

/// The two runs compared, one line each.
fn runs(out: &mut impl Write, c: &Comparison) -> io::Result<()> {
    writeln!(out, "  A  {}", run_line(&c.a))?;
    writeln!(out, "  B  {}", run_line(&c.b))
}

/// `new steady growth +1.0 MiB/step at train.py:15 in step (PyTorch tensors): above 64.0 KiB;
/// device full in 1,200 steps (2 min) at this rate alone, within the horizon` (the device's
/// whole growth, in the totals, may fill it sooner).
fn new_growth_line(g: &NewGrowth, t: &Thresholds, guessed: bool) -> String {
    let unit = match g.view {
        View::AllocatorTensors => g.unit.name(),
        View::Driver => b_unit(g.unit, guessed),
    };
    let mut why = Vec::new();
    if g.above_floor {
        why.push(format!("above {}", bytes(t.new_growth)));
    }
    if let (true, Some(full)) = (
        g.within_horizon,
        when_full_in(g.steps_to_full, g.seconds_to_full, unit),
    ) {
        why.push(format!(
            "device full in {full} at this rate alone, within the horizon"
        ));
    }
    let owner = g
        .owner
        .as_ref()
        .map_or(String::new(), |o| format!(" ({o})"));
    format!(
        "new steady growth {}/{unit} at {}{owner}: {}",
        signed_bytes(g.rate),
        g.label,
        why.join("; ")
    )
}

/// `gpt.py:57 in <module> (PyTorch tensors): new, +1.9 GiB live at end, +16.0 MiB/step`.
fn top_line(t: &TopDifference, driver_unit: Option<GrowthUnit>, guessed: bool) -> String {
    let mut parts = vec![status(t.status).to_string()];
    if t.orphans != 0 {
        parts.push(format!(
            "{:+} orphan{} ({} of device memory)",
            t.orphans,
            if t.orphans.abs() == 1 { "" } else { "s" },
            signed(t.orphan_bytes)
        ));
    }
    parts.push(format!("{} live at end", signed(t.live_bytes)));
    if t.growth != 0.0 {
        let unit = match t.view {
            View::AllocatorTensors => Some(GrowthUnit::Step.name()),
            View::Driver => driver_unit.map(|u| b_unit(u, guessed)),
        };
        if let Some(u) = unit {
            parts.push(format!("{}/{u}", signed_bytes(t.growth)));
        }
    }
    if t.guessed {
        parts.push("paired by a guess".to_string());
    }
    let owner = t
        .owner
        .as_ref()
        .map_or(String::new(), |o| format!(" ({o})"));
    let asked = match (t.line_means, &t.kept_at) {
        (LineMeaning::Asked, Some(line)) => format!(
            "; the line where the allocator asked the driver for memory, for the tensors B's \
             recorder finds kept at {line}"
        ),
        (LineMeaning::Asked, None) => "; the line where the allocator asked the driver for \
                                       memory, not necessarily the one whose tensors keep it \
                                       (PyTorch's recorder names that line: vramtrace run)"
            .to_string(),
        (LineMeaning::Keeps, _) => String::new(),
    };
    format!("{}{owner}: {}{asked}", t.label, parts.join(", "))
}

fn suspects(out: &mut impl Write, c: &Comparison, args: &DiffArgs) -> io::Result<()> {
    let d = &c.diff;
    if d.suspects.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "\nLikely cause (a guess from the sources: lines B added in code it ran, and lines in \
         loops of A's that B removed; first those where B holds more, then lines in loops)"
    )?;
    let shown = &d.suspects[..d.suspects.len().min(args.top)];
    for s in shown {
        let where_ = if s.in_loop { ", in a loop" } else { "" };
        let what = match s.kind {
            LineChangeKind::Added => "added in B",
            LineChangeKind::Removed => "removed in B, a line of A",
        };
        writeln!(
            out,
            "  {}:{}  {}   ({what}{where_})",
            base_name(&s.file),
            s.line,
            s.text
        )?;
    }
    let more = d.suspects.len() - shown.len();
    if more > 0 {
        writeln!(
            out,
            "  … and {more} more lines (--top N shows more; --json lists all)"
        )?;
    }
    Ok(())
}

fn totals(out: &mut impl Write, c: &Comparison) -> io::Result<()> {
    let t = &c.diff.totals;
    let (ga, gb) = (c.a.step_source == "pattern", c.b.step_source == "pattern");
    let mut tab = table(&["", "A", "B", "change"], &[1, 2, 3]);
    let b = |x: &Count| vec![bytes(x.a), bytes(x.b), signed(x.change)];
    let n = |x: &Count| vec![x.a.to_string(), x.b.to_string(), format!("{:+}", x.change)];
    let mut row = |name: &str, cells: Vec<String>| {
        let mut r = vec![name.to_string()];
        r.extend(cells);
        tab.add_row(r);
    };
    // A run whose first segments rotation deleted: its peak, failures and allocations there are
    // not known, and not compared (the verdict's note says so for the peak and failures); its
    // numbers are those of what is on disk.
    let (cut_a, cut_b) = (c.a.segments.is_some(), c.b.segments.is_some());
    let partial = |mut cells: Vec<String>| {
        if cut_a || cut_b {
            for (cut, cell) in [(cut_a, 0), (cut_b, 1)] {
                if cut {
                    cells[cell].push_str(" on disk");
                }
            }
            cells[2] = "not compared".to_string();
        }
        cells
    };
    let c = &t.counts;
    row("live at end", b(&c.live_bytes));
    row("live objects", n(&c.live_count));
    row("host memory at end", b(&c.host_bytes));
    row("peak", partial(b(&c.peak_bytes)));
    match (t.growth, t.growth_unit) {
        // Each run's rate in its own unit (a step guessed from its allocation pattern is said
        // so), the change in B's.
        (Some(g), Some(u)) => {
            let in_unit =
                |rate: f64, guessed: bool| format!("{}/{}", signed_bytes(rate), b_unit(u, guessed));
            row(
                "growth",
                vec![in_unit(g.a, ga), in_unit(g.b, gb), in_unit(g.change, gb)],
            )
        }
        _ => row(
            "growth",
            vec!["-".into(), "-".into(), "not comparable".into()],
        ),
    }
    row("allocations", partial(n(&c.allocations)));
    row("allocated", partial(b(&c.allocated_bytes)));
    row("orphans", n(&c.orphans));
    row("orphaned memory", b(&c.orphan_bytes));
    row("failed calls", partial(n(&c.failures)));
    row("out of memory", partial(n(&c.out_of_memory)));
    row("communicators live", n(&t.communicators));
    row("communicator memory", b(&t.communicator_bytes));
    emit(out, "Totals", &tab)
}

/// The rows to show: all of a short run; else the first, the last, the first difference and
/// its neighbours, and evenly spaced ones between.
fn shown_rows(n: usize, first_difference: Option<usize>) -> Vec<usize> {
    if n <= STEP_ROWS {
        return (0..n).collect();
    }
    let mut keep: Vec<usize> = vec![0, 1, n - 2, n - 1];
    if let Some(i) = first_difference {
        keep.extend([i.saturating_sub(1), i, (i + 1).min(n - 1)]);
    }
    let spare = STEP_ROWS.saturating_sub(keep.len()).max(1);
    keep.extend((1..=spare).map(|k| k * (n - 1) / (spare + 1)));
    keep.sort_unstable();
    keep.dedup();
    keep
}

fn steps(out: &mut impl Write, rows: &[StepRow], first: Option<u64>) -> io::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let at = first.and_then(|s| rows.iter().position(|r| r.step == s));
    let mut t = table(&["step", "A", "B", "change"], &[0, 1, 2, 3]);
    let mut last = None;
    for i in shown_rows(rows.len(), at) {
        if last.is_some_and(|l| i > l + 1) {
            t.add_row(vec!["…", "", "", ""]);
        }
        let r = &rows[i];
        t.add_row(vec![
            r.step.to_string(),
            bytes(r.a),
            bytes(r.b),
            signed(r.change),
        ]);
        last = Some(i);
    }
    let title = match first {
        Some(s) => format!(
            "Device memory live as each step begins (step N of A against step N of B, the \
             moment replay --at 'step N' shows): first differs at step {s}, made during step {}",
            s.saturating_sub(1)
        ),
        None => "Device memory live as each step begins (step N of A against step N of B, the \
                 moment replay --at 'step N' shows): the same"
            .to_string(),
    };
    emit(out, &title, &t)
}

fn status(s: SiteStatus) -> &'static str {
    match s {
        SiteStatus::New => "new",
        SiteStatus::Gone => "gone",
        SiteStatus::Grew => "grew",
        SiteStatus::Shrank => "shrank",
        SiteStatus::Changed => "changed",
    }
}

fn held(m: Option<&SiteMetrics>) -> String {
    m.map_or("-".to_string(), |m| bytes(m.live_bytes + m.host_bytes))
}

fn how(how: MatchHow, guessed: bool) -> String {
    if guessed && how == MatchHow::Exact {
        "exact (files guessed)".to_string()
    } else if guessed {
        format!("{} (guess)", how.name())
    } else {
        how.name().to_string()
    }
}

fn lines(l: &[PythonLine]) -> String {
    let mut v: Vec<String> = l.iter().take(3).map(|p| p.to_string()).collect();
    if l.len() > 3 {
        v.push(format!("and {} more", l.len() - 3));
    }
    v.join(", ")
}

fn sites(out: &mut impl Write, c: &Comparison, args: &DiffArgs) -> io::Result<()> {
    let d = &c.diff;
    writeln!(
        out,
        "\nCall sites, view {DRIVER_VIEW_NAME}: {} paired ({} by a guess), {} only in A, {} only \
         in B; {} unchanged, {} changed, at {}",
        d.matched,
        d.guessed,
        d.only_in_a,
        d.only_in_b,
        d.unchanged,
        d.sites.len(),
        crate::render::units::count(d.places.len() as u64, "place")
    )?;
    if d.places.is_empty() {
        return Ok(());
    }
    // Growth compares only in one unit (both runs with steps, or both without), B's.
    let guessed = c.b.step_source == "pattern";
    let unit = (c.diff.totals.growth_unit).map(|u| b_unit(u, guessed));
    let headers = [
        "#",
        "status",
        "live A",
        "live B",
        "change",
        "peak change",
        "growth change",
        "allocations A → B",
        "place",
        "match",
    ];
    let mut t = table(&headers, &[0, 2, 3, 4, 5, 6, 7]);
    let shown = &d.places[..d.places.len().min(args.top)];
    // A place whose new growth is the allocator's segments for the verdict's tensors: its
    // evidence, as the report's `(segments)` rows are, not a cause of its own.
    let segments = |label: &str, owner: Option<&String>| {
        (c.diff.verdict.new_growth.iter()).any(|g| {
            g.role == Role::Segments
                && g.view == View::Driver
                && g.label == label
                && g.owner.as_ref() == owner
        })
    };
    // A place whose NCCL buffers are the same communicators as a new growth named at another
    // place: part of that cause, its rate in the growth's, as the report's related rows are.
    let communicators = |label: &str, owner: Option<&String>| {
        (c.diff.verdict.new_growth.iter()).find(|g| {
            g.view == View::Driver
                && !(g.label == label && g.owner.as_ref() == owner)
                && (g.places.iter()).any(|(l, o)| l == label && o.as_ref() == owner)
        })
    };
    let mut any_segments = false;
    let mut of_growth: Option<&NewGrowth> = None;
    for (i, p) in shown.iter().enumerate() {
        let s = &p.row;
        let of_segments = segments(&s.label, s.place.module.as_ref());
        any_segments |= of_segments;
        let same_cause = communicators(&s.label, s.place.module.as_ref());
        of_growth = of_growth.or(same_cause);
        let state = match (of_segments, same_cause) {
            (true, _) => format!("{} (segments)", status(s.status)),
            (false, Some(_)) => format!("{} (communicators)", status(s.status)),
            (false, None) => status(s.status).to_string(),
        };
        let allocs =
            |m: Option<&SiteMetrics>| m.map_or("-".to_string(), |m| m.allocations.to_string());
        let owner = s.place.module.as_ref();
        let paths = match (owner, p.paths) {
            (Some(o), 1) => format!(" ({o})"),
            (Some(o), n) => format!(" ({o}, {n} native paths)"),
            (None, 1) => String::new(),
            (None, n) => format!(" ({n} native paths)"),
        };
        t.add_row(vec![
            (i + 1).to_string(),
            state,
            held(s.a.as_ref()),
            held(s.b.as_ref()),
            signed(s.change.live_bytes + s.change.host_bytes),
            signed(s.change.peak_bytes),
            unit.map_or("-".to_string(), |u| {
                format!("{}/{u}", signed_bytes(s.change.growth))
            }),
            format!("{} → {}", allocs(s.a.as_ref()), allocs(s.b.as_ref())),
            format!("{}{paths}", s.label),
            how(s.how, s.guessed),
        ]);
    }
    let title = format!(
        "Changed places, view {DRIVER_VIEW_NAME}: the verdict's first, then most changed \
         ({} of {}; a place's native paths summed, --json lists each site)",
        shown.len(),
        d.places.len()
    );
    emit(out, &title, &t)?;
    if let Some(g) = of_growth {
        writeln!(
            out,
            "  (communicators): NCCL's buffers of the same communicators as the new growth at {}: \
             one cause, its rate theirs together",
            g.label
        )?;
    }
    if any_segments {
        writeln!(
            out,
            "  (segments): where the framework's allocator asked the driver for the memory of the \
             verdict's tensors (the tensors' view names the line that keeps them): their \
             evidence, not a growth of its own"
        )?;
    }
    writeln!(
        out,
        "\nStacks, innermost frame first (CUDA-library frames collapsed; --full-stacks shows them)"
    )?;
    for (i, p) in shown.iter().enumerate() {
        let s = &p.row;
        let largest = if p.paths > 1 {
            " (its most changed native path)"
        } else {
            ""
        };
        writeln!(out, "  #{} {}{largest}", i + 1, s.label)?;
        if let Some(a) = &s.a_label {
            writeln!(out, "      (in A: {a})")?;
        }
        let p = &s.place;
        let (pa, pb) = (lines(&p.a_python), lines(&p.b_python));
        let named_by_line = p.a_python.len() <= 1
            && p.b_python.len() <= 1
            && (p.b_python.first().or(p.a_python.first()))
                .is_some_and(|l| l.to_string() == s.label);
        if !named_by_line && (!pa.is_empty() || !pb.is_empty()) {
            let inferred = if p.python_inferred {
                " (some inferred: a thread without Python)"
            } else {
                ""
            };
            writeln!(out, "      Python lines{inferred}: A {pa}; B {pb}")?;
        }
        for line in collapse(&p.frames, args.full_stacks) {
            writeln!(out, "      {line}")?;
        }
    }
    Ok(())
}

/// The per-tensor view: the Python lines whose tensors changed.
fn tensor_lines(out: &mut impl Write, c: &Comparison, args: &DiffArgs) -> io::Result<()> {
    let Some(t) = &c.diff.tensors else {
        return Ok(());
    };
    writeln!(
        out,
        "\nPython lines, view {}: {} live at end in A, {} in B ({}); {} paired ({} by a \
         guess), {} only in A, {} only in B; {} unchanged, {} changed",
        t.view_name,
        bytes(t.a.live_bytes),
        bytes(t.b.live_bytes),
        signed(t.live_bytes.change),
        t.matched,
        t.guessed,
        t.only_in_a,
        t.only_in_b,
        t.unchanged,
        t.lines.len()
    )?;
    if t.lines.is_empty() {
        return Ok(());
    }
    let headers = [
        "#",
        "status",
        "live A",
        "live B",
        "change",
        "tensors A → B",
        "growth A",
        "growth B",
        "line",
        "match",
    ];
    let mut tab = table(&headers, &[0, 2, 3, 4, 5, 6, 7]);
    let shown = &t.lines[..t.lines.len().min(args.top)];
    let live = |l: Option<&TensorLine>| l.map_or("-".to_string(), |l| bytes(l.metrics.live_bytes));
    let count =
        |l: Option<&TensorLine>| l.map_or("-".to_string(), |l| l.metrics.live_count.to_string());
    let rate = |l: Option<&TensorLine>| {
        l.map_or("-".to_string(), |l| {
            format!("{}/step", signed_bytes(l.metrics.growth))
        })
    };
    for (i, l) in shown.iter().enumerate() {
        let (a, b) = (l.a.as_ref(), l.b.as_ref());
        let label = match &l.a_label {
            Some(x) => format!("{} (in A: {x})", l.label),
            None => l.label.clone(),
        };
        tab.add_row(vec![
            (i + 1).to_string(),
            status(l.status).to_string(),
            live(a),
            live(b),
            signed(l.change.live_bytes),
            format!("{} → {}", count(a), count(b)),
            rate(a),
            rate(b),
            label,
            how(l.how, l.guessed),
        ]);
    }
    let title = format!(
        "Changed Python lines, view {}: tensors by the line that allocated them, most changed \
         first ({} of {})",
        t.view_name,
        shown.len(),
        t.lines.len()
    );
    emit(out, &title, &tab)
}

fn files(out: &mut impl Write, c: &Comparison) -> io::Result<()> {
    let d = &c.diff;
    let moved: Vec<_> = d
        .files
        .iter()
        .filter(|f| f.a != f.b || f.added + f.removed > 0)
        .collect();
    if !moved.is_empty() {
        writeln!(out, "\nPython files (A ↔ B)")?;
        for f in moved {
            let paired = match f.paired_by {
                PairedBy::MainScript => "paired as the main scripts (a guess)",
                _ => "the same file",
            };
            let lines = match f.lines {
                LineMapping::SourceText => format!(
                    "lines matched by their text ({} code lines added, {} removed)",
                    f.added, f.removed
                ),
                LineMapping::FunctionStart => {
                    "lines matched by their offset in their function (sources not found: \
                     --source-dir)"
                        .to_string()
                }
            };
            writeln!(out, "  {} ↔ {}: {paired}; {lines}", f.a, f.b)?;
        }
    }
    if !d.source_changes.is_empty() {
        writeln!(out, "\nSource changes (code lines)")?;
        for s in &d.source_changes {
            let sign = match s.kind {
                LineChangeKind::Added => "+",
                LineChangeKind::Removed => "-",
            };
            let run = match s.kind {
                LineChangeKind::Added => "B",
                LineChangeKind::Removed => "A",
            };
            let loop_ = if s.in_loop { " (in a loop)" } else { "" };
            writeln!(
                out,
                "  {sign} {}:{} [{run}]  {}{loop_}",
                base_name(&s.file),
                s.line,
                s.text
            )?;
        }
    }
    Ok(())
}
