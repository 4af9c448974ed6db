//! Human-readable numbers for tables (JSON always carries exact bytes): sizes as the collector
//! prints them everywhere ([`bytes()`]), signed rates, device ordinals, short spans. What users
//! type is read by the collector's `units`, the grammar the tracer's settings share.

use vramtrace_collector::analysis::Analysis;
use vramtrace_collector::live::SampleAxis;

pub use vramtrace_collector::units::{bytes, span as duration};

/// A device ordinal for tables: `?` when the trace could not tell it (-1).
pub fn device(d: i32) -> String {
    if d < 0 {
        "?".to_string()
    } else {
        d.to_string()
    }
}

/// What a growth rate is per: `per step`, `per guessed step` where the steps are guessed from
/// the allocation pattern (one may span several of the program's, or part of one), or `per 64
/// ms window` for a trace sampled by time.
pub fn unit(a: &Analysis) -> String {
    let unit = match (a.growth.axis, a.growth.window_ns) {
        (SampleAxis::Time, Some(w)) => vramtrace_collector::units::rate_unit(false, w),
        _ if a.steps.source == "pattern" => step_noun(a).to_string(),
        _ => vramtrace_collector::units::rate_unit(true, 0),
    };
    format!("per {unit}")
}

/// What the trace's steps are called: `guessed step` where they are guessed from the
/// allocation pattern, else `step`; growth rates and times to full count in it alike.
pub fn step_noun(a: &Analysis) -> &'static str {
    if a.steps.source == "pattern" {
        "guessed step"
    } else {
        "step"
    }
}

/// `1,930 steps (2.1 h)`, in the trace's steps ([`step_noun`]).
pub fn when_full(a: &Analysis, steps: Option<f64>, seconds: Option<f64>) -> Option<String> {
    vramtrace_collector::units::when_full_in(steps, seconds, step_noun(a))
}

/// A number of things, the noun in the plural unless there is one: `1 object`, `3 objects`,
/// `2 processes`, `0 anomalies`.
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        return format!("1 {noun}");
    }
    let consonant_y = noun
        .strip_suffix('y')
        .filter(|stem| !stem.ends_with(['a', 'e', 'i', 'o', 'u']));
    match consonant_y {
        Some(stem) => format!("{n} {stem}ies"),
        None if noun.ends_with('s') => format!("{n} {noun}es"),
        None => format!("{n} {noun}s"),
    }
}

/// Bytes per unit of a growth slope, signed: `+1.0 MiB`, `-512 B`.
pub fn signed_bytes(n: f64) -> String {
    let sign = if n < 0.0 { "-" } else { "+" };
    format!("{sign}{}", bytes(n.abs().round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_agree_with_their_noun() {
        assert_eq!(count(1, "object"), "1 object");
        assert_eq!(count(0, "object"), "0 objects");
        assert_eq!(count(2, "process"), "2 processes");
        assert_eq!(count(0, "anomaly"), "0 anomalies");
        assert_eq!(count(2, "key"), "2 keys");
    }

    #[test]
    fn an_unknown_device_is_a_question_mark() {
        assert_eq!(
            (device(0), device(7), device(-1)),
            ("0".into(), "7".into(), "?".into())
        );
    }
}
