//! The call-site tables grouped by Python line, function or source line, and the stacks under
//! them: Python frames first, native frames below, runs of CUDA-library frames collapsed into
//! one line unless `--full-stacks`.

use std::io::{self, Write};

use vramtrace_collector::symbols::{collapse, Granularity, StackFrame};

use super::Report;
use crate::render::tables::{emit, or_unknown, seq_range, table};
use crate::render::units::bytes;

/// What the groups of one granularity are called in titles and headers.
fn nouns(by: Granularity) -> (&'static str, &'static str) {
    match by {
        Granularity::Python => ("Python lines", "python line"),
        Granularity::Function => ("functions", "function"),
        Granularity::Line => ("source lines", "line"),
        Granularity::Module => ("owner modules", "owner module"),
        Granularity::Site => ("call sites", "site"),
    }
}

/// The table of groups (`--by python|function|line`), then their stacks.
pub fn groups(out: &mut impl Write, r: &Report<'_>, full: bool) -> io::Result<()> {
    let g = &r.groups;
    if g.list.is_empty() {
        return Ok(());
    }
    let (plural, header) = nouns(g.by);
    let headers = [
        "#",
        "bytes",
        "host",
        "objects",
        "stacks",
        header,
        "owner module",
        "seq",
    ];
    let mut t = table(&headers, &[0, 1, 2, 3, 4]);
    for (i, x) in g.list.iter().enumerate() {
        let x = &x.item;
        t.add_row(vec![
            (i + 1).to_string(),
            bytes(x.bytes),
            bytes(x.host_bytes),
            x.count.to_string(),
            x.calls.to_string(),
            x.label.clone(),
            or_unknown(x.module.as_deref()).to_string(),
            seq_range(x.first_seq, x.last_seq),
        ]);
    }
    let title = format!(
        "Top {plural} by device memory ({} of {})",
        g.list.len(),
        g.total
    );
    emit(out, &title, &t)?;
    if g.by == Granularity::Python && r.state.python_stacks().is_empty() {
        writeln!(
            out,
            "  the trace holds no Python stacks: calls are grouped by native function"
        )?;
    }
    let entries = g.list.iter().map(|x| {
        let more = match x.item.calls {
            1 => String::new(),
            n => format!("  ({n} stacks, the largest shown)"),
        };
        (format!("{}{more}", x.item.label), &x.frames[..])
    });
    stacks(out, findings(r), entries, full)?;
    symbol_notes(out, r)
}

/// The stacks of the diagnosis' findings, then those of the call-site table (`--by site`).
pub fn site_stacks(out: &mut impl Write, r: &Report<'_>, full: bool) -> io::Result<()> {
    let entries = r.call_sites.iter().map(|s| {
        let title = match vramtrace_collector::symbols::frames_label(&s.frames) {
            Some(label) => format!("{label}  [{}]", s.item.location),
            None => s.item.location.to_string(),
        };
        (title, &s.frames[..])
    });
    stacks(out, findings(r), entries, full)?;
    symbol_notes(out, r)
}

/// The stacks of the diagnosis' findings, first in every stacks section (a leak freed at exit
/// is in no table of what is live), each titled by its finding's number.
fn findings<'r>(r: &'r Report<'_>) -> impl Iterator<Item = (String, &'r [StackFrame])> {
    (r.finding_stacks.iter())
        .map(|(number, label, frames)| (format!("finding {number}: {label}"), &frames[..]))
}

/// Stacks under a title: the findings' (titled by themselves), then a table's, numbered as its
/// rows.
fn stacks<'s>(
    out: &mut impl Write,
    findings: impl Iterator<Item = (String, &'s [StackFrame])>,
    entries: impl Iterator<Item = (String, &'s [StackFrame])>,
    full: bool,
) -> io::Result<()> {
    let mut findings = findings.peekable();
    let mut entries = entries.enumerate().peekable();
    if findings.peek().is_none() && entries.peek().is_none() {
        return Ok(());
    }
    let how = if full {
        "every frame"
    } else {
        "CUDA-library frames collapsed; --full-stacks shows them"
    };
    writeln!(out, "\nStacks, innermost frame first ({how})")?;
    let numbered = entries.map(|(i, (title, frames))| (format!("#{} {title}", i + 1), frames));
    for (title, frames) in findings.chain(numbered) {
        writeln!(out, "  {title}")?;
        for line in collapse(frames, full) {
            writeln!(out, "      {line}")?;
        }
    }
    Ok(())
}

/// Modules whose frames could not be named, and why; modules found only after a detour.
fn symbol_notes(out: &mut impl Write, r: &Report<'_>) -> io::Result<()> {
    let noted: Vec<_> = r
        .symbols
        .iter()
        .filter(|s| !s.found || !s.notes.is_empty())
        .collect();
    if noted.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "\nSymbols (a module without a file shows as module+offset; VRAMTRACE_SYMBOL_PATH adds \
         directories to search)"
    )?;
    for s in noted {
        let mut line = s.notes.join("; ");
        if let Some(file) = s.debug_info.as_ref().or(s.binary.as_ref()) {
            line += &format!("; using {file}");
        }
        writeln!(out, "  {}: {line}", s.module)?;
    }
    Ok(())
}
