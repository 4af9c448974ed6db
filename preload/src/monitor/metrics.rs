//! Metrics for Prometheus from the live analysis, in the text exposition format (OpenMetrics, by
//! the `prometheus-client` crate): live device bytes per device and kind, steady growth per step
//! and leak-suspect bytes per device (from the latest judgement), allocation failures, dropped
//! events, steps and alerts. Written to a file for node_exporter's textfile collector, in the
//! classic text format it parses (written beside it, then renamed over it, so a scrape never
//! reads half a file), and/or served over HTTP on a loopback address by a thread of its own, as
//! OpenMetrics; nothing by default.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use vramtrace_collector::analysis::Judgement;
use vramtrace_collector::live::{Accounting, LiveState, SampleAxis};

use super::settings::MetricsSettings;
use crate::warn::warn;

/// The content type of the OpenMetrics text format.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels = Vec<(&'static str, String)>;

/// The numbers the metrics are made of.
pub struct Reading<'a> {
    pub state: &'a LiveState,
    /// Steps begun, as the judgements number them (`Watch::steps`).
    pub steps: u64,
    pub judgement: Option<&'a Judgement>,
    pub dropped: u64,
    pub alerts: u64,
}

/// The device and kind of each live-bytes series published so far.
pub type Series = BTreeSet<(i32, &'static str)>;

/// The exposition text of `r`. A live-bytes series once published stays, at 0 once nothing of
/// its kind is live: a series that vanished reads as "no data" on a dashboard, not as "all
/// freed" (a healthy run frees everything before it exits). `shown` keeps them from one text to
/// the next.
pub fn render(r: &Reading<'_>, shown: &mut Series) -> String {
    let mut registry = Registry::with_prefix("vramtrace");
    let live = Family::<Labels, Gauge>::default();
    let mut by_kind: BTreeMap<(i32, &'static str), u64> =
        shown.iter().map(|&key| (key, 0)).collect();
    for o in r.state.live_objects() {
        if o.category.accounting() == Accounting::Device {
            *by_kind.entry((o.device, o.category.name())).or_default() += o.bytes;
        }
    }
    shown.extend(by_kind.keys().copied());
    for ((device, kind), bytes) in by_kind {
        live.get_or_create(&vec![
            ("device", device.to_string()),
            ("kind", kind.to_string()),
        ])
        .set(bytes as i64);
    }
    registry.register(
        "live_bytes",
        "Device memory live now, by device and kind of allocation",
        live,
    );
    let growth = Family::<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    let suspect = Family::<Labels, Gauge>::default();
    if let Some(j) = r.judgement {
        let unit = match j.axis {
            SampleAxis::Steps => "step",
            SampleAxis::Time => "window",
        };
        for d in &j.devices {
            let labels = vec![("device", d.device.to_string()), ("unit", unit.to_string())];
            growth.get_or_create(&labels).set(d.steady_growth);
            suspect
                .get_or_create(&vec![("device", d.device.to_string())])
                .set(d.leak_suspect_bytes as i64);
        }
    }
    registry.register(
        "growth_bytes_per_step",
        "Steady growth of device memory after the warm-up, bytes per step (per time window \
         without step marks), at the latest judgement",
        growth,
    );
    registry.register(
        "leak_suspect_bytes",
        "Bytes held now by the places growing steadily, at the latest judgement",
        suspect,
    );
    let counter = |registry: &mut Registry, name: &str, help: &str, value: u64| {
        let c = Counter::<u64>::default();
        c.inc_by(value);
        registry.register(name, help, c);
    };
    counter(
        &mut registry,
        "allocation_failures",
        "Memory calls that failed",
        r.state.failures().total(),
    );
    counter(
        &mut registry,
        "dropped_events",
        "Events the tracer lost (the buffer was full)",
        r.dropped,
    );
    counter(&mut registry, "steps", "Steps begun", r.steps);
    counter(&mut registry, "alerts", "Alerts raised", r.alerts);
    let mut text = String::new();
    if encode(&mut text, &registry).is_err() {
        text.clear();
    }
    text
}

/// Where the metrics go, and when they were last updated.
pub struct Exporter {
    file: Option<PathBuf>,
    served: Option<Arc<Mutex<String>>>,
    interval: Duration,
    last: Option<Instant>,
    quiet: bool,
}

impl Exporter {
    /// The exporter `settings` ask for (`None`: metrics off), its server started.
    pub fn new(settings: &MetricsSettings, quiet: bool) -> Option<Exporter> {
        if !settings.enabled() {
            return None;
        }
        let served = settings
            .addr
            .and_then(|addr| match TcpListener::bind(addr) {
                Ok(listener) => {
                    let text = Arc::new(Mutex::new(String::new()));
                    let shared = Arc::clone(&text);
                    let started = crate::tracer_thread::spawn("vramtrace-metrics", move || {
                        serve(&listener, &shared)
                    });
                    match started {
                        Ok(_detached) => Some(text),
                        Err(e) => {
                            if !quiet {
                                warn(&format!("cannot serve metrics on {addr}: {e}"));
                            }
                            None
                        }
                    }
                }
                Err(e) => {
                    if !quiet {
                        warn(&format!("cannot serve metrics on {addr}: {e}"));
                    }
                    None
                }
            });
        Some(Exporter {
            file: settings.file.clone(),
            served,
            interval: settings.interval,
            last: None,
            quiet,
        })
    }

    /// Whether an update is due.
    pub fn due(&self) -> bool {
        self.last.is_none_or(|t| t.elapsed() >= self.interval)
    }

    /// Publishes `text`: in the file, and to the server.
    pub fn publish(&mut self, text: String) {
        self.last = Some(Instant::now());
        if let Some(path) = &self.file {
            if !replaceable(path) {
                if !self.quiet {
                    warn(&format!(
                        "VRAMTRACE_METRICS_FILE: {} exists and holds no vramtrace metrics: left \
                         alone; the metrics are not written to a file",
                        path.display()
                    ));
                }
                self.file = None;
            } else if let Err(e) = write_atomically(path, classic(&text).as_bytes()) {
                if !self.quiet {
                    warn(&format!(
                        "cannot write the metrics to {}: {e}; they are no longer written",
                        path.display()
                    ));
                }
                self.file = None;
            }
        }
        if let Some(shared) = &self.served {
            if let Ok(mut t) = shared.lock() {
                *t = text;
            }
        }
    }
}

/// `openmetrics` in the classic Prometheus text format, the one node_exporter's textfile
/// collector parses: a counter's `# TYPE` and `# HELP` name its sample (`x_total`, where
/// OpenMetrics names the family `x`), and no `# EOF`.
fn classic(openmetrics: &str) -> String {
    let counters: Vec<&str> = (openmetrics.lines())
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + 64);
    for line in openmetrics.lines().filter(|l| *l != "# EOF") {
        let renamed = ["# TYPE ", "# HELP "].iter().find_map(|head| {
            let rest = line.strip_prefix(head)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(&name)
                .then(|| format!("{head}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// Whether the metrics may be renamed over `path`: nothing is there, or metrics vramtrace wrote
/// (this process's, or an earlier run's under the same name: a textfile collector's directory
/// keeps it across restarts). Anything else — the trace itself, a file of the user's — is not
/// the tracer's to replace.
fn replaceable(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 64];
    // A FIFO or device would block the open, or be no file to replace.
    match std::fs::symlink_metadata(path) {
        Err(e) => return e.kind() == std::io::ErrorKind::NotFound,
        Ok(m) if !m.is_file() => return false,
        Ok(_) => {}
    }
    match std::fs::File::open(path) {
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        Ok(mut f) => {
            let n = f.read(&mut head).unwrap_or(0);
            ["# HELP vramtrace_", "# TYPE vramtrace_"]
                .iter()
                .any(|h| head[..n].starts_with(h.as_bytes()))
        }
    }
}

/// Writes `bytes` to `PATH.PID.tmp` (a new file) and renames it over `path`.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_CLOEXEC)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes));
    match written.and_then(|()| std::fs::rename(&tmp, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Answers each HTTP request on `listener` with the latest text (any path: it is the only
/// thing served).
fn serve(listener: &TcpListener, text: &Mutex<String>) {
    for stream in listener.incoming().flatten() {
        let _ = answer(stream, text);
    }
}

fn answer(mut stream: TcpStream, text: &Mutex<String>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    // The request line and headers; nothing in them changes the answer.
    let mut request = [0u8; 2048];
    let mut got = 0;
    while got < request.len() {
        let n = stream.read(&mut request[got..])?;
        got += n;
        if n == 0 || request[..got].windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let body = text.lock().map(|t| t.clone()).unwrap_or_default();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {CONTENT_TYPE}\r\nContent-Length: {}\r\nConnection: \
         close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::{classic, render, replaceable, write_atomically, Reading, Series};
    use vramtrace_collector::live::LiveState;

    #[test]
    fn a_kind_once_live_is_published_at_zero_when_all_of_it_is_freed() {
        let state = LiveState::new();
        let reading = Reading {
            state: &state,
            steps: 3,
            judgement: None,
            dropped: 0,
            alerts: 0,
        };
        let mut shown = Series::new();
        assert!(!render(&reading, &mut shown).contains("vramtrace_live_bytes{"));
        shown.insert((0, "async"));
        let text = render(&reading, &mut shown);
        assert!(
            text.contains("\nvramtrace_live_bytes{device=\"0\",kind=\"async\"} 0\n"),
            "{text}"
        );
    }

    #[test]
    fn only_metrics_are_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.prom");
        assert!(replaceable(&path), "nothing there");
        write_atomically(&path, b"# HELP vramtrace_steps_total Steps begun.\n").unwrap();
        assert!(replaceable(&path), "metrics of ours");
        std::fs::write(&path, b"user data").unwrap();
        assert!(!replaceable(&path), "a file of the user's");
        std::fs::write(&path, b"").unwrap();
        assert!(!replaceable(&path), "an empty file is no metrics either");
    }

    #[test]
    fn the_textfile_names_counters_by_their_samples_and_has_no_eof() {
        let om = "# HELP vramtrace_steps Steps begun.\n# TYPE vramtrace_steps counter\n\
                  vramtrace_steps_total 40\n# HELP vramtrace_live_bytes Live.\n\
                  # TYPE vramtrace_live_bytes gauge\nvramtrace_live_bytes{device=\"0\"} 7\n# EOF\n";
        assert_eq!(
            classic(om),
            "# HELP vramtrace_steps_total Steps begun.\n# TYPE vramtrace_steps_total counter\n\
             vramtrace_steps_total 40\n# HELP vramtrace_live_bytes Live.\n\
             # TYPE vramtrace_live_bytes gauge\nvramtrace_live_bytes{device=\"0\"} 7\n"
        );
    }
}
