//! `export --format flamegraph`: a flame graph SVG (drawn by the `inferno` crate) of the bytes
//! live at the end, at each device's highest point, or grown per step, by stack. The root frame
//! of each tower is the holder (`device 0`, `host`), so devices never mix.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{bail, Context, Result};
use inferno::flamegraph::{from_lines, Options};
use vramtrace_collector::analysis::growth;
use vramtrace_collector::analysis::FindingClass;
use vramtrace_collector::live::{Holder, LiveState, SampleAxis};
use vramtrace_collector::symbols::{Attribution, CallRef, Symbolizer};

use super::frames::Stacks;
use super::{ExportArgs, Moment, Written};
use crate::load::{load_with_steps, LoadedTrace};
use crate::render::findings::site_label;
use crate::timeline::bands::site_call;

/// A frame name as a folded-stack line can carry it: `;` separates frames there.
fn folded(name: &str) -> String {
    name.replace(';', ":").replace(['\n', '\r'], " ")
}

/// Bytes per (holder, call) for the moment asked for, and the graph's title.
fn weights(
    state: &LiveState,
    args: &ExportArgs,
    growth_config: &vramtrace_collector::analysis::GrowthConfig,
) -> (BTreeMap<(Holder, CallRef), u64>, String) {
    let mut w: BTreeMap<(Holder, CallRef), u64> = BTreeMap::new();
    let title = match args.at.unwrap_or(Moment::End) {
        Moment::End => {
            for o in state.live_objects() {
                let holder = match (o.device_bytes(), o.host_bytes()) {
                    (0, 0) => continue,
                    (0, _) => Holder::Host,
                    _ => Holder::Device { device: o.device },
                };
                let bytes = o.device_bytes() + o.host_bytes();
                *w.entry((holder, CallRef::from(&*o.origin))).or_default() += bytes;
            }
            "Live at the end".to_string()
        }
        Moment::Peak => {
            for h in state.holders().iter().filter(|h| h.peak.event > 0) {
                for s in state.peak_holdings(h.holder) {
                    if let Some(call) = site_call(state, s.site) {
                        *w.entry((h.holder, call)).or_default() += s.bytes;
                    }
                }
            }
            "Live at each device's highest point".to_string()
        }
        Moment::Growth => {
            let g = growth(state, growth_config);
            for s in g.steady.iter().filter(|s| s.course.slope() >= 0.5) {
                let call = CallRef {
                    caller: s.site.caller,
                    stack: s.site.stack,
                    py_stack: s.site.py_stack,
                };
                *w.entry((s.holder, call)).or_default() += s.course.slope().round() as u64;
            }
            match g.axis {
                SampleAxis::Steps => "Grown per step by the call sites growing steadily".into(),
                SampleAxis::Time => format!(
                    "Grown per {} ms window by the call sites growing steadily (no steps)",
                    g.window_ns.unwrap_or(0) / 1_000_000
                ),
            }
        }
    };
    (w, title)
}

/// Writes the flame graph; returns what it shows.
pub fn write(args: &ExportArgs, out: &mut dyn Write) -> Result<Written> {
    let trace = load_with_steps(
        args.trace(),
        args.window.read_from(),
        args.analysis.config(),
    )?;
    let state = &trace.state;
    let (weights, title) = weights(state, args, &trace.growth);
    if weights.values().all(|&b| b == 0) {
        // A trace read in part says so: its end is where reading stopped.
        let gaps = trace.gaps();
        let read = match gaps.is_empty() {
            true => String::new(),
            false => format!(" of what could be read: the trace {}", gaps.join(", and ")),
        };
        bail!(
            "{}: nothing to draw ({}{read})",
            args.trace().display(),
            match args.at.unwrap_or(Moment::End) {
                Moment::End => "no memory is live at the end",
                Moment::Peak => "no memory was ever live",
                Moment::Growth => "no call site grows steadily",
            }
        );
    }
    let mut symbols = Symbolizer::from_env();
    let kept = match args.at.unwrap_or(Moment::End) {
        Moment::Growth => kept_at(&trace, &mut symbols),
        _ => None,
    };
    let mut naming = Attribution::of_state(state, &mut symbols);
    let mut stacks = Stacks::new(&mut naming);
    let mut lines = Vec::with_capacity(weights.len());
    for (&(holder, call), &bytes) in &weights {
        if bytes == 0 {
            continue;
        }
        let mut line = folded(&holder.name());
        for f in stacks.of(call).outermost_first() {
            line.push(';');
            line.push_str(&folded(&f.label()));
        }
        lines.push(format!("{line} {bytes}"));
    }
    let mut options = Options::default();
    options.title = title.clone();
    // The calls drawn are the driver's: where a framework's view names the line that keeps the
    // memory, the graph says it, so that it never stands alone against the report.
    let kept = kept.map_or(String::new(), |line| {
        format!("; the driver's view: the report names {line}, the line that keeps the memory")
    });
    options.subtitle = Some(format!(
        "{} · width is bytes{kept}",
        args.trace()
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    ));
    options.count_name = "bytes".to_string();
    options.name_type = "Frame:".to_string();
    from_lines(&mut options, lines.iter().map(String::as_str), out)
        .context("drawing the flame graph")?;
    let what = format!(
        "{}: {}{kept}",
        crate::render::units::count(lines.len() as u64, "stack"),
        title.to_lowercase()
    );
    Ok(Written::of(&trace, what))
}

/// The place the report's diagnosis names for the first steady growth where a framework's own
/// view names it (PyTorch's tensors: the line that keeps them), labelled as the report labels
/// it; `None` where the driver's view is the diagnosis' own.
fn kept_at(trace: &LoadedTrace, symbols: &mut Symbolizer) -> Option<String> {
    let analysis = trace.analyze(&trace.torch(), symbols);
    let first = (analysis.diagnosis.iter()).find(|f| f.class == FindingClass::SteadyGrowth)?;
    first
        .evidence
        .view
        .filter(|v| *v != "driver")
        .and(first.site.as_ref())
        .map(site_label)
}
