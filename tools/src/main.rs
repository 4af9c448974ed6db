//! `vramtrace`: run a program under the GPU memory tracer, report what its traces hold, and
//! export them to other viewers.
//!
//! Exit codes: 0 when all went well; for `run`, the traced program's own exit code (128 + the
//! signal that killed it; 127 and 126 when it cannot be found or run, as a shell says it); for `diff`, 1 when the second run regressed beyond the thresholds; for
//! `check` and `report --fail-on`, 1 when a trace exceeds a limit (`check` exits with the
//! program's own code first when it failed); 2 for an error of vramtrace's own (a bad flag, an
//! unreadable trace, an output that would replace a file) and when a check could not see
//! everything (a process that ran untraced, a trace cut short or that lost events), reported as
//! one `error: …` line on stderr. A reader that leaves early (`| head`) changes no verdict
//! (`output::reader_gone`).

/// A line on standard error that never panics (`eprintln!` does): a closed or full standard
/// error (`2>&-`, `2>/dev/full`, `2>&1 | head -1`) loses the line, and the command keeps its
/// exit code.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod check;
mod cli;
mod diff;
mod export;
mod html;
mod limits;
mod load;
mod options;
mod output;
mod ranks;
mod render;
mod replay;
mod report;
mod run;
mod timeline;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return flag_error(e),
    };
    // Commands that run a program pass the signals on to it instead.
    if !matches!(cli.command, Command::Run(_) | Command::Check(_)) {
        output::interrupt::guard();
    }
    let result = match &cli.command {
        Command::Report(args) => match &args.html {
            Some(page) => html::run(args, page),
            None => report::run(args),
        },
        Command::Diff(args) => diff::run(args),
        Command::Run(args) => run::run(args),
        Command::Replay(args) => replay::run(args).map(|()| 0),
        Command::Export(args) => export::run(args).map(|()| 0),
        Command::Check(args) => check::run(args),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            say!("error: {e:#}");
            ExitCode::from(output::ERROR_EXIT)
        }
    }
}

/// A bad command line: one `error: …` line (clap's own first line) and exit 2; `--help` and
/// `--version` print in full and exit 0.
fn flag_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
            ExitCode::from(output::ERROR_EXIT)
        } else {
            ExitCode::SUCCESS
        };
    }
    let rendered = e.render().to_string();
    let mut lines = rendered.lines().map(str::trim).filter(|l| !l.is_empty());
    let mut first = lines
        .next()
        .unwrap_or("error: bad command line")
        .to_string();
    // "the following required arguments were not provided:" names them on the next line.
    if first.ends_with(':') {
        if let Some(next) = lines.next() {
            first = format!("{first} {next}");
        }
    }
    // The one format asked of `export` that another command makes.
    if first.starts_with("error: invalid value 'html' for '--format") {
        first.push_str("; the HTML page is `vramtrace report --html PAGE TRACE`");
    }
    say!("{first} (see --help)");
    ExitCode::from(output::ERROR_EXIT)
}

/// `vramtrace report … | head` closes the pipe early; that is not an error.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    let broken = |io: &std::io::Error| io.kind() == std::io::ErrorKind::BrokenPipe;
    e.chain().any(|c| {
        // The CSV and JSON writers wrap the error of the stream they write to.
        let csv = c.downcast_ref::<csv::Error>().map(csv::Error::kind);
        let json = c
            .downcast_ref::<serde_json::Error>()
            .and_then(|j| j.io_error_kind());
        c.downcast_ref::<std::io::Error>().is_some_and(broken)
            || matches!(csv, Some(csv::ErrorKind::Io(io)) if broken(io))
            || json == Some(std::io::ErrorKind::BrokenPipe)
    })
}
