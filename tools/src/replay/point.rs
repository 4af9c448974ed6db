//! Moments of a trace that `replay` can stop at: `step N`, `event N`, a time since the first
//! event, `peak`, `oom [N]`, `end`.

use std::fmt;

use vramtrace_collector::units::duration::{has_unit, parse_duration};

/// A moment of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    /// Right after step `N` began (its step mark applied).
    Step(u64),
    /// Right after the `N`-th event (1 = the first).
    Event(u64),
    /// After every event up to this many nanoseconds after the first event.
    Time(u64),
    /// Right after the event that reached the highest live point of the busiest device.
    Peak,
    /// Right after the `N`-th out-of-memory failure (1 = the first).
    Oom(u64),
    /// After the last event: the live set `report` shows.
    End,
}

impl Point {
    /// Parses `step 12`, `step:12`, `event=5000`, `12.5s`, `300ms`, `time 40us`, `peak`, `oom`,
    /// `oom 2`.
    pub fn parse(text: &str) -> Result<Point, String> {
        let t = text.trim().to_ascii_lowercase();
        if t.starts_with('-') || t.contains(" -") || t.contains(":-") || t.contains("=-") {
            return Err(format!(
                "'{text}': a point of a trace is never negative (steps, events and times count \
                 from the start of the trace)"
            ));
        }
        let (word, rest) = match t.find([' ', ':', '=']) {
            Some(i) => (&t[..i], t[i + 1..].trim()),
            None => (t.as_str(), ""),
        };
        let number = |what: &str| -> Result<u64, String> {
            rest.parse::<u64>().map_err(|e| match e.kind() {
                std::num::IntErrorKind::PosOverflow => {
                    format!("'{text}': {what} number too large (at most {})", u64::MAX)
                }
                _ => format!("'{text}': {what} needs a whole number, like '{what} 12'"),
            })
        };
        match word {
            "step" => Ok(Point::Step(number("step")?)),
            "event" => match number("event")? {
                0 => Err(format!("'{text}': events are counted from 1")),
                n => Ok(Point::Event(n)),
            },
            "peak" if rest.is_empty() => Ok(Point::Peak),
            "end" if rest.is_empty() => Ok(Point::End),
            "oom" if rest.is_empty() => Ok(Point::Oom(1)),
            "oom" => match number("oom")? {
                0 => Err(format!("'{text}': out-of-memory failures are counted from 1")),
                n => Ok(Point::Oom(n)),
            },
            "time" => duration(rest).map(Point::Time),
            // Suggested only as points that parse: events count from 1, steps are whole.
            _ if t.parse::<f64>().is_ok() => Err(match t.parse::<u64>() {
                Ok(0) => format!(
                    "'{text}': a bare number could be a step or a time: write 'step 0' or '0s' \
                     (events are counted from 1)"
                ),
                Ok(_) => format!(
                    "'{text}': a bare number could be a step, an event or a time: write 'step \
                     {t}', 'event {t}' or '{t}s'"
                ),
                Err(_) => format!("'{text}': a bare number: write '{t}s' for a time"),
            }),
            _ => duration(&t).map(Point::Time).map_err(|_| {
                format!(
                    "'{text}' is not a point of a trace (use: step N, event N, 12.5s, 300ms, peak, oom, oom N, end)"
                )
            }),
        }
    }
}

/// A time since the first event: a duration as the collector reads it (`12.5s`, `300ms`,
/// `40us`), whose unit must be given: a bare number here could as well be a step or an event.
fn duration(text: &str) -> Result<u64, String> {
    if !has_unit(text) {
        return Err(format!(
            "'{text}': a time needs a unit (12.5s, 300ms, 40us)"
        ));
    }
    parse_duration(text)
        .map(|d| d.as_nanos().min(u64::MAX as u128) as u64)
        .map_err(|e| format!("'{text}' is {e}"))
}

/// A time as it was asked: from a second to two minutes, to the millisecond (`12.5s` is
/// `12.5 s`, not the rounded `12 s` of a span), under a second to the microsecond (`24.5 ms`);
/// otherwise in the unit that reads best.
pub(super) fn as_asked(ns: u64) -> String {
    // Under a second, a fraction of a millisecond as given (`24.5 ms`, not `24 ms`).
    if (1_000_000..1_000_000_000).contains(&ns)
        && !ns.is_multiple_of(1_000_000)
        && ns.is_multiple_of(1_000)
    {
        let ms = format!("{:.3}", ns as f64 / 1e6);
        return format!("{} ms", ms.trim_end_matches('0').trim_end_matches('.'));
    }
    if !(1_000_000_000..120_000_000_000).contains(&ns) || !ns.is_multiple_of(1_000_000) {
        return crate::render::units::duration(ns);
    }
    let seconds = format!("{:.3}", ns as f64 / 1e9);
    format!("{} s", seconds.trim_end_matches('0').trim_end_matches('.'))
}

impl fmt::Display for Point {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Point::Step(n) => write!(f, "step {n}"),
            Point::Event(n) => write!(f, "event {n}"),
            Point::Time(ns) => write!(f, "{} after the first event", as_asked(*ns)),
            Point::Peak => write!(f, "peak"),
            Point::Oom(n) => write!(f, "out-of-memory failure {n}"),
            Point::End => write!(f, "end"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_reads_as_asked() {
        let said = |t: &str| Point::parse(t).unwrap().to_string();
        assert_eq!(said("12.5s"), "12.5 s after the first event");
        assert_eq!(said("60min"), "60 min after the first event");
        assert_eq!(said("300ms"), "300 ms after the first event");
        assert_eq!(said("24.5ms"), "24.5 ms after the first event");
    }

    #[test]
    fn a_bare_number_is_offered_only_points_that_parse() {
        let zero = "'0': a bare number could be a step or a time: write 'step 0' or '0s' (events \
                    are counted from 1)";
        assert_eq!(Point::parse("0"), Err(zero.to_string()));
        assert_eq!(
            Point::parse("1.5"),
            Err("'1.5': a bare number: write '1.5s' for a time".to_string())
        );
        for offered in ["step 0", "0s", "1.5s"] {
            assert!(Point::parse(offered).is_ok(), "{offered}");
        }
    }

    #[test]
    fn a_bare_number_is_asked_what_it_counts() {
        assert_eq!(
            Point::parse("5"),
            Err(
                "'5': a bare number could be a step, an event or a time: write 'step 5', \
                 'event 5' or '5s'"
                    .to_string()
            )
        );
    }

    #[test]
    fn points_parse() {
        assert_eq!(Point::parse("step 12"), Ok(Point::Step(12)));
        assert_eq!(Point::parse("STEP:3"), Ok(Point::Step(3)));
        assert_eq!(Point::parse("event=5000"), Ok(Point::Event(5000)));
        assert_eq!(Point::parse("12.5s"), Ok(Point::Time(12_500_000_000)));
        assert_eq!(Point::parse("time 300ms"), Ok(Point::Time(300_000_000)));
        assert_eq!(Point::parse("peak"), Ok(Point::Peak));
        assert_eq!(Point::parse("end"), Ok(Point::End));
        assert_eq!(Point::parse("oom"), Ok(Point::Oom(1)));
        assert_eq!(Point::parse("oom 2"), Ok(Point::Oom(2)));
        assert!(Point::parse("event 0").is_err());
        assert!(Point::parse("step x").is_err());
        assert_eq!(
            Point::parse("step 99999999999999999999"),
            Err(format!(
                "'step 99999999999999999999': step number too large (at most {})",
                u64::MAX
            ))
        );
        assert!(Point::parse("yesterday").is_err());
        assert!(Point::parse("12").is_err());
        for negative in ["-1s", "step -1", "event=-3", "time -2ms"] {
            let e = Point::parse(negative).unwrap_err();
            assert!(e.contains("never negative"), "{negative}: {e}");
        }
    }
}
