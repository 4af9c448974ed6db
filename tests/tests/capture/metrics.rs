//! The tracer's Prometheus metrics (`VRAMTRACE_METRICS_*`) on wl_alert's planted leak (1 MiB a
//! step for 40 steps, at fw_alloc by cudaMallocAsync, beside one 2 MiB caching segment): the
//! textfile and the loopback endpoint parse with a Prometheus text parser and hold the planted
//! numbers; a non-loopback address is refused, and nothing listens by default.

use std::io::{BufRead, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use prometheus_parse::{Scrape, Value};
use vramtrace_tests::traced::{text, Workload};

use crate::MIB;

fn parse(exposition: &str) -> Scrape {
    Scrape::parse(exposition.as_bytes().lines()).expect("the exposition parses")
}

/// The value of the one sample of `metric` whose labels include `labels`.
fn value(s: &Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<_> = (s.samples.iter())
        .filter(|x| x.metric == metric)
        .filter(|x| labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .collect();
    assert_eq!(found.len(), 1, "{metric} {labels:?}: {:?}", s.samples);
    match found[0].value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
        ref other => panic!("{metric}: {other:?}"),
    }
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

// The textfile at the end: the whole run judged, written by rename (no temporary left).
// Its name takes the trace name's placeholders: each process of a job writes its own.
captest!(the_textfile_holds_the_planted_numbers, |dir| {
    let run = Workload::new("wl_alert")
        .arg("leak")
        .env("VRAMTRACE_ALERT_INTERVAL_MS", "0")
        .env("VRAMTRACE_METRICS_FILE", dir.join("vramtrace-%p.prom"))
        .run_both(dir);
    let trace = run.single_trace();
    let file = dir.join(format!("vramtrace-{}.prom", trace.header.pid));
    let text = std::fs::read_to_string(&file).unwrap();
    // The classic text format node_exporter's textfile collector parses: a counter typed by
    // its sample's name, no OpenMetrics `# EOF`.
    assert!(
        text.contains("\n# TYPE vramtrace_steps_total counter\n"),
        "{text}"
    );
    assert!(!text.contains("# EOF"), "{text}");
    let s = parse(&text);
    let dev = ("device", "0");
    let mib = MIB as f64;
    assert_eq!(
        value(&s, "vramtrace_live_bytes", &[dev, ("kind", "async")]),
        40.0 * mib
    );
    assert_eq!(
        value(&s, "vramtrace_live_bytes", &[dev, ("kind", "device")]),
        2.0 * mib
    );
    assert_eq!(
        value(
            &s,
            "vramtrace_growth_bytes_per_step",
            &[dev, ("unit", "step")]
        ),
        mib
    );
    assert_eq!(
        value(&s, "vramtrace_leak_suspect_bytes", &[dev]),
        40.0 * mib
    );
    assert_eq!(value(&s, "vramtrace_steps_total", &[]), 40.0);
    assert_eq!(value(&s, "vramtrace_alerts_total", &[]), 1.0);
    assert_eq!(value(&s, "vramtrace_allocation_failures_total", &[]), 0.0);
    assert_eq!(value(&s, "vramtrace_dropped_events_total", &[]), 0.0);
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let trace_name = trace
        .path
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert_eq!(
        names,
        [trace_name, format!("vramtrace-{}.prom", trace.header.pid)]
    );
});

/// One HTTP GET of `/metrics` on `port`; `None` while nothing answers.
fn scrape(port: u16) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut response = String::new();
    s.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        head.contains("Content-Type: application/openmetrics-text; version=1.0.0"),
        "{head}"
    );
    Some(body.to_string())
}

// Served on loopback while the program runs (it waits 2 s after its last step): a scrape
// after the last step has its numbers.
captest!(
    the_loopback_endpoint_answers_while_the_program_runs,
    |dir| {
        let port = free_port();
        let mut child = Workload::new("wl_alert")
            .arg("leak")
            .arg("--wait-signal")
            .env("VRAMTRACE_ALERT_INTERVAL_MS", "0")
            .env("VRAMTRACE_METRICS_MS", "100")
            .env("VRAMTRACE_METRICS_ADDR", format!("127.0.0.1:{port}"))
            .traced_command(dir)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        let mut last = None;
        while start.elapsed() < Duration::from_secs(10) {
            if let Some(body) = scrape(port) {
                let s = parse(&body);
                let steps = s
                    .samples
                    .iter()
                    .any(|x| x.metric == "vramtrace_steps_total");
                if steps
                    && value(&s, "vramtrace_steps_total", &[]) == 40.0
                    && body.contains("growth")
                {
                    last = Some(s);
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(child.wait().unwrap().success());
        let s = last.expect("the endpoint answered with the 40 steps");
        let dev = ("device", "0");
        assert_eq!(
            value(
                &s,
                "vramtrace_growth_bytes_per_step",
                &[dev, ("unit", "step")]
            ),
            MIB as f64
        );
        assert_eq!(value(&s, "vramtrace_alerts_total", &[]), 1.0);
        assert_eq!(
            value(&s, "vramtrace_live_bytes", &[dev, ("kind", "async")]),
            40.0 * MIB as f64
        );
    }
);

/// The sockets the process `pid` has open.
fn sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy().starts_with("socket:"))
        .count()
}

// Another address than loopback is refused with a warning; without settings the traced
// program has no socket open at all.
captest!(
    metrics_are_served_on_loopback_only_and_off_by_default,
    |dir| {
        let port = free_port();
        let out = Workload::new("wl_alert")
            .arg("healthy")
            .env("VRAMTRACE_METRICS_ADDR", format!("0.0.0.0:{port}"))
            .traced_command(dir)
            .output()
            .unwrap();
        assert!(
            text(&out.stderr).contains(&format!(
                "vramtrace: warning: VRAMTRACE_METRICS_ADDR='0.0.0.0:{port}' is not a loopback \
             address (127.0.0.1:PORT, [::1]:PORT); metrics are not served\n"
            )),
            "{}",
            text(&out.stderr)
        );
        let mut child = Workload::new("wl_alert")
            .arg("leak")
            .arg("--wait-signal")
            .traced_command(dir)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Past its last step (it prints the 40th), while it waits.
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while stdout.read_line(&mut line).unwrap() > 0 && !line.contains("step 40") {
            line.clear();
        }
        assert_eq!(sockets(child.id()), 0);
        assert!(child.wait().unwrap().success());
    }
);
