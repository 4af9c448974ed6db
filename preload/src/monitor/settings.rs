//! The `VRAMTRACE_ALERT_*` settings of the live analysis. Like every setting, a bad value is one
//! warning and the default.

use std::time::Duration;

use vramtrace_collector::units::pattern::{self, Naming};
use vramtrace_collector::units::{parse_duration, parse_rate, CountRange};

use crate::setting::{bad, count, millis, read, switch};

/// How the writer thread judges growth while the program runs, and what it does on an alert.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlertSettings {
    /// Live analysis on (`VRAMTRACE_ALERT`, default on).
    pub enabled: bool,
    /// Growth per step above which steady growth alerts (`VRAMTRACE_ALERT_THRESHOLD`); `None`:
    /// 0.1 % of the device's memory per step, as `vramtrace report` judges.
    pub threshold: Option<Threshold>,
    /// Alerts also when, at its rate, the device is full within this many steps
    /// (`VRAMTRACE_ALERT_HORIZON_STEPS`)…
    pub horizon_steps: u64,
    /// …or within this time (`VRAMTRACE_ALERT_HORIZON`).
    pub horizon: Duration,
    /// Steps a steady growth must have lasted (`VRAMTRACE_ALERT_CONFIRM`).
    pub confirm: u64,
    /// Wall time a steady growth judged per time window (a program without step marks) must
    /// have lasted (`VRAMTRACE_ALERT_CONFIRM_TIME`).
    pub confirm_time: Duration,
    /// Wall time a steady growth judged per step of the allocation pattern the analysis found
    /// (a program without step marks) must have lasted (`VRAMTRACE_ALERT_CONFIRM_PATTERN`).
    pub confirm_pattern: Duration,
    /// Least time between two judgements (`VRAMTRACE_ALERT_INTERVAL_MS`).
    pub interval: Duration,
    /// The signal sent to the process on an alert (`VRAMTRACE_ALERT_SIGNAL`: `USR1` or `USR2`);
    /// none by default.
    pub signal: Option<i32>,
    /// Write the live set beside the trace on an alert (`VRAMTRACE_ALERT_SNAPSHOT`).
    pub snapshot: bool,
    /// The process's rank, when it knows one (the trace's): its alert lines say it, so that the
    /// ranks of a job sharing one stderr can be told apart.
    pub rank: Option<i32>,
    /// Set when the run ends: an alert raised then says so (`ALERT at exit, step N`), as the
    /// program can no longer act on it.
    pub at_exit: bool,
    /// The signal asked for but no longer sent, the process having begun to exit: an alert
    /// raised then says it sent none, where a program counting on it would wait for it.
    pub withheld: Option<i32>,
}

/// A threshold of growth per step: bytes, or a share of the device's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threshold {
    Bytes(u64),
    /// A share of the device's memory in millionths (`0.5%` is 5,000).
    PartsPerMillion(u64),
}

/// What `VRAMTRACE_ALERT_THRESHOLD` takes, for its warning.
const WHAT: &str = "not a growth per step (examples: 1MiB, 512KiB/step) or a share of device \
                    memory, 0% or from 0.0001% to 100% (examples: 0.5%, 2%/step)";

impl Threshold {
    /// `1MiB`, `512KiB/step`, or a percentage of device memory (`0.5%`, `2%/step`).
    fn parse(text: &str) -> Result<Threshold, String> {
        let t = text.trim();
        // `get`, not indexing: a value ending inside a multi-byte character has no such suffix.
        let cut = t.len().saturating_sub(5);
        let t = match t.get(cut..) {
            Some(end) if end.eq_ignore_ascii_case("/step") => &t[..cut],
            _ => t,
        }
        .trim_end();
        let Some(percent) = t.strip_suffix('%') else {
            return parse_rate(text)
                .map(Threshold::Bytes)
                .map_err(|_| WHAT.to_string());
        };
        match percent.trim().parse::<f64>() {
            // 0, as `0` bytes: any steady growth alerts; a share too small to tell from it is
            // refused.
            Ok(p) if p == 0.0 || (0.0001..=100.0).contains(&p) => {
                Ok(Threshold::PartsPerMillion((p * 10_000.0).round() as u64))
            }
            _ => Err(WHAT.to_string()),
        }
    }
}

impl Default for AlertSettings {
    fn default() -> Self {
        AlertSettings {
            enabled: true,
            threshold: None,
            horizon_steps: 10_000,
            horizon: Duration::from_secs(24 * 3600),
            confirm: 10,
            confirm_time: Duration::from_secs(600),
            confirm_pattern: Duration::from_secs(60),
            interval: Duration::from_secs(1),
            signal: None,
            snapshot: false,
            rank: None,
            at_exit: false,
            withheld: None,
        }
    }
}

/// `USR1`, `SIGUSR1`, `USR2`, `SIGUSR2`: the signals a program can take as a request (the
/// others stop, kill or mean a fault by default).
pub fn parse_signal(text: &str) -> Option<i32> {
    let t = text.trim().to_ascii_uppercase();
    match t.strip_prefix("SIG").unwrap_or(&t) {
        "USR1" => Some(libc::SIGUSR1),
        "USR2" => Some(libc::SIGUSR2),
        _ => None,
    }
}

impl AlertSettings {
    /// Reads the settings through `get`; a bad value adds a warning to `w` and keeps the default.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>, w: &mut Vec<String>) -> Self {
        let mut s = AlertSettings {
            enabled: switch("VRAMTRACE_ALERT", get("VRAMTRACE_ALERT"), true, w),
            snapshot: switch(
                "VRAMTRACE_ALERT_SNAPSHOT",
                get("VRAMTRACE_ALERT_SNAPSHOT"),
                false,
                w,
            ),
            ..AlertSettings::default()
        };
        s.threshold = read(
            "VRAMTRACE_ALERT_THRESHOLD",
            get("VRAMTRACE_ALERT_THRESHOLD"),
            |v| Threshold::parse(v).map(Some),
            None,
            "using 0.1% of device memory",
            w,
        );
        s.horizon = read(
            "VRAMTRACE_ALERT_HORIZON",
            get("VRAMTRACE_ALERT_HORIZON"),
            // 0: no time horizon, as `--horizon 0` in the tools.
            parse_duration,
            s.horizon,
            "using 24h",
            w,
        );
        s.confirm_time = read(
            "VRAMTRACE_ALERT_CONFIRM_TIME",
            get("VRAMTRACE_ALERT_CONFIRM_TIME"),
            // 0: the steps' confirmation alone.
            parse_duration,
            s.confirm_time,
            "using 10m",
            w,
        );
        s.confirm_pattern = read(
            "VRAMTRACE_ALERT_CONFIRM_PATTERN",
            get("VRAMTRACE_ALERT_CONFIRM_PATTERN"),
            // 0: the steps' confirmation alone.
            parse_duration,
            s.confirm_pattern,
            "using 60s",
            w,
        );
        let mut number = |name: &str, lo: u64, hi: u64, default: u64| {
            count(name, get(name), CountRange { lo, hi }, default, w)
        };
        // 0: no horizon in steps, as `--horizon-steps 0` in the tools.
        s.horizon_steps = number("VRAMTRACE_ALERT_HORIZON_STEPS", 0, 1 << 40, 10_000);
        s.confirm = number("VRAMTRACE_ALERT_CONFIRM", 2, 1_000_000, 10);
        s.interval = millis(
            "VRAMTRACE_ALERT_INTERVAL_MS",
            get("VRAMTRACE_ALERT_INTERVAL_MS"),
            CountRange {
                lo: 0,
                hi: 3_600_000,
            },
            1000,
            w,
        );
        if let Some(v) = get("VRAMTRACE_ALERT_SIGNAL") {
            match parse_signal(&v) {
                Some(sig) => s.signal = Some(sig),
                None if v.trim().is_empty() || v.trim() == "0" => {}
                None => w.push(bad(
                    "VRAMTRACE_ALERT_SIGNAL",
                    &v,
                    "not USR1 or USR2",
                    "no signal is sent",
                )),
            }
        }
        s
    }
}

/// Where the metrics go (`VRAMTRACE_METRICS_*`); nothing by default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetricsSettings {
    /// A file rewritten (atomically: written beside, then renamed) at each update, for
    /// node_exporter's textfile collector (`VRAMTRACE_METRICS_FILE`); its name takes the trace
    /// name's placeholders ([`MetricsSettings::for_process`]).
    pub file: Option<std::path::PathBuf>,
    /// A loopback address served over HTTP (`VRAMTRACE_METRICS_ADDR`); any other is refused.
    pub addr: Option<std::net::SocketAddr>,
    /// Least time between updates (`VRAMTRACE_METRICS_MS`, default 5000).
    pub interval: Duration,
}

impl MetricsSettings {
    /// Whether metrics are asked for.
    pub fn enabled(&self) -> bool {
        self.file.is_some() || self.addr.is_some()
    }

    /// The settings of the process `naming` describes: the file's name with the placeholders
    /// of the trace's names expanded (`%p` pid, `%r` rank, `%h` host, `%t` start), so that the
    /// processes of a job each write their own (`metrics-%p.prom`).
    pub fn for_process(&self, naming: &Naming<'_>) -> MetricsSettings {
        MetricsSettings {
            file: (self.file.as_ref()).map(|f| pattern::expand(f.as_os_str(), naming).into()),
            ..self.clone()
        }
    }

    /// Reads the settings through `get`; a bad value adds a warning to `w`.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>, w: &mut Vec<String>) -> Self {
        let mut s = MetricsSettings {
            interval: Duration::from_secs(5),
            ..MetricsSettings::default()
        };
        if let Some(v) = get("VRAMTRACE_METRICS_FILE").filter(|v| !v.trim().is_empty()) {
            if let Some(unknown) =
                pattern::unknown_placeholders("VRAMTRACE_METRICS_FILE", v.as_bytes())
            {
                w.push(format!("{unknown}; it is kept as written"));
            }
            s.file = Some(v.into());
        }
        if let Some(v) = get("VRAMTRACE_METRICS_ADDR").filter(|v| !v.trim().is_empty()) {
            match v.trim().parse::<std::net::SocketAddr>() {
                Ok(a) if a.ip().is_loopback() => s.addr = Some(a),
                Ok(_) => w.push(format!(
                    "VRAMTRACE_METRICS_ADDR='{v}' is not a loopback address (127.0.0.1:PORT, \
                     [::1]:PORT); metrics are not served"
                )),
                Err(_) => w.push(format!(
                    "VRAMTRACE_METRICS_ADDR='{v}' is not an address (127.0.0.1:PORT); metrics \
                     are not served"
                )),
            }
        }
        let range = CountRange {
            lo: 100,
            hi: 3_600_000,
        };
        s.interval = millis(
            "VRAMTRACE_METRICS_MS",
            get("VRAMTRACE_METRICS_MS"),
            range,
            5000,
            w,
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn read(pairs: &[(&str, &str)]) -> (AlertSettings, Vec<String>) {
        let m: HashMap<&str, &str> = pairs.iter().copied().collect();
        let mut w = Vec::new();
        let s = AlertSettings::from_lookup(|k| m.get(k).map(|v| v.to_string()), &mut w);
        (s, w)
    }

    #[test]
    fn defaults_alert_without_signal_or_snapshot() {
        let (s, w) = read(&[]);
        assert!(w.is_empty());
        assert_eq!(s, AlertSettings::default());
        assert!(s.enabled && s.signal.is_none() && !s.snapshot);
    }

    // 0 turns a horizon off, as the tools' --horizon 0 and --horizon-steps 0 do.
    #[test]
    fn a_horizon_of_zero_is_none() {
        let (s, w) = read(&[
            ("VRAMTRACE_ALERT_HORIZON", "0"),
            ("VRAMTRACE_ALERT_HORIZON_STEPS", "0"),
        ]);
        assert!(w.is_empty(), "{w:?}");
        assert_eq!((s.horizon, s.horizon_steps), (Duration::ZERO, 0));
    }

    #[test]
    fn values_are_read_and_bad_ones_warn() {
        let (s, w) = read(&[
            ("VRAMTRACE_ALERT_THRESHOLD", "512KiB/step"),
            ("VRAMTRACE_ALERT_HORIZON", "2h"),
            ("VRAMTRACE_ALERT_CONFIRM", "5"),
            ("VRAMTRACE_ALERT_SIGNAL", "SIGUSR1"),
            ("VRAMTRACE_ALERT_SNAPSHOT", "1"),
        ]);
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(s.threshold, Some(Threshold::Bytes(512 << 10)));
        let share = |v: &str| read(&[("VRAMTRACE_ALERT_THRESHOLD", v)]);
        assert_eq!(
            share("0.5%").0.threshold,
            Some(Threshold::PartsPerMillion(5_000))
        );
        assert_eq!(
            share(" 2 %/step").0.threshold,
            Some(Threshold::PartsPerMillion(20_000))
        );
        assert_eq!(share("0%").0.threshold, Some(Threshold::PartsPerMillion(0)));
        assert_eq!(
            share("2%/STEP").0.threshold,
            Some(Threshold::PartsPerMillion(20_000))
        );
        for bad in ["150%", "abc%", "abc", "10%/s", "0.00004%", "1é/stép"] {
            let (s, warned) = share(bad);
            assert_eq!(s.threshold, None);
            assert_eq!(
                warned,
                [format!(
                    "VRAMTRACE_ALERT_THRESHOLD='{bad}' is {WHAT}; using 0.1% of device memory"
                )]
            );
        }
        assert_eq!(s.horizon, Duration::from_secs(7200));
        assert_eq!(
            (s.confirm, s.signal, s.snapshot),
            (5, Some(libc::SIGUSR1), true)
        );
        let (s, w) = read(&[
            ("VRAMTRACE_ALERT_SIGNAL", "KILL"),
            ("VRAMTRACE_ALERT_CONFIRM", "1"),
            ("VRAMTRACE_ALERT", "perhaps"),
        ]);
        assert_eq!(w.len(), 3, "{w:?}");
        assert_eq!(
            w[2],
            "VRAMTRACE_ALERT_SIGNAL='KILL' is not USR1 or USR2; no signal is sent"
        );
        assert_eq!((s.signal, s.confirm, s.enabled), (None, 10, true));
        assert!(!read(&[("VRAMTRACE_ALERT", "0")]).0.enabled);
    }

    #[test]
    fn metrics_are_off_by_default_and_served_on_loopback_only() {
        let metrics = |pairs: &[(&str, &str)]| {
            let m: HashMap<&str, &str> = pairs.iter().copied().collect();
            let mut w = Vec::new();
            let s = MetricsSettings::from_lookup(|k| m.get(k).map(|v| v.to_string()), &mut w);
            (s, w)
        };
        assert!(!metrics(&[]).0.enabled());
        let (s, w) = metrics(&[("VRAMTRACE_METRICS_ADDR", "127.0.0.1:9400")]);
        assert!(w.is_empty() && s.addr == Some("127.0.0.1:9400".parse().unwrap()));
        assert!(metrics(&[("VRAMTRACE_METRICS_ADDR", "[::1]:9400")])
            .0
            .enabled());
        let (s, w) = metrics(&[("VRAMTRACE_METRICS_ADDR", "0.0.0.0:9400")]);
        assert!(!s.enabled());
        assert_eq!(
            w,
            [
                "VRAMTRACE_METRICS_ADDR='0.0.0.0:9400' is not a loopback address (127.0.0.1:PORT, \
              [::1]:PORT); metrics are not served"
            ]
        );
    }
}
