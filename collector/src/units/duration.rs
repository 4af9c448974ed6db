//! Durations: a number and a unit (`300ms`, `90s`, `30m`, `24h`, `2d`); a bare number is
//! seconds. The one grammar of `--horizon`, `replay --at 12.5s` and the `VRAMTRACE_ALERT_*`
//! durations.

use std::time::Duration;

/// Parses a duration: a number with `ns`, `us` (`µs`), `ms`, `s` (`sec`), `m` (`min`), `h` or
/// `d`; seconds when bare.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = super::number_and_unit(text, "duration")?;
    let ns_per_unit = match unit.trim() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "" | "s" | "sec" => 1e9,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        "d" => 86400e9,
        other => {
            return Err(format!(
                "not a duration: unknown unit '{other}' (use ns, us, ms, s, m, h or d)"
            ))
        }
    };
    match number.parse::<f64>() {
        Ok(n) if n.is_finite() && n * ns_per_unit < u64::MAX as f64 => {
            Ok(Duration::from_nanos((n * ns_per_unit).round() as u64))
        }
        _ => Err("not a duration (examples: 300ms, 90s, 30m, 24h, 2d)".into()),
    }
}

/// A span of the trace, in the unit that reads best and with two or three significant figures
/// (a step of 1.85 ms reads `1.9 ms`, not `1 ms`): `850 ns`, `250 µs`, `1.9 ms`, `2 ms`,
/// `64 ms`, `1.5 s`, `35 min`. The one word for spans in every output (steps, windows, replay's points,
/// the page's axis).
pub fn span(ns: u64) -> String {
    // Tenths below 10 units, unless they are zero.
    let scaled = |n: f64, unit: &str| {
        let tenths = (n * 10.0).round();
        if n < 9.95 && tenths % 10.0 != 0.0 {
            format!("{:.1} {unit}", tenths / 10.0)
        } else {
            format!("{n:.0} {unit}")
        }
    };
    let n = ns as f64;
    match ns {
        0 => "0 s".to_string(),
        _ if n >= 119.5e9 => long_duration(n / 1e9),
        _ if n >= 0.9995e9 => scaled(n / 1e9, "s"),
        _ if n >= 0.9995e6 => scaled(n / 1e6, "ms"),
        _ if n >= 999.5 => scaled(n / 1e3, "µs"),
        _ => format!("{ns} ns"),
    }
}

/// A time far ahead, in the unit that reads best: `42 s`, `35 min`, `2.1 h`, `3.5 days`.
fn long_duration(seconds: f64) -> String {
    match seconds {
        s if s >= 2.0 * 86400.0 => format!("{:.1} days", s / 86400.0),
        s if s >= 2.0 * 3600.0 => format!("{:.1} h", s / 3600.0),
        s if s >= 120.0 => format!("{:.0} min", s / 60.0),
        // Under a second: the milliseconds, not "0 s" (a stand-in's loop fills in 6 ms).
        s if s < 0.9995 => span((s.max(0.0) * 1e9).round() as u64),
        s => format!("{s:.0} s"),
    }
}

/// `1,930 steps (2.1 h)`: when a projection is full, in steps and in time, or nothing. The
/// words of the report's findings, `diff`'s and the live alert's.
pub fn when_full(steps: Option<f64>, seconds: Option<f64>) -> Option<String> {
    when_full_in(steps, seconds, "step")
}

/// [`when_full`] counting `step`s of another name: `1,005 guessed steps (2.1 h)` where the
/// steps are guessed from the allocation pattern (one may be several of the program's).
pub fn when_full_in(steps: Option<f64>, seconds: Option<f64>, step: &str) -> Option<String> {
    // Less headroom than a step's growth: full within the next step (not "0 steps (0 s)").
    let under = format!("under a {step}");
    let steps = steps.map(|n| match n.floor() as u64 {
        0 => under.clone(),
        1 => format!("1 {step}"),
        n => format!("{} {step}s", super::count::grouped(n)),
    });
    // No room left: "under a step", not "(0 s)".
    let full_now = steps.as_deref() == Some(under.as_str()) && seconds == Some(0.0);
    let time = seconds.filter(|_| !full_now).map(long_duration);
    match (steps, time) {
        (Some(s), Some(t)) => Some(format!("{s} ({t})")),
        (Some(s), None) => Some(s),
        // Seconds alone are whole ones (a live alert's record): none left is under one.
        (None, Some(_)) if seconds == Some(0.0) => Some("under a second".to_string()),
        (None, Some(t)) => Some(t),
        (None, None) => None,
    }
}

/// Whether `text` names its unit (`12.5s`), rather than being a bare number (`12`).
pub fn has_unit(text: &str) -> bool {
    text.trim().chars().any(|c| !c.is_ascii_digit() && c != '.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_full_within_a_step_is_said_so() {
        assert_eq!(
            when_full(Some(0.45), Some(0.03)).as_deref(),
            Some("under a step (30 ms)")
        );
        assert_eq!(
            when_full(Some(0.0), Some(0.0)).as_deref(),
            Some("under a step")
        );
        // A loop that fills the device within a second says how soon.
        assert_eq!(
            when_full(Some(477.0), Some(0.0062)).as_deref(),
            Some("477 steps (6.2 ms)")
        );
        assert_eq!(long_duration(0.0), "0 s");
        assert_eq!(
            when_full(None, Some(0.0)).as_deref(),
            Some("under a second")
        );
        assert_eq!(long_duration(42.4), "42 s");
        assert_eq!(when_full(Some(1.2), None).as_deref(), Some("1 step"));
        assert_eq!(
            when_full(Some(1930.7), Some(7560.0)).as_deref(),
            Some("1,930 steps (2.1 h)")
        );
        assert_eq!(
            when_full_in(Some(1005.2), None, "guessed step").as_deref(),
            Some("1,005 guessed steps")
        );
        assert_eq!(
            when_full_in(Some(0.2), Some(0.0), "guessed step").as_deref(),
            Some("under a guessed step")
        );
    }

    #[test]
    fn spans_keep_their_figures() {
        assert_eq!(span(0), "0 s");
        assert_eq!(span(850), "850 ns");
        assert_eq!(span(250_000), "250 µs");
        assert_eq!(span(1_850_000), "1.9 ms");
        assert_eq!(span(1_000_000), "1 ms");
        assert_eq!(span(2_010_000), "2 ms");
        assert_eq!(span(9_960_000), "10 ms");
        assert_eq!(span(64_000_000), "64 ms");
        assert_eq!(span(999_700_000), "1 s");
        assert_eq!(span(1_500_000_000), "1.5 s");
        assert_eq!(span(86_000_000_000), "86 s");
        assert_eq!(span(2_100_000_000_000), "35 min");
    }

    #[test]
    fn durations_take_every_unit() {
        let d = |t| parse_duration(t).map(|d| d.as_nanos() as u64);
        assert_eq!(d("90s"), Ok(90_000_000_000));
        assert_eq!(d("90"), Ok(90_000_000_000));
        assert_eq!(d("30m"), Ok(1_800_000_000_000));
        assert_eq!(d("30min"), d("30m"));
        assert_eq!(d("24h"), Ok(86_400_000_000_000));
        assert_eq!(d("2d"), Ok(172_800_000_000_000));
        assert_eq!(d("12.5s"), Ok(12_500_000_000));
        assert_eq!(d("300ms"), Ok(300_000_000));
        assert_eq!(d("40us"), Ok(40_000));
        assert_eq!(d("40µs"), Ok(40_000));
        assert_eq!(d("100ns"), Ok(100));
        assert_eq!(d("0"), Ok(0));
        assert_eq!(
            d("3 weeks"),
            Err("not a duration: unknown unit 'weeks' (use ns, us, ms, s, m, h or d)".into())
        );
        assert!(d("-1s").is_err() && d("s").is_err() && d("1e400").is_err());
        assert!(has_unit("12.5s") && !has_unit("12") && !has_unit(" 1.5 "));
    }
}
