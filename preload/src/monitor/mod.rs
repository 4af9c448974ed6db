//! The monitor: the live analysis on the writer thread (not `collector::live`, the allocation
//! state it keeps). Every record written to the trace is also applied to a [`Watch`] (the tools'
//! own live-allocation state and growth verdicts, one implementation), and growth is judged at
//! most once per `VRAMTRACE_ALERT_INTERVAL_MS`, at a step mark or in the writer's loop. A device
//! whose steady growth passes the threshold or the horizon raises one alert ([`alert`]).
//!
//! With PyTorch's recorder on, an alert first waits for the program's own view: the Python
//! hooks poll `vramtrace_alert_pending` at each step and hand over a snapshot of the recorder,
//! from which the watch names the line whose tensors stay live. A snapshot taken at exit (or at
//! the first out-of-memory error) answers an alert raised after it: no newer one comes. When the
//! view shows PyTorch's tensors flat where the driver sees the caching allocator's segments grow
//! (its cache warming up), the alert is withdrawn, not said: the device is looked at again once
//! the run has gone on twice as long. Without an answer within [`VIEW_WAIT`] (or a few steps'
//! time, after the hooks may hand over again), the alert names the driver's place, where the
//! caching allocator asked for memory, and says so.
//!
//! It must never harm the job, and never go quiet while the job runs. It runs on the writer
//! thread only, never in a hook; its memory is the live set and per-place series of bounded
//! length (`collector::live::series`); its CPU is a table update per event and a judgement per
//! interval. When the writer falls behind the hooks it judges less often ([`Monitor::coarser`]:
//! every 2nd, 4th, … step or interval, said in the trace), and more often again once the writer
//! keeps up ([`Monitor::finer`]); the state stays current on every event, so an alert comes
//! later, never not at all. A panic inside it is caught, turns it off, and is one warning: the
//! trace goes on.

mod alert;
mod metrics;
mod settings;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use vramtrace_collector::analysis::Judgement;
use vramtrace_collector::analysis::{GrowthConfig, Watch, WatchConfig};
use vramtrace_collector::event::{Event, Op};
use vramtrace_collector::format::{Alert, Record};
use vramtrace_collector::live::SampleAxis;
use vramtrace_collector::torch;
use vramtrace_collector::torch::alerts::Keeping;

pub use settings::{AlertSettings, MetricsSettings, Threshold};

use crate::warn::warn;

/// `2nd`, `4th`, `32nd`, ….
fn ordinal(n: u64) -> String {
    let suffix = match (n % 10, n % 100) {
        (1, x) if x != 11 => "st",
        (2, x) if x != 12 => "nd",
        (3, x) if x != 13 => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// The coarsest resolution: a judgement every 64th step or interval.
const MAX_STRIDE: u64 = 64;

/// Set while an alert waits for the program's own view of its memory (a snapshot of PyTorch's
/// recorder) to name the line that keeps it; `vramtrace_alert_pending` reads it.
pub static ALERT_VIEW_WANTED: AtomicBool = AtomicBool::new(false);

/// How long an alert waits at least for the program's own view of its memory; longer when a
/// step takes longer (two steps' time, at most [`VIEW_WAIT_MAX`]).
pub const VIEW_WAIT: Duration = Duration::from_secs(5);
/// The longest an alert waits for that view.
pub const VIEW_WAIT_MAX: Duration = Duration::from_secs(60);
/// The hooks hand over a snapshot for alerts at most this often (`ALERT_SNAPSHOT_EVERY` of
/// `vramtrace_hooks.py`): an alert raised sooner after the last one waits until they can.
pub const VIEW_EVERY: Duration = Duration::from_secs(30);

/// An alert raised and waiting for the program's view to name its line.
struct Pending {
    alert: Alert,
    /// Until when it waits (`CLOCK_MONOTONIC` nanoseconds).
    until_ns: u64,
    /// Raised by the end-of-run judgement: its line says so.
    at_exit: bool,
}

/// The live analysis of this process, while it is on.
pub struct Monitor {
    watch: Option<Watch>,
    settings: AlertSettings,
    quiet: bool,
    /// The sequence number of the last event applied.
    last_seq: u64,
    /// The latest judgement (for the metrics).
    last: Option<Judgement>,
    /// Alerts raised so far.
    raised: u64,
    exporter: Option<metrics::Exporter>,
    /// The live-bytes series the metrics have published.
    series: metrics::Series,
    /// Whether stderr was told the resolution went down.
    told_coarse: bool,
    /// Alerts waiting for the program's view, and the snapshot of it seen last.
    pending: Vec<Pending>,
    snapshot_seen: u32,
    /// When the latest snapshot arrived (`CLOCK_MONOTONIC` nanoseconds; 0: none yet).
    snapshot_at_ns: u64,
    /// Set once the tracer lost events ([`Monitor::events_lost`]).
    lost: bool,
}

impl Monitor {
    /// The live analysis the settings ask for: alerts, metrics, or both, or only the live state
    /// kept current (`keep_state`: the trace's segments start from its snapshots); `None`: none
    /// of them.
    pub fn new(
        settings: &AlertSettings,
        metrics: &MetricsSettings,
        keep_state: bool,
        quiet: bool,
    ) -> Option<Monitor> {
        if !settings.enabled && !metrics.enabled() && !keep_state {
            return None;
        }
        let default = GrowthConfig::default();
        let config = WatchConfig {
            growth: GrowthConfig {
                horizon_steps: settings.horizon_steps,
                horizon_ns: settings.horizon.as_nanos().min(u64::MAX as u128) as u64,
                alert_fraction: match settings.threshold {
                    Some(Threshold::PartsPerMillion(ppm)) => ppm as f64 / 1e6,
                    _ => default.alert_fraction,
                },
                ..default
            },
            threshold_bytes: match settings.threshold {
                Some(Threshold::Bytes(b)) => Some(b),
                _ => None,
            },
            confirm: settings.confirm,
            confirm_time_ns: settings.confirm_time.as_nanos().min(u64::MAX as u128) as u64,
            confirm_pattern_ns: settings.confirm_pattern.as_nanos().min(u64::MAX as u128) as u64,
            every_ns: settings.interval.as_nanos().min(u64::MAX as u128) as u64,
            // Only what judges needs steps; the state kept for the trace's segments does not.
            find_steps: settings.enabled || metrics.enabled(),
        };
        Some(Monitor {
            watch: Some(Watch::new(config)),
            settings: settings.clone(),
            quiet,
            last_seq: 0,
            last: None,
            raised: 0,
            exporter: metrics::Exporter::new(metrics, quiet),
            series: metrics::Series::new(),
            told_coarse: false,
            pending: Vec::new(),
            snapshot_seen: 0,
            snapshot_at_ns: 0,
            lost: false,
        })
    }

    /// Runs `f` on the watch, unless the analysis is off; a panic turns it off with a warning.
    fn guarded<T>(&mut self, f: impl FnOnce(&mut Watch, &AlertSettings) -> T) -> Option<T> {
        let watch = self.watch.as_mut()?;
        let settings = &self.settings;
        match catch_unwind(AssertUnwindSafe(|| f(watch, settings))) {
            Ok(v) => Some(v),
            Err(payload) => {
                let what = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic".to_string());
                self.stop(&format!("failed ({what})"));
                None
            }
        }
    }

    /// Turns the analysis off for the rest of the run (its memory is given back).
    pub fn stop(&mut self, why: &str) {
        if self.watch.take().is_some() && !self.quiet {
            warn(&format!(
                "the live analysis {why}; alerts are off, the trace goes on"
            ));
        }
    }

    /// Whether the analysis is on.
    pub fn is_on(&self) -> bool {
        self.watch.is_some()
    }

    /// The live state as of the last record applied, while the analysis is on.
    pub fn state(&self) -> Option<&vramtrace_collector::live::LiveState> {
        self.watch.as_ref().map(Watch::state)
    }

    /// Halves the resolution (the writer fell behind): returns the note for the trace, or
    /// `None` when it is at its coarsest or nothing judges.
    pub fn coarser(&mut self) -> Option<String> {
        self.set_stride(
            |s| (s * 2).min(MAX_STRIDE),
            "the writer fell behind the program",
        )
    }

    /// Doubles the resolution back (the writer keeps up again); the note, or `None` when at
    /// full resolution.
    pub fn finer(&mut self) -> Option<String> {
        self.set_stride(|s| (s / 2).max(1), "the writer keeps up again")
    }

    /// Whether the resolution is lowered.
    pub fn is_coarse(&self) -> bool {
        self.stride() > 1
    }

    /// Judgements are at most every this many steps (or intervals).
    pub fn stride(&self) -> u64 {
        self.watch.as_ref().map_or(1, Watch::stride)
    }

    fn set_stride(&mut self, next: impl Fn(u64) -> u64, why: &str) -> Option<String> {
        if !self.judging() {
            return None;
        }
        let watch = self.watch.as_mut()?;
        let (was, now) = (watch.stride(), next(watch.stride()));
        if now == was {
            return None;
        }
        watch.set_stride(now);
        let step = watch.steps();
        let note = match now {
            1 => format!(
                "the live analysis judges every step (or interval) again from step {step}: {why}"
            ),
            n => format!(
                "the live analysis judges every {} step (or every {n} intervals) from step \
                 {step}: {why}; alerts may come later, they do not stop",
                ordinal(n)
            ),
        };
        // Said once on stderr, the first time it lowers; every change is in the trace.
        if was == 1 && !self.quiet && !self.told_coarse {
            self.told_coarse = true;
            warn(&note);
        }
        Some(note)
    }

    /// Whether anything reads the judgements: alerts or metrics.
    fn judging(&self) -> bool {
        self.settings.enabled || self.exporter.is_some()
    }

    /// Applies a record written to the trace (not an event) at `now_ns`; returns the alerts
    /// that a snapshot of the program's own view, arriving in it, let name their line.
    pub fn record(&mut self, r: &Record, now_ns: u64, trace_path: &str) -> Vec<Alert> {
        let snapshot = self.guarded(|w, _| {
            w.apply(r);
            torch::alerts::latest_snapshot(w.attachments())
        });
        match snapshot {
            Some(id) if id != self.snapshot_seen => {
                self.snapshot_seen = id;
                self.snapshot_at_ns = now_ns;
                self.settle(None, trace_path)
            }
            _ => Vec::new(),
        }
    }

    /// Applies an event written to the trace (with the trace's stack ids and time); judges at a
    /// step mark when a judgement is due. Returns the alerts raised.
    pub fn event(&mut self, e: &Event, trace_path: &str) -> Vec<Alert> {
        self.last_seq = e.seq;
        let step = matches!(e.op, Op::MarkStep { .. } | Op::MarkIteration { .. }) && self.judging();
        let due = self.guarded(|w, _| {
            w.apply_event(e);
            step && w.due(e.time_ns)
        });
        if due == Some(true) {
            self.judge(e.time_ns, trace_path)
        } else {
            Vec::new()
        }
    }

    /// Judges when due at `now_ns` (programs without step marks are sampled per time window),
    /// acts on the alerts whose wait for the program's view is over, and updates the metrics
    /// when due (`dropped`: events the tracer lost so far).
    pub fn tick(&mut self, now_ns: u64, trace_path: &str, dropped: u64) -> Vec<Alert> {
        if !self.judging() {
            return Vec::new();
        }
        let mut alerts = if self.guarded(|w, _| w.due(now_ns)) == Some(true) {
            self.judge(now_ns, trace_path)
        } else {
            Vec::new()
        };
        if self.pending.iter().any(|p| p.until_ns <= now_ns) {
            alerts.extend(self.settle(Some(now_ns), trace_path));
        }
        if self.exporter.as_ref().is_some_and(metrics::Exporter::due) {
            self.publish(dropped);
        }
        alerts
    }

    /// The process has begun to exit, and the writer is taking in the events it left: what they
    /// raise (at the step it was judged at) sends no signal, for the reasons [`Monitor::finish`]
    /// gives (a judgement at a step mark among them would otherwise signal a process in its
    /// exit, which then dies of it with another status and no end to its trace).
    pub fn ending(&mut self) {
        self.withhold_signal();
    }

    /// Sends no signal from here on; the alerts raised say they sent none.
    fn withhold_signal(&mut self) {
        if let Some(signal) = self.settings.signal.take() {
            self.settings.withheld = Some(signal);
        }
    }

    /// The tracer lost events (its buffer was full): frees among them leave allocations live in
    /// the state that the program freed, which reads as growth, so no alert is raised from
    /// here on (one warning says so; the metrics go on). A lost event never becomes a finding.
    pub fn events_lost(&mut self) {
        if self.lost {
            return;
        }
        self.lost = true;
        if self.settings.enabled {
            self.settings.enabled = false;
            self.pending.clear();
            ALERT_VIEW_WANTED.store(false, Ordering::Relaxed);
            if !self.quiet {
                warn(
                    "events were lost (the tracer's buffer was full): live alerts are off from \
                     here, since the frees among them cannot be told from a leak; the trace says \
                     where (vramtrace report)",
                );
            }
        }
    }

    /// At the end of the trace: a last judgement when samples came since the one before (the
    /// interval or a lowered resolution may have put it off: an alert comes late, never not at
    /// all), the alerts still waiting for the program's view, acted on (returned, for the
    /// trace), and the last metrics, from a judgement of the whole run. No signal is sent now:
    /// the program is ending, a handler it had may be gone, and the signal's default action
    /// would end it with another status.
    pub fn finish(&mut self, now_ns: u64, trace_path: &str, dropped: u64) -> Vec<Alert> {
        self.withhold_signal();
        let mut alerts = Vec::new();
        if self.judging() && self.guarded(|w, _| w.unjudged()) == Some(true) {
            // Only what this judgement raises is said to be raised at exit.
            self.settings.at_exit = true;
            alerts = self.judge(now_ns, trace_path);
            self.settings.at_exit = false;
        }
        alerts.extend(self.settle(Some(u64::MAX), trace_path));
        if self.settings.enabled && !self.quiet {
            self.say_held();
        }
        if self.exporter.is_none() {
            return alerts;
        }
        if let Some(j) = self.guarded(|w, _| w.judge(now_ns)) {
            self.last = Some(j);
        }
        self.publish(dropped);
        alerts
    }

    /// At the end, for each device whose growth would have alerted but had not lasted the wall
    /// time asked for, and that raised no alert: one line saying so.
    fn say_held(&mut self) {
        let last = self.last.take();
        let notes = self.guarded(|w, _| {
            let Some(j) = last.as_ref() else {
                return Vec::new();
            };
            (j.devices.iter())
                .filter(|d| !w.alerted(d.device))
                .filter_map(|d| alert::held_note(w, j, d.device))
                .collect::<Vec<String>>()
        });
        self.last = last;
        for note in notes.unwrap_or_default() {
            let text = format!("vramtrace: {note}\n");
            // SAFETY: writes our own buffer to fd 2.
            unsafe { libc::write(2, text.as_ptr() as *const libc::c_void, text.len()) };
        }
    }

    fn publish(&mut self, dropped: u64) {
        let (last, raised) = (self.last.take(), self.raised);
        let mut shown = std::mem::take(&mut self.series);
        let text = self.guarded(|w, _| {
            let reading = metrics::Reading {
                state: w.state(),
                steps: w.steps(),
                judgement: last.as_ref(),
                dropped,
                alerts: raised,
            };
            metrics::render(&reading, &mut shown)
        });
        (self.last, self.series) = (last, shown);
        if let (Some(text), Some(exporter)) = (text, self.exporter.as_mut()) {
            exporter.publish(text);
        }
    }

    /// Judges growth now and acts on each alert raised: the live-set snapshot, the warning, the
    /// signal; with PyTorch's recorder on, the alert first waits for the program's view (see
    /// the module's doc). Returns the alerts acted on, for the trace.
    fn judge(&mut self, now_ns: u64, trace_path: &str) -> Vec<Alert> {
        let after_seq = self.last_seq;
        let quiet = self.quiet;
        let Some((j, alerts, wait)) = self.guarded(|w, settings| {
            let j = w.judge(now_ns);
            let raised: Vec<Alert> = (j.raised.iter())
                .filter(|_| settings.enabled)
                .filter_map(|&d| alert::describe(w, &j, d, now_ns, after_seq))
                .collect();
            if torch::alerts::recorder_on(w.attachments()) && !raised.is_empty() {
                // Two steps' time, within bounds: the hooks answer at the next step.
                let step = j
                    .unit_ns
                    .filter(|_| j.axis == SampleAxis::Steps)
                    .unwrap_or(0);
                let wait =
                    (2 * step).clamp(VIEW_WAIT.as_nanos() as u64, VIEW_WAIT_MAX.as_nanos() as u64);
                return (j, raised, Some(wait));
            }
            let mut acted = raised;
            for a in &mut acted {
                alert::act(w, a, settings, trace_path, quiet);
            }
            (j, acted, None)
        }) else {
            return Vec::new();
        };
        self.last = Some(j);
        if let Some(wait) = wait {
            // The hooks hand over at most one snapshot per VIEW_EVERY: wait for the next.
            let next_view = match self.snapshot_at_ns {
                0 => now_ns,
                at => now_ns.max(at.saturating_add(VIEW_EVERY.as_nanos() as u64)),
            };
            let until_ns = next_view.saturating_add(wait);
            let at_exit = self.settings.at_exit;
            self.pending.extend(alerts.into_iter().map(|alert| Pending {
                alert,
                until_ns,
                at_exit,
            }));
            // The program is ending (or out of memory) and handed over its view already: no
            // step comes to hand over a newer one, so the alert is named from that.
            if self.guarded(|w, _| torch::alerts::final_snapshot(w.attachments())) == Some(true) {
                return self.settle(None, trace_path);
            }
            ALERT_VIEW_WANTED.store(true, Ordering::Relaxed);
            return Vec::new();
        }
        self.raised += alerts.len() as u64;
        alerts
    }

    /// Acts on the alerts waiting for the program's view: all of them, naming each device's
    /// line from the latest snapshot of PyTorch's recorder (`now_ns` `None`: one just arrived),
    /// or those whose wait is over by `now_ns`, named by the driver's place.
    fn settle(&mut self, now_ns: Option<u64>, trace_path: &str) -> Vec<Alert> {
        let due: Vec<Pending> = match now_ns {
            None => std::mem::take(&mut self.pending),
            Some(now) => {
                let (due, wait) = std::mem::take(&mut self.pending)
                    .into_iter()
                    .partition(|p| p.until_ns <= now);
                self.pending = wait;
                due
            }
        };
        if self.pending.is_empty() {
            ALERT_VIEW_WANTED.store(false, Ordering::Relaxed);
        }
        if due.is_empty() {
            return Vec::new();
        }
        let quiet = self.quiet;
        let alerts = self
            .guarded(|w, settings| {
                // Named from the program's view when it answered, or when it handed over its
                // last one (at exit) before the wait ended.
                let answered = now_ns.is_none() || torch::alerts::final_snapshot(w.attachments());
                let devices: Vec<i32> = due.iter().map(|p| p.alert.device).collect();
                let places = if answered {
                    let config = w.growth_config();
                    torch::alerts::keeping_places(w.state(), w.attachments(), &config, &devices)
                } else {
                    Vec::new()
                };
                let mut acted = Vec::new();
                for p in due {
                    let mut a = p.alert;
                    match places.iter().find(|(d, _)| *d == a.device).map(|(_, k)| k) {
                        // Tensors stay flat where the allocator's cache grows: no leak to
                        // name. The device may alert again if the growth lasts.
                        Some(Keeping::CacheOnly) => {
                            w.withdraw(a.device);
                            continue;
                        }
                        Some(Keeping::Line(site, rate)) => alert::name_view(&mut a, site, *rate),
                        Some(Keeping::Unknown) | None => {}
                    }
                    let settings = &AlertSettings {
                        at_exit: p.at_exit,
                        ..settings.clone()
                    };
                    alert::act(w, &mut a, settings, trace_path, quiet);
                    acted.push(a);
                }
                acted
            })
            .unwrap_or_default();
        self.raised += alerts.len() as u64;
        alerts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramtrace_collector::event::{Api, MemKind};

    /// The events of a loop that keeps 1 MiB a step for `steps` steps.
    fn leaking_loop(steps: u64) -> Vec<Event> {
        let mut events = Vec::new();
        for step in 1..=steps {
            let seq = events.len() as u64 + 1;
            let keep = Op::Alloc {
                kind: MemKind::Device,
                ptr: 0x7000_0000 + step * (1 << 20),
                size: 1 << 20,
                stream: 0,
                pool: 0,
                flags: 0,
                pitch: 0,
            };
            events.push(Event {
                time_ns: seq * 1_000_000,
                caller: 0x1234,
                ..Event::new(seq, Api::CudaMalloc, keep)
            });
            let seq = seq + 1;
            events.push(Event {
                time_ns: seq * 1_000_000,
                ..Event::new(seq, Api::TracerMarkStep, Op::MarkStep { step })
            });
        }
        events
    }

    // Events the writer takes in after the process began to exit (a loop faster than the
    // writer) raise their alert and send no signal, though one was asked for: sent, it would end
    // this test's process (SIGUSR1's default action).
    #[test]
    fn an_alert_raised_while_the_process_exits_sends_no_signal() {
        let (settings, warnings) = {
            let mut w = Vec::new();
            let get = |k: &str| match k {
                "VRAMTRACE_ALERT_SIGNAL" => Some("USR1".to_string()),
                "VRAMTRACE_ALERT_INTERVAL_MS" => Some("0".to_string()),
                "VRAMTRACE_ALERT_THRESHOLD" => Some("512KiB/step".to_string()),
                _ => None,
            };
            (AlertSettings::from_lookup(get, &mut w), w)
        };
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(settings.signal, Some(libc::SIGUSR1));
        let mut monitor = Monitor::new(&settings, &MetricsSettings::default(), false, true)
            .expect("alerts are on");
        monitor.ending();
        let alerts: Vec<Alert> = (leaking_loop(20).iter())
            .flat_map(|e| monitor.event(e, "/tmp/t.vtrace"))
            .collect();
        assert_eq!(alerts.len(), 1, "{alerts:?}");
        assert_eq!((alerts[0].signal, alerts[0].device), (0, 0));
        assert!(alerts[0].step < 20, "{:?}", alerts[0]);
        // Its line says the signal asked for was not sent: a program counting on it to save a
        // checkpoint would otherwise wait for it.
        let said = alert::said(&alerts[0], &monitor.settings);
        assert!(
            said.ends_with("; no SIGUSR1 sent: the process was exiting"),
            "{said}"
        );
    }

    // Once the tracer lost events, no alert is raised: the frees among them would read as
    // growth (the same loop alerts without the loss).
    #[test]
    fn no_alert_is_raised_once_events_were_lost() {
        let mut w = Vec::new();
        let get = |k: &str| match k {
            "VRAMTRACE_ALERT_INTERVAL_MS" => Some("0".to_string()),
            "VRAMTRACE_ALERT_THRESHOLD" => Some("512KiB/step".to_string()),
            _ => None,
        };
        let settings = AlertSettings::from_lookup(get, &mut w);
        let raised = |lost: bool| {
            let mut m = Monitor::new(&settings, &MetricsSettings::default(), false, true).unwrap();
            if lost {
                m.events_lost();
            }
            (leaking_loop(20).iter())
                .flat_map(|e| m.event(e, "/tmp/t.vtrace"))
                .count()
        };
        assert_eq!((raised(false), raised(true)), (1, 0));
    }
}
