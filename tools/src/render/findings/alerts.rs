//! The live alerts a trace carries, as the report says them: each as the program's stderr said
//! it, and what the whole run's diagnosis says of it where it says otherwise.

use vramtrace_collector::analysis::{Analysis, FindingClass, RaisedAlert, Reason, SiteName};
use vramtrace_collector::live::{Holder, SampleAxis};
use vramtrace_collector::units::{base_name, when_full_in};

use super::site_label;
use crate::render::units::signed_bytes;

/// An alert the tracer raised while the program ran, as the program's stderr said it, but for
/// its step, counted as the report counts steps, and its time to full, from its steps at the
/// run's step time (`step_ns`, the report's) when it has one, which the line says: the tracer
/// timed the steps it had seen, a warm-up among them, and the record keeps whole seconds.
pub(crate) fn alert_line(raised: &RaisedAlert, step_ns: Option<u64>) -> String {
    let a = &raised.alert;
    // Labelled as every other place; a line PyTorch's tensors named, by its file's base name.
    let place = match &raised.site {
        Some(s) => site_label(s),
        None => alert_place(&a.place),
    };
    let unit = alert_unit(a);
    let steps = a.steps_to_full.map(|n| n as f64);
    let retimed = match (steps, step_ns) {
        (Some(n), Some(ns)) if a.per_step() => Some(n * ns as f64 / 1e9),
        _ => None,
    };
    let seconds = retimed.or(a.seconds_to_full.map(|t| t as f64));
    // The time is not the one stderr said (the steps the tracer had timed then): said so.
    let retimed = if retimed.is_some() {
        " at the run's step time"
    } else {
        ""
    };
    // A device that ran out of memory is full already: its reason says so.
    let full = when_full_in(steps, seconds, a.step_name())
        .filter(|_| a.reason != Reason::OutOfMemory.name())
        .map_or(String::new(), |when| format!("; full in {when}{retimed}"));
    let own = if a.place_rate.abs_diff(a.rate) * 10 > a.rate && a.place_rate > 0 {
        format!(", {} {unit} of it", signed_bytes(a.place_rate as f64))
    } else {
        String::new()
    };
    let signal = signal_name(a.signal).map_or(String::new(), |s| format!("; signal {s} sent"));
    // Not "while running": the tracer's last judgement is made as the process exits, which
    // the trace does not record (its stderr said "ALERT at exit").
    // A rate per time window before any step mark: no step to name.
    let when = a
        .at_step()
        .map_or(String::new(), |step| format!("at {step}: "));
    format!(
        "{when}device {} grew steadily, {} {unit}{own} at {place} ({}){full}{signal}",
        a.device,
        signed_bytes(a.rate as f64),
        Reason::words(a)
    )
}

/// The unit of a live alert's rate: `per step`, `per 128 ms window`.
pub(crate) fn alert_unit(a: &vramtrace_collector::format::Alert) -> String {
    format!("per {}", a.unit_name())
}

/// What the whole run's diagnosis says of a live alert, where it says otherwise: the alert was
/// raised on what the run's end shows was no steady growth (a warm-up), or at another place than
/// the finding of that device's growth (the line that asked a caching allocator for segments,
/// where the finding names the line that keeps the tensors). Empty when they agree: the user
/// reads one answer, not two.
pub(crate) fn alert_against_diagnosis(a: &Analysis, raised: &RaisedAlert) -> String {
    let device = Some(Holder::Device {
        device: raised.alert.device,
    });
    let growth =
        (a.diagnosis.iter()).find(|f| f.class == FindingClass::SteadyGrowth && f.holder == device);
    // Where reading began later (segments rotation removed, or `--last`), the steps read are not
    // the whole run the tracer judged: they can neither refute the alert nor date its growth.
    let Some(finding) = growth else {
        let stopped = (raised.growth_stopped)
            .then(|| kept_at_alerts_place(a, raised))
            .flatten();
        return match (a.steps.from_step, stopped) {
            // Read from a segment's snapshot: the objects still live say when they were made.
            (Some(_), Some(l)) => format!(
                "; the live set at the end shows that growth stopped: {} made over steps {}..{} \
                 is still held, nothing made there since (bounded growth, not judged steady)",
                crate::render::units::bytes(l.bytes),
                l.first_step,
                l.last_step
            ),
            (Some(from), None) => format!(
                "; the steps read (from step {from}: those before are not on disk, or not \
                 asked for) show no steady growth there"
            ),
            (None, _) => match kept_at_alerts_place(a, raised) {
                // The place grew for long, then stopped before the end: said as the run shows
                // it, not as a refutation of what the alert saw.
                Some(l) => format!(
                    "; the whole run shows that growth stopped: {} made over steps {}..{} is \
                     still held at the end, flat since (bounded growth, not judged steady)",
                    crate::render::units::bytes(l.bytes),
                    l.first_step,
                    l.last_step
                ),
                None => "; not confirmed: the whole run shows no steady growth there".to_string(),
            },
        };
    };
    // Raised before the growth the run shows began (a start-up's rise, say): not that growth.
    let began = (finding.evidence.growth_from)
        .filter(|_| a.growth.axis == SampleAxis::Steps && a.steps.from_step.is_none());
    if let Some(step) = began.filter(|&step| raised.alert.step < step) {
        let place = finding.site.as_ref().map_or("?".to_string(), site_label);
        return format!(
            "; not confirmed: it came before the steady growth the whole run shows, after step \
             {step} at {place}"
        );
    }
    let mut said = match &finding.site {
        Some(site) if !names_place(raised, site) => {
            format!(
                "; the whole run's diagnosis names {} for it",
                site_label(site)
            )
        }
        _ => String::new(),
    };
    // The device's rate as the tracer had it then (its first steps, a warm-up among them) and
    // over the whole run, where they are far apart: the time to full differs as much.
    let whole = (a.growth.holders.iter())
        .find(|h| Some(h.holder) == device)
        .map(|h| h.steady_growth);
    let then = raised.alert.rate as f64;
    let per_step = raised.alert.per_step() && a.growth.axis == SampleAxis::Steps;
    if let Some(whole) =
        whole.filter(|&w| per_step && w > 0.0 && (then > 2.0 * w || 2.0 * then < w))
    {
        said.push_str(&format!(
            "; over the whole run the device grew {} {}",
            signed_bytes(whole),
            alert_unit(&raised.alert)
        ));
    }
    said
}

/// The live set's place of the alert, where it holds at the end objects made over many steps
/// ([`vramtrace_collector::analysis::LeakSite::grew_for_long`]): growth the alert saw that stopped.
fn kept_at_alerts_place<'a>(
    a: &'a Analysis,
    raised: &RaisedAlert,
) -> Option<&'a vramtrace_collector::analysis::LeakSite> {
    (a.leaks.sites.iter()).find(|l| l.grew_for_long() && names_place(raised, &l.site))
}

/// Whether live alert `raised` names `site`'s place: the same label, whether the alert came with
/// a call site or only with a line of PyTorch's tensors (its path as the process saw it).
fn names_place(raised: &RaisedAlert, site: &SiteName) -> bool {
    let named = |s: &SiteName| s.label.clone().unwrap_or_else(|| s.site.clone());
    match &raised.site {
        Some(s) => named(s) == named(site),
        // The tracer writes the line with the view that saw it (`… (PyTorch tensors)`).
        None => {
            let place = alert_place(&raised.alert.place);
            place == site_label(site) || place == named(site)
        }
    }
}

/// A tensors' line as an alert names it (`/path/train.py:48 in step`), by its file's base name,
/// as every other place is labelled.
fn alert_place(place: &str) -> String {
    match place.split_once(':') {
        Some((file, rest)) => format!("{}:{rest}", base_name(file)),
        None => place.to_string(),
    }
}

/// The signal the tracer sent with an alert, by name (`None`: none was sent).
pub(crate) fn signal_name(signal: i32) -> Option<&'static str> {
    match signal {
        0 => None,
        libc::SIGUSR1 => Some("SIGUSR1"),
        libc::SIGUSR2 => Some("SIGUSR2"),
        _ => Some("a signal"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramtrace_collector::analysis::{OwnerKind, SourceLine};

    // An alert with only a tensors' line (PyTorch's history named it while the program ran)
    // names the finding's place when the line is the same: on the GPU every such alert was
    // said to disagree with the diagnosis that named its very line.
    #[test]
    fn an_alert_at_a_tensors_line_names_the_finding_at_that_line() {
        let line = |n: u32| {
            let source = SourceLine {
                file: "/work/app/train.py".to_string(),
                line: n,
                function: "<module>".to_string(),
            };
            let mut s = SiteName::of_line("PyTorch tensors", OwnerKind::Torch, source);
            s.label = Some(format!("train.py:{n} in <module>"));
            s
        };
        let raised = |place: &str| RaisedAlert {
            alert: vramtrace_collector::format::Alert {
                place: place.to_string(),
                ..Default::default()
            },
            site: None,
            growth_stopped: false,
        };
        // As the tracer writes it, with the view; and without (older traces).
        for place in [
            "/work/app/train.py:57 in <module> (PyTorch tensors)",
            "/work/app/train.py:57 in <module>",
        ] {
            assert!(names_place(&raised(place), &line(57)), "{place}");
            assert!(!names_place(&raised(place), &line(40)), "{place}");
        }
    }
}
