//! Growth rates: a size per step (`1MiB/step`, or a bare size, `512KiB`, which means the same).
//! The one grammar of `check --max-growth`, `report --fail-on growth=…`, `diff --max-growth` and
//! `VRAMTRACE_ALERT_THRESHOLD`.

use super::size::parse_size;

/// Parses a growth per step: a size as [`parse_size`] reads it, optionally followed by `/step`.
/// A trace whose steps could not be told is judged per time window at the same rate.
pub fn parse_rate(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let size = match t.split_once('/') {
        None => t,
        Some((size, per)) if per.trim().eq_ignore_ascii_case("step") => size,
        Some(_) => return Err("not a growth per step (examples: 1MiB/step, 512KiB)".into()),
    };
    parse_size(size)
}

/// The unit of a growth rate in words: `step`, or a time window with its length (`128 ms
/// window`; a rate per window of unknown length says nothing). The one wording of the live
/// alert, its threshold and the reports' alert lines.
pub fn rate_unit(steps: bool, window_ns: u64) -> String {
    match (steps, window_ns) {
        (true, _) => "step".to_string(),
        (false, 0) => "window".to_string(),
        (false, ns) => format!("{} window", super::span(ns)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_is_a_size_per_step() {
        assert_eq!(parse_rate("1MiB/step"), Ok(1 << 20));
        assert_eq!(parse_rate("1 MiB / step"), Ok(1 << 20));
        assert_eq!(parse_rate("512KiB"), Ok(512 << 10));
        assert_eq!(parse_rate("0"), Ok(0));
        assert_eq!(
            parse_rate("1MiB/s"),
            Err("not a growth per step (examples: 1MiB/step, 512KiB)".into())
        );
        assert!(parse_rate("fast/step").is_err());
    }

    #[test]
    fn a_rate_per_window_says_its_length() {
        assert_eq!(rate_unit(true, 128_000_000), "step");
        assert_eq!(rate_unit(false, 128_000_000), "128 ms window");
        assert_eq!(rate_unit(false, 0), "window");
    }
}
