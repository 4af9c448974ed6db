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
}
