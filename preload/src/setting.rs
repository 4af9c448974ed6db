//! Reading one `VRAMTRACE_*` setting: its value through the grammar the tools' flags share
//! (`vramtrace_collector::units`), or, for a bad value, one warning that names the setting, the
//! value and what is used instead. A module of its own, outside `session`, because the session's
//! settings (`session/config.rs`) and the live analysis's (`monitor/settings.rs`) both read
//! settings this way, and the session's settings hold the monitor's: with this grammar inside
//! `session/`, the two folders would import each other.

/// The warning for a bad value: `VRAMTRACE_X='v' is not a …; using 32`.
pub fn bad(name: &str, value: &str, error: &str, instead: &str) -> String {
    format!("{name}='{value}' is {error}; {instead}")
}

/// `value` of setting `name` through `parse`; `default` when unset, and when bad (with a
/// warning in `warnings` saying `instead`).
pub fn read<T>(
    name: &str,
    value: Option<String>,
    parse: impl FnOnce(&str) -> Result<T, String>,
    default: T,
    instead: &str,
    warnings: &mut Vec<String>,
) -> T {
    let Some(v) = value else {
        return default;
    };
    match parse(&v) {
        Ok(x) => x,
        Err(e) => {
            warnings.push(bad(name, &v, &e, instead));
            default
        }
    }
}

/// A count setting in `range`: `default` when unset or bad.
pub fn count(
    name: &str,
    value: Option<String>,
    range: vramtrace_collector::units::CountRange,
    default: u64,
    warnings: &mut Vec<String>,
) -> u64 {
    let instead = format!("using {default}");
    read(name, value, |v| range.parse(v), default, &instead, warnings)
}

/// A time setting named `…_MS` in `range` milliseconds: a bare number is milliseconds, as the
/// name says, and a time with its unit (`250ms`, `2s`) is taken too. `default` when unset or
/// bad.
pub fn millis(
    name: &str,
    value: Option<String>,
    range: vramtrace_collector::units::CountRange,
    default: u64,
    warnings: &mut Vec<String>,
) -> std::time::Duration {
    use vramtrace_collector::units::parse_duration;
    let parse = |v: &str| {
        let t = v.trim();
        // A bare number, whole or not, is milliseconds (rounded); a time with its unit, to the
        // millisecond above (500us is 1, not 0).
        let ms = match t.parse::<f64>() {
            Ok(n) if n.is_finite() && n >= 0.0 => Some(n.round() as u64),
            Ok(_) => None,
            Err(_) => parse_duration(t)
                .ok()
                .map(|d| d.as_nanos().div_ceil(1_000_000) as u64),
        };
        ms.filter(|ms| (range.lo..=range.hi).contains(ms))
            .ok_or(format!(
            "not a time from {} to {} ms (a number of milliseconds, or with its unit: 250ms, 2s)",
            range.lo, range.hi
        ))
    };
    let instead = format!("using {default}");
    std::time::Duration::from_millis(read(name, value, parse, default, &instead, warnings))
}

/// An on/off setting: `default` when unset or bad.
pub fn switch(
    name: &str,
    value: Option<String>,
    default: bool,
    warnings: &mut Vec<String>,
) -> bool {
    use vramtrace_collector::units::parse_switch;
    read(
        name,
        value,
        parse_switch,
        default,
        "using the default",
        warnings,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramtrace_collector::units::CountRange;

    #[test]
    fn a_bad_value_is_one_warning_and_the_default() {
        let mut w = Vec::new();
        let range = CountRange { lo: 0, hi: 256 };
        assert_eq!(count("X", Some("7".into()), range, 32, &mut w), 7);
        assert_eq!(count("X", None, range, 32, &mut w), 32);
        assert_eq!(count("X", Some("lots".into()), range, 32, &mut w), 32);
        assert!(!switch("Y", Some("maybe".into()), false, &mut w));
        let ms = |v: &str, w: &mut Vec<String>| millis("Z_MS", Some(v.into()), range, 32, w);
        assert_eq!(ms("250", &mut w).as_millis(), 250);
        assert_eq!(ms(" 100ms", &mut w).as_millis(), 100);
        assert_eq!(ms("0.2s", &mut w).as_millis(), 200);
        assert_eq!(ms("0.5", &mut w).as_millis(), 1);
        assert_eq!(ms("500us", &mut w).as_millis(), 1);
        assert_eq!(ms("1s", &mut w).as_millis(), 32);
        assert_eq!(
            w,
            [
                "X='lots' is not a number from 0 to 256; using 32",
                "Y='maybe' is not a boolean (use 1 or 0); using the default",
                "Z_MS='1s' is not a time from 0 to 256 ms (a number of milliseconds, or with its \
                 unit: 250ms, 2s); using 32"
            ]
        );
    }
}
