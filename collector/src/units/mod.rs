//! The words users write for amounts and names, in the tracer's settings and the tools' flags
//! alike: sizes (`80GiB`), growth rates (`1MiB/step`), counts, durations (`90s`, `24h`) and the
//! trace-name pattern (`job-rank%r-%p.vtrace`). One grammar, read in one place, so that
//! `VRAMTRACE_ALERT_THRESHOLD` and `check --max-growth` take the same text, a size prints the
//! same in every output, and `run` finds a trace by the name the tracer gave it.
//!
//! A parser's error reads after the value it refused: `not a size (examples: …)`, so a setting
//! warns `VRAMTRACE_X='5x' is not a size: …` and a flag fails with `invalid value '5x' for
//! '--max-leak <SIZE>': not a size: …`.

pub mod count;
pub mod duration;
pub mod pattern;
pub mod rate;
pub mod size;
pub mod switch;

pub use count::{grouped, parse_count, CountRange};

/// The last component of a path: how every output names a source file or a module
/// (`libnccl.so.2`, `train.py`).
pub fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A native address as every output names it when no symbol does: `libnccl.so.2+0x1234` (its
/// offset in its module), or the raw address when no module contains it.
pub fn module_offset(module: Option<&str>, offset: u64) -> String {
    match module {
        Some(m) => format!("{m}+{offset:#x}"),
        None => format!("{offset:#x}"),
    }
}

/// A line of the program's Python source as every output names it: `train.py:42 in step` (the
/// file's base name; the stacks give the whole path).
pub fn line_label(file: &str, line: u32, function: &str) -> String {
    format!("{}:{line} in {function}", base_name(file))
}

/// `text` split into its number and its unit (`"1.5 GiB"` → `("1.5", " GiB")`), after refusing
/// a negative one in the words of `what` (`size`, `duration`).
fn number_and_unit<'a>(text: &'a str, what: &str) -> Result<(&'a str, &'a str), String> {
    let t = text.trim();
    if t.starts_with('-') {
        return Err(format!("not a {what}: {what}s are never negative"));
    }
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    Ok(t.split_at(split))
}
pub use duration::{parse_duration, span, when_full, when_full_in};
pub use rate::{parse_rate, rate_unit};
pub(crate) use size::share_of;
pub use size::{bytes, parse_size, share};
pub use switch::parse_switch;
