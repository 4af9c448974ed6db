//! `VRAMTRACE_*` settings. A bad value is one warning on stderr and the default, never a crash.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use vramtrace_collector::units::count::FRAMES;
use vramtrace_collector::units::pattern;
use vramtrace_collector::units::CountRange;

use crate::files::segments::SegmentSettings;
use crate::monitor::{AlertSettings, MetricsSettings};
use crate::setting::{count, millis, switch};

/// Which layers produce events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capture {
    pub runtime: bool,
    pub driver: bool,
    pub nccl: bool,
    /// Page-locked host memory (pinned allocations and registrations).
    pub host: bool,
}

impl Capture {
    /// The layers captured, as `VRAMTRACE_CAPTURE` names them.
    pub fn layers(&self) -> Vec<&'static str> {
        let layers = [
            (self.runtime, "runtime"),
            (self.driver, "driver"),
            (self.nccl, "nccl"),
            (self.host, "host"),
        ];
        (layers.iter()).filter(|l| l.0).map(|l| l.1).collect()
    }

    /// The layers captured, comma-separated, when not every one is: `None` for all.
    pub fn narrowed(&self) -> Option<String> {
        let on = self.layers();
        (on.len() < 4).then(|| on.join(","))
    }
}

/// The tracer's settings for this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Pass everything through untouched: no events, no wrapped pointers.
    pub disabled: bool,
    /// Output path pattern (`%p` pid, `%r` rank, `%h` host, `%t` start time in seconds); any
    /// bytes, as paths are.
    pub output: OsString,
    /// Native frames captured per event; 0 turns stack capture off.
    pub stack_depth: usize,
    /// Python frames captured per allocation (through the C API when the thread holds the GIL,
    /// else by reading the thread's own interpreter frames); 0: none.
    pub python_depth: usize,
    /// The NVTX range whose push marks the start of a training step.
    pub step_range: Option<String>,
    /// How often a hook may ask the driver for the device's used memory (`cuMemGetInfo`); zero
    /// turns device accounting off.
    pub meminfo_interval: Duration,
    pub capture: Capture,
    /// Capacity of the channel between hooks and the writer, in events.
    pub buffer_events: usize,
    /// Longest time between chunk writes.
    pub flush_interval: Duration,
    /// How long a hook waits for room in a full channel while the writer makes no progress
    /// at all, before dropping its event (while it makes progress, hooks wait for it).
    pub full_wait: Duration,
    /// How long the writer waits for an event that is missing from the sequence.
    pub reorder_wait: Duration,
    /// No messages on stderr.
    pub quiet: bool,
    /// Store the (redacted) command line in the trace header.
    pub store_command_line: bool,
    /// Time the stages of every hook and of the writer, and print them on stderr at the end.
    pub self_profile: bool,
    /// The live analysis on the writer thread: alerts (`VRAMTRACE_ALERT_*`).
    pub alerts: AlertSettings,
    /// Metrics for Prometheus (`VRAMTRACE_METRICS_*`).
    pub metrics: MetricsSettings,
    /// Segments and the disk budget (`VRAMTRACE_SEGMENT_*`, `VRAMTRACE_MAX_BYTES`).
    pub segments: SegmentSettings,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            disabled: false,
            output: OsString::new(),
            stack_depth: 32,
            python_depth: 32,
            step_range: None,
            meminfo_interval: Duration::from_millis(500),
            capture: Capture {
                runtime: true,
                driver: true,
                nccl: true,
                host: true,
            },
            buffer_events: 1 << 16,
            flush_interval: Duration::from_millis(200),
            full_wait: Duration::from_millis(1000),
            reorder_wait: Duration::from_millis(1000),
            quiet: false,
            store_command_line: true,
            self_profile: false,
            alerts: AlertSettings::default(),
            metrics: MetricsSettings::default(),
            segments: SegmentSettings::default(),
        }
    }
}

/// A count setting from `lo` to `hi`.
fn range(lo: u64, hi: u64) -> CountRange {
    CountRange { lo, hi }
}

fn parse_capture(v: &str, warnings: &mut Vec<String>) -> Capture {
    let mut c = Capture {
        runtime: false,
        driver: false,
        nccl: false,
        host: false,
    };
    for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part {
            "all" => {
                return Config::default().capture;
            }
            "runtime" => c.runtime = true,
            "driver" => c.driver = true,
            "nccl" => c.nccl = true,
            "host" => c.host = true,
            other => {
                warnings.push(format!(
                    "VRAMTRACE_CAPTURE has an unknown layer '{other}' (known: runtime, driver, nccl, host, all); capturing everything"
                ));
                return Config::default().capture;
            }
        }
    }
    if !(c.runtime || c.driver || c.nccl) {
        warnings.push(format!(
            "VRAMTRACE_CAPTURE='{v}' names no layer of calls (runtime, driver or nccl; host \
             adds their page-locked host memory to them); capturing everything"
        ));
        return Config::default().capture;
    }
    c
}

impl Config {
    /// Reads the settings through `get_os` (the environment, or a map in tests); returns the
    /// configuration and one warning per bad value.
    pub fn from_lookup(get_os: impl Fn(&str) -> Option<OsString>) -> (Config, Vec<String>) {
        let mut c = Config::default();
        let mut w = Vec::new();
        // Every setting but the output path is text; one that is not says so.
        let get = |name: &str| -> Option<String> {
            let v = get_os(name)?;
            match v.into_string() {
                Ok(s) => Some(s),
                Err(v) => Some(v.to_string_lossy().into_owned()),
            }
        };
        c.disabled = switch("VRAMTRACE_DISABLE", get("VRAMTRACE_DISABLE"), false, &mut w);
        c.quiet = switch("VRAMTRACE_QUIET", get("VRAMTRACE_QUIET"), false, &mut w);
        c.self_profile = switch(
            "VRAMTRACE_SELF_PROFILE",
            get("VRAMTRACE_SELF_PROFILE"),
            false,
            &mut w,
        );
        let rank_known = get("RANK").is_some() || get("LOCAL_RANK").is_some();
        c.output = match get_os("VRAMTRACE_OUTPUT") {
            Some(v) if !v.to_string_lossy().trim().is_empty() => v,
            Some(_) => {
                w.push("VRAMTRACE_OUTPUT is empty; using the default name".into());
                default_output(rank_known)
            }
            None => default_output(rank_known),
        };
        // In the file name: a directory's name is taken as written.
        let name = std::path::Path::new(&c.output).file_name();
        if name.is_some_and(|n| pattern::unknown_placeholders("", n.as_bytes()).is_some()) {
            if let Some(unknown) =
                pattern::unknown_placeholders("VRAMTRACE_OUTPUT", c.output.as_bytes())
            {
                w.push(format!("{unknown}; it is kept as written"));
            }
        }
        c.store_command_line = switch(
            "VRAMTRACE_STORE_CMDLINE",
            get("VRAMTRACE_STORE_CMDLINE"),
            true,
            &mut w,
        );
        let mut number = |name: &str, range: CountRange, default: u64| {
            count(name, get(name), range, default, &mut w)
        };
        c.stack_depth = number("VRAMTRACE_STACK_DEPTH", FRAMES, 32) as usize;
        c.python_depth = number("VRAMTRACE_PYTHON_DEPTH", FRAMES, 32) as usize;
        c.buffer_events = number("VRAMTRACE_BUFFER_EVENTS", range(1024, 1 << 24), 1 << 16) as usize;
        let mut ms = |name: &str, range: CountRange, default: u64| {
            millis(name, get(name), range, default, &mut w)
        };
        c.meminfo_interval = ms("VRAMTRACE_MEMINFO_MS", range(0, 3_600_000), 500);
        c.flush_interval = ms("VRAMTRACE_FLUSH_MS", range(1, 60_000), 200);
        c.full_wait = ms("VRAMTRACE_FULL_WAIT_MS", range(0, 10_000), 1000);
        c.reorder_wait = ms("VRAMTRACE_REORDER_WAIT_MS", range(0, 60_000), 1000);
        if let Some(v) = get("VRAMTRACE_STEP_RANGE") {
            let v = v.trim();
            if v.is_empty() {
                w.push(
                    "VRAMTRACE_STEP_RANGE is empty; steps come from vramtrace_mark_step() only"
                        .into(),
                );
            } else {
                c.step_range = Some(v.to_string());
            }
        }
        if let Some(v) = get("VRAMTRACE_CAPTURE") {
            c.capture = parse_capture(&v, &mut w);
        }
        c.alerts = AlertSettings::from_lookup(get, &mut w);
        c.metrics = MetricsSettings::from_lookup(get, &mut w);
        c.segments = SegmentSettings::from_lookup(get, &mut w);
        (c, w)
    }

    /// Reads the settings from the process environment.
    pub fn from_env() -> (Config, Vec<String>) {
        Config::from_lookup(|k| std::env::var_os(k))
    }

    /// The settings in effect, for the trace header.
    pub fn describe(&self) -> Vec<(String, String)> {
        let layers = self.capture.layers();
        vec![
            (
                "VRAMTRACE_OUTPUT".into(),
                self.output.to_string_lossy().into_owned(),
            ),
            ("VRAMTRACE_STACK_DEPTH".into(), self.stack_depth.to_string()),
            ("VRAMTRACE_CAPTURE".into(), layers.join(",")),
            (
                "VRAMTRACE_BUFFER_EVENTS".into(),
                self.buffer_events.to_string(),
            ),
            (
                "VRAMTRACE_FLUSH_MS".into(),
                self.flush_interval.as_millis().to_string(),
            ),
            (
                "VRAMTRACE_FULL_WAIT_MS".into(),
                self.full_wait.as_millis().to_string(),
            ),
            (
                "VRAMTRACE_REORDER_WAIT_MS".into(),
                self.reorder_wait.as_millis().to_string(),
            ),
            (
                "VRAMTRACE_STORE_CMDLINE".into(),
                u8::from(self.store_command_line).to_string(),
            ),
        ]
        .into_iter()
        .chain(self.segments.describe())
        .collect()
    }
}

fn default_output(rank_known: bool) -> OsString {
    if rank_known {
        pattern::DEFAULT_RANKED.into()
    } else {
        pattern::DEFAULT.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(pairs: &[(&str, &str)]) -> (Config, Vec<String>) {
        let m: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        Config::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn an_output_path_that_is_not_utf8_is_taken_as_it_is() {
        use std::os::unix::ffi::OsStringExt;
        let path = OsString::from_vec(b"/tmp/\xffrun-%p.vtrace".to_vec());
        let (c, w) = Config::from_lookup(|k| (k == "VRAMTRACE_OUTPUT").then(|| path.clone()));
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(c.output, path);
    }

    #[test]
    fn the_command_line_can_be_left_out() {
        let (c, w) = cfg(&[("VRAMTRACE_STORE_CMDLINE", "0")]);
        assert!(w.is_empty());
        assert!(!c.store_command_line);
        assert!(cfg(&[]).0.store_command_line);
    }

    #[test]
    fn defaults_without_settings() {
        let (c, w) = cfg(&[]);
        assert!(w.is_empty());
        assert_eq!(c.output, "vramtrace-%p.vtrace");
        assert_eq!(c.stack_depth, 32);
        assert!(c.capture.runtime && c.capture.driver && c.capture.nccl && c.capture.host);
    }

    #[test]
    fn rank_changes_the_default_name() {
        let (c, _) = cfg(&[("RANK", "3")]);
        assert_eq!(c.output, "vramtrace-rank%r-%p.vtrace");
    }

    #[test]
    fn bad_values_warn_once_each_and_keep_defaults() {
        let (c, w) = cfg(&[
            ("VRAMTRACE_STACK_DEPTH", "lots"),
            ("VRAMTRACE_BUFFER_EVENTS", "12"),
            ("VRAMTRACE_CAPTURE", "runtime,gpu"),
            ("VRAMTRACE_DISABLE", "maybe"),
            ("VRAMTRACE_FLUSH_MS", "-5"),
        ]);
        assert_eq!(w.len(), 5, "{w:?}");
        assert_eq!(
            w[1],
            "VRAMTRACE_STACK_DEPTH='lots' is not a number from 0 to 256; using 32"
        );
        assert_eq!(c.stack_depth, 32);
        assert_eq!(c.buffer_events, 1 << 16);
        assert_eq!(c.capture, Config::default().capture);
        assert!(!c.disabled);
        assert_eq!(c.flush_interval, Duration::from_millis(200));
    }

    #[test]
    fn good_values_are_taken() {
        let (c, w) = cfg(&[
            ("VRAMTRACE_STACK_DEPTH", "0"),
            ("VRAMTRACE_CAPTURE", "driver, nccl"),
            ("VRAMTRACE_OUTPUT", "/tmp/x-%p.vtrace"),
            ("VRAMTRACE_DISABLE", "1"),
        ]);
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(c.stack_depth, 0);
        assert!(!c.capture.runtime && c.capture.driver && c.capture.nccl && !c.capture.host);
        assert_eq!(c.output, "/tmp/x-%p.vtrace");
        assert!(c.disabled);
    }
}
