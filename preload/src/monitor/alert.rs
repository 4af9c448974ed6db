//! Acting on an alert: the [`Alert`] record (numbers of the judgement that raised it, the place
//! growing fastest named in words), the live set written beside the trace when asked
//! (`VRAMTRACE_ALERT_SNAPSHOT`), one line on stderr, and the signal when asked
//! (`VRAMTRACE_ALERT_SIGNAL`, never by default): last, so that the program's handler finds the
//! snapshot written.

use std::ffi::CStr;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

use serde::Serialize;
use vramtrace_collector::analysis::is_library_module;
use vramtrace_collector::analysis::short_function;
use vramtrace_collector::analysis::{leaks, Leaks, OwnerKind, SiteName, Watch};
use vramtrace_collector::analysis::{Judgement, Reason};
use vramtrace_collector::format::Alert;
use vramtrace_collector::live::SampleAxis;
use vramtrace_collector::units::{self, base_name, bytes, span, when_full_in};

use super::settings::AlertSettings;
use crate::warn::warn;

/// Places listed in a snapshot.
const SNAPSHOT_PLACES: usize = 100;

/// The alert of `device` in judgement `j`.
pub fn describe(
    w: &Watch,
    j: &Judgement,
    device: i32,
    time_ns: u64,
    after_seq: u64,
) -> Option<Alert> {
    let d = j.device(device)?;
    let steps = j.axis == SampleAxis::Steps;
    let mut a = Alert {
        time_ns,
        after_seq,
        step: j.steps,
        device,
        reason: d.alert?.name().to_string(),
        rate: d.steady_growth.round() as u64,
        unit: match (steps, j.guessed) {
            (true, false) => Alert::STEP,
            (true, true) => Alert::GUESSED_STEP,
            (false, _) => "window",
        }
        .to_string(),
        unit_ns: j.unit_ns.unwrap_or(0),
        threshold: d.threshold.round() as u64,
        live_bytes: d.live_bytes,
        device_memory: d.device_memory,
        steps_to_full: d
            .projection
            .and_then(|p| p.steps_to_full)
            .map(|s| s.floor() as u64),
        seconds_to_full: d
            .projection
            .and_then(|p| p.seconds_to_full)
            .map(|s| s.floor() as u64),
        ..Alert::default()
    };
    if let Some(top) = &d.top {
        a.place = place_name(w, &top.site);
        // A framework allocator's segment: the line made it grow, not necessarily keeps it.
        if top.site.is_framework_pool() {
            a.place
                .push_str(" (where the allocator asked the driver for memory)");
        }
        a.place_rate = top.course.rate.round() as u64;
        a.stack = top.site.stack;
        a.caller = top.site.caller;
        a.py_stack = top.site.py_stack;
    }
    Some(a)
}

/// What a run that ends without an alert on `device` says when its growth would have alerted
/// but had not lasted the wall time asked for (a loop without step marks shorter than the
/// confirmation): silence would read as "no leak".
pub fn held_note(w: &Watch, j: &Judgement, device: i32) -> Option<String> {
    let d = j.device(device)?;
    let held = d.held?;
    let unit = match j.guessed {
        true => Alert::GUESSED_STEP.to_string(),
        false => units::rate_unit(j.axis == SampleAxis::Steps, j.unit_ns.unwrap_or(0)),
    };
    let place = d
        .top
        .as_ref()
        .map_or(String::new(), |t| format!(" at {}", place_name(w, &t.site)));
    if let Some((lasted, wanted)) = held.samples {
        return Some(format!(
            "no live alert on device {device}: it grows steadily, +{} per {unit}{place}, but for \
             {lasted} {unit}s of the {wanted} that VRAMTRACE_ALERT_CONFIRM asks; `vramtrace \
             report` judges the whole trace",
            bytes(d.steady_growth.round() as u64),
        ));
    }
    let (setting, judged) = match held.pattern {
        true => (
            "VRAMTRACE_ALERT_CONFIRM_PATTERN",
            "per step of its allocation pattern",
        ),
        false => ("VRAMTRACE_ALERT_CONFIRM_TIME", "per time window"),
    };
    Some(format!(
        "no live alert on device {device}: it grows steadily, +{} per {unit}{place}, but for {} of \
         the {} that {setting} asks (judged {judged}, without step marks); `vramtrace report` \
         judges the whole trace",
        bytes(d.steady_growth.round() as u64),
        span(held.lasted_ns),
        span(held.wanted_ns),
    ))
}

/// Names alert `a` by the place the program's own view of its memory found keeping it (PyTorch's
/// tensors at a line, and that line's rate).
pub fn name_view(a: &mut Alert, site: &SiteName, rate: f64) {
    let Some(line) = &site.source else {
        return;
    };
    let view = site.module_name.as_deref().unwrap_or("tensors");
    a.place = format!("{} ({view})", site.on_its_path(line.label()));
    a.place_rate = rate.round() as u64;
    (a.stack, a.caller, a.py_stack) = (0, 0, 0);
}

/// The place in words: the program's Python line and the module that asked
/// (`train.py:42 in step (libc10_cuda.so)`); else, where a library (NCCL, a framework)
/// allocated for a native program, the program's function and the library's it called
/// (`main → fw_alloc (libtorch_standin.so)`); else the native function that asked and its
/// module (`fw_alloc (libtorch_standin.so)`). From the process's own dynamic symbols: a
/// function they do not name is `module+offset` (the report names it from the binaries).
pub fn place_name(w: &Watch, site: &SiteName) -> String {
    // With its owner module, as the report says a place.
    if let Some(line) = w.python_place(site) {
        return match &site.module_name {
            Some(module) => format!("{line} ({module})"),
            None => line,
        };
    }
    let library_owned = !matches!(site.owner, OwnerKind::Extension | OwnerKind::Unknown);
    if library_owned && site.program_frame != 0 && site.entry_frame != 0 {
        let program = native_parts(site.program_frame).at_line();
        let entry = native_parts(site.entry_frame);
        return format!("{program} → {} ({})", entry.function, entry.module);
    }
    native_name(w.owner_frame(site))
}

/// `function (module)` (at its source line when the program's own), `module+0x1a2b`, or the
/// bare address.
fn native_name(address: u64) -> String {
    let parts = native_parts(address);
    let module = parts.module.clone();
    let function = if is_library_module(&module) {
        parts.function
    } else {
        parts.at_line()
    };
    if module.is_empty() || function.starts_with(&module) {
        function
    } else {
        format!("{function} ({module})")
    }
}

/// A code address named from the process's own symbols.
struct NativeParts {
    function: String,
    module: String,
    /// The source file's base name and line, when line tables name them.
    line: Option<(String, u32)>,
}

impl NativeParts {
    /// `main at wl_train.c:108`, or the function alone.
    fn at_line(self) -> String {
        match self.line {
            Some((file, line)) => format!("{} at {file}:{line}", self.function),
            None => self.function,
        }
    }
}

/// `(function, module)` of `address`: the function as the module's symbol tables name it (the
/// `backtrace` crate reads the static ones too, so a program's own `main` is named, as the
/// report names it), else `module+0x1a2b` by `dladdr`, else the bare address (with an empty
/// module). An alert is rare; reading a module's symbols then is its cost.
fn native_parts(address: u64) -> NativeParts {
    let (mut function, mut line) = (None, None);
    // The return address points after the call: the byte before it is inside the caller (the
    // reports look it up the same way). The innermost (inlined) frame comes first.
    backtrace::resolve(address.saturating_sub(1) as *mut libc::c_void, |symbol| {
        if function.is_none() {
            function = symbol.name().map(|n| format!("{n:#}"));
            line = symbol.filename().zip(symbol.lineno()).map(|(f, l)| {
                let file = f
                    .file_name()
                    .map_or(String::new(), |n| n.to_string_lossy().into());
                (file, l)
            });
        }
    });
    let (name, module) = dladdr_parts(address);
    NativeParts {
        function: function.map_or(name, |f| short_function(&f)),
        module,
        line,
    }
}

/// `(function, module)` of `address` by `dladdr` (dynamic symbols only).
fn dladdr_parts(address: u64) -> (String, String) {
    // SAFETY: a zeroed Dl_info is valid for dladdr to fill; dladdr only reads the loader's
    // tables. The strings it returns belong to loaded objects and are copied at once.
    let (module, symbol, base) = unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if address == 0 || libc::dladdr(address as *const libc::c_void, &mut info) == 0 {
            return (format!("{address:#x}"), String::new());
        }
        let text = |p: *const libc::c_char| {
            (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
        };
        (
            text(info.dli_fname),
            text(info.dli_sname),
            info.dli_fbase as u64,
        )
    };
    let module = module.unwrap_or_default();
    let module = base_name(&module).to_string();
    match symbol {
        Some(s) => (s, module),
        None => (
            units::module_offset(Some(&module), address.wrapping_sub(base)),
            module,
        ),
    }
}

/// When alert `a` was raised, as its line begins: ` (rank 3) at exit, step 11`, ` at step 11`,
/// or nothing for a rate per time window before any step mark.
fn when(a: &Alert, settings: &AlertSettings) -> String {
    let rank = settings
        .rank
        .map_or(String::new(), |r| format!(" (rank {r})"));
    match (settings.at_exit, a.at_step()) {
        (true, Some(step)) => format!("{rank} at exit, {step}"),
        (true, None) => format!("{rank} at exit"),
        (false, Some(step)) => format!("{rank} at {step}"),
        (false, None) => rank,
    }
}

/// The warning line.
fn line(a: &Alert, settings: &AlertSettings) -> String {
    let why = Reason::words(a);
    let unit = a.unit_name();
    let place = if a.place.is_empty() {
        "an unknown place"
    } else {
        &a.place
    };
    // The place's own rate, when it is not the device's (the tensors a line keeps, where the
    // device grows by the allocator's segments for them and more).
    let own = a.place_rate.abs_diff(a.rate) * 10 > a.rate;
    let mut s = if own && a.place_rate > 0 {
        format!(
            "ALERT{}: device {} grows steadily, +{} per {} ({why}); +{} per {} of it kept at \
             {place}; {} live",
            when(a, settings),
            a.device,
            bytes(a.rate),
            unit,
            bytes(a.place_rate),
            unit,
            bytes(a.live_bytes)
        )
    } else {
        format!(
            "ALERT{}: device {} grows steadily, +{} per {} at {place} ({why}); {} live",
            when(a, settings),
            a.device,
            bytes(a.rate),
            unit,
            bytes(a.live_bytes)
        )
    };
    // The time of its steps at the step time it judged with, not the record's whole seconds:
    // a run short of a second from full says how short.
    let seconds = match a.steps_to_full {
        Some(n) if a.per_step() && a.unit_ns > 0 => Some(n as f64 * a.unit_ns as f64 / 1e9),
        _ => a.seconds_to_full.map(|t| t as f64),
    };
    // A device that ran out of memory is full already: its reason says so.
    let full = when_full_in(a.steps_to_full.map(|n| n as f64), seconds, a.step_name())
        .filter(|_| a.reason != Reason::OutOfMemory.name());
    if let Some(when) = full {
        s.push_str(&format!(", full in {when}"));
    }
    if a.signal != 0 {
        s.push_str(&format!("; signal {} sent", signal_name(a.signal)));
    }
    if !a.snapshot.is_empty() {
        s.push_str(&format!("; live set in {}", a.snapshot));
    }
    s
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        _ => "?",
    }
}

/// The snapshot's document.
#[derive(Serialize)]
struct Snapshot<'a> {
    schema: &'static str,
    pid: u32,
    alert: &'a Alert,
    /// What was live when the alert was raised, by place, largest first (at most
    /// [`SNAPSHOT_PLACES`]).
    live: Leaks,
}

/// The file of alert `a`'s live set, beside the trace.
fn snapshot_path(a: &Alert, trace_path: &str) -> String {
    format!("{trace_path}.alert-device{}-step{}.json", a.device, a.step)
}

/// Writes the live set of `w` to `path`, a file that did not exist (mode 0600, like the
/// trace).
fn write_snapshot(w: &Watch, a: &Alert, path: &str) -> std::io::Result<()> {
    let mut live = leaks(w.state());
    live.sites.truncate(SNAPSHOT_PLACES);
    for s in &mut live.sites {
        s.site.label = Some(place_name(w, &s.site));
    }
    // The alert as the trace records it once this file is written: naming it.
    let alert = Alert {
        snapshot: path.to_string(),
        ..a.clone()
    };
    let doc = Snapshot {
        schema: "vramtrace-alert-snapshot/1",
        pid: std::process::id(),
        alert: &alert,
        live,
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)?;
    serde_json::to_writer_pretty(&mut file, &doc)?;
    file.write_all(b"\n")
}

/// Alert `a`'s line as the program's stderr gets it: raised at exit, by a rank, or with the
/// signal asked for withheld, it says so.
pub(super) fn said(a: &Alert, settings: &AlertSettings) -> String {
    let mut said = line(a, settings);
    if let Some(sig) = settings.withheld {
        said.push_str(&format!(
            "; no {} sent: the process was exiting",
            signal_name(sig)
        ));
    }
    said
}

/// Acts on alert `a` as `settings` ask; fills in the signal sent and the snapshot written.
pub fn act(w: &Watch, a: &mut Alert, settings: &AlertSettings, trace_path: &str, quiet: bool) {
    a.signal = settings.signal.unwrap_or(0);
    if settings.snapshot {
        let path = snapshot_path(a, trace_path);
        match write_snapshot(w, a, &path) {
            Ok(()) => a.snapshot = path,
            // A file of that name (another run's, a user's) is never replaced.
            Err(e) if !quiet && e.kind() == std::io::ErrorKind::AlreadyExists => warn(&format!(
                "the alert's live set is not written: {path} is there already (never replaced)"
            )),
            Err(e) if !quiet => warn(&format!("cannot write the alert's live set to {path}: {e}")),
            Err(_) => {}
        }
    }
    if !quiet {
        let text = format!("vramtrace: {}\n", said(a, settings));
        // SAFETY: writes our own buffer to fd 2.
        unsafe { libc::write(2, text.as_ptr() as *const libc::c_void, text.len()) };
    }
    if let Some(sig) = settings.signal {
        // SAFETY: kill has no memory preconditions. The signal is directed at the process: the
        // writer thread blocks asynchronous signals, so one of the program's threads takes it.
        unsafe { libc::kill(libc::getpid(), sig) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A rate per time window says the window's length: "per window" alone says nothing.
    #[test]
    fn a_rate_per_window_says_its_length() {
        let a = Alert {
            step: 40,
            device: 0,
            reason: Reason::Growth.name().to_string(),
            rate: 1 << 20,
            unit: "window".to_string(),
            unit_ns: 128_000_000,
            threshold: 1 << 19,
            live_bytes: 64 << 20,
            place: "train.py:12 in <module>".to_string(),
            place_rate: 1 << 20,
            ..Alert::default()
        };
        let said = line(&a, &AlertSettings::default());
        assert!(
            said.starts_with(
                "ALERT at step 40: device 0 grows steadily, +1.0 MiB per 128 ms window at \
                 train.py:12 in <module> (above the threshold of 512.0 KiB per 128 ms window)"
            ),
            "{said}"
        );
    }

    // A program that marks no step raises its alert per time window at step 0: the line gives
    // no step, and its time to full, recorded in whole seconds, is under one, not "0 s".
    #[test]
    fn a_window_alert_before_any_step_names_none() {
        let a = Alert {
            step: 0,
            device: 0,
            reason: Reason::Growth.name().to_string(),
            rate: 2 << 20,
            unit: "window".to_string(),
            unit_ns: 1_000_000,
            threshold: 1 << 20,
            live_bytes: 18 << 20,
            device_memory: 1 << 30,
            seconds_to_full: Some(0),
            place: "new_comm at wl_shapes.c:113".to_string(),
            place_rate: 2 << 20,
            ..Alert::default()
        };
        let at_exit = AlertSettings {
            at_exit: true,
            rank: Some(3),
            ..AlertSettings::default()
        };
        assert_eq!(
            said(&a, &at_exit),
            "ALERT (rank 3) at exit: device 0 grows steadily, +2.0 MiB per 1 ms window at new_comm \
             at wl_shapes.c:113 (above the threshold of 1.0 MiB per 1 ms window); 18.0 MiB live, \
             full in under a second"
        );
        let marked = Alert { step: 12, ..a };
        assert!(
            said(&marked, &at_exit).starts_with("ALERT (rank 3) at exit, step 12: device 0 "),
            "{}",
            said(&marked, &at_exit)
        );
    }
}
