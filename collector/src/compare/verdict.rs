//! Whether B regressed: B's numbers against A's, each checked against a threshold users can set,
//! and one rule that needs none — a steady growth B has where A has none.
//!
//! A growth is new when B's place (a call site, or a Python line of PyTorch's tensors) grows
//! steadily and surely (at least [`MIN_RISES`](crate::analysis::course::MIN_RISES) rises along
//! a line with R² at least 0.9: the report's own judgement, [`Growth::confident`]), A's
//! place does not grow at all, and the view's growth in all rose with it (at least half its
//! rate: a growth that only moved from one call site to another is not new). It is a
//! regression when at its rate B's device would be full within the report's horizon
//! (`--horizon-steps`, `--horizon`; only when the device's size is known) or when it is above
//! the floor ([`Thresholds::new_growth`]): a leak of 1 MiB a step over 30 steps adds only 30
//! MiB, under any threshold on memory, and is still a leak. When PyTorch's tensors have a new
//! growth, the caching allocator's segments growing for them in the driver's view are its
//! evidence (as in the report's causes), not a regression of their own.
//!
//! [`Growth::confident`]: crate::analysis::Growth::confident

use serde::Serialize;

use super::metrics::Measures;
use super::metrics::Rate;
use super::profile::{Fill, GrowthUnit};
use super::row::Row;
use crate::analysis::{LineMeaning, OwnerKind, Role};
use crate::torch::View;

/// The words for the recorder's view in tables and JSON (`view_name`).
pub(crate) const TENSOR_VIEW_NAME: &str = "tensors (PyTorch recorder)";
/// The words for the driver's view.
pub const DRIVER_VIEW_NAME: &str = "driver";

/// The name of a view in words.
pub const fn view_name(view: View) -> &'static str {
    match view {
        View::Driver => DRIVER_VIEW_NAME,
        View::AllocatorTensors => TENSOR_VIEW_NAME,
    }
}

/// How much B may exceed A before the difference is a regression.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Thresholds {
    /// Device bytes live at the end.
    pub live_bytes: u64,
    /// The devices' peaks.
    pub peak_bytes: u64,
    /// Sustained growth, bytes per step (compared only when both runs have steps).
    pub growth_per_step: u64,
    /// Orphans (memory whose owner is gone), counted.
    pub orphans: u64,
    /// Device bytes held by orphans.
    pub orphan_bytes: u64,
    /// Failed calls.
    pub failures: u64,
    /// A new steady growth above this many bytes per unit (step, or second without steps) is a
    /// regression even when B's device would not be full within the horizon.
    pub new_growth: u64,
}

impl Default for Thresholds {
    /// Above the noise of a caching allocator between two runs of one program (a segment or
    /// two), below any leak that matters; a new growth counts from 64 KiB per unit (a leak
    /// that small takes 16,000 steps to make a GiB).
    fn default() -> Self {
        Thresholds {
            live_bytes: 64 << 20,
            peak_bytes: 256 << 20,
            growth_per_step: 1 << 20,
            orphans: 0,
            orphan_bytes: 0,
            failures: 0,
            new_growth: 64 << 10,
        }
    }
}

/// One threshold checked.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Check {
    /// `live_bytes`, `peak_bytes`, `growth_per_step`, `orphans`, `orphan_bytes`, `failures`,
    /// `new_growth` (the driver's view) or `alerts` (B's tracer's, in a rotated run); `tensor_live_bytes`, `tensor_growth_per_step` or
    /// `tensor_new_growth` (PyTorch's recorder).
    pub metric: &'static str,
    /// B's value minus A's; for a new growth, the fastest new growth's rate.
    pub change: f64,
    pub threshold: f64,
    /// Whether the change is above the threshold; for a new growth, whether one is a
    /// regression (above the floor, or B's device full within the horizon).
    pub exceeded: bool,
}

impl Check {
    pub(crate) fn of(metric: &'static str, change: f64, threshold: u64) -> Self {
        Check {
            metric,
            change,
            threshold: threshold as f64,
            exceeded: change > threshold as f64,
        }
    }
}

/// A steady growth B has where A has none.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NewGrowth {
    /// The view it was seen in (`driver`, `allocator-tensors`), and in words.
    pub view: View,
    pub view_name: &'static str,
    /// The call site or Python line, as B names it.
    pub label: String,
    /// What holds it, as the report names it beside a label: the module that asked (driver),
    /// or `PyTorch tensors`.
    pub owner: Option<String>,
    /// Whether its line keeps the memory, or is where a framework's allocator asked for it.
    pub line_means: LineMeaning,
    /// `cause`, or `segments`: a framework allocator's segments growing for the tensors of a
    /// new growth of the per-tensor view, its evidence rather than a regression of its own.
    pub role: Role,
    /// B's steady growth there, bytes per `unit`.
    pub rate: f64,
    pub unit: GrowthUnit,
    /// At that rate alone, when B's device would be full (`null` when its size is not known, or
    /// without steps or step times).
    pub steps_to_full: Option<f64>,
    pub seconds_to_full: Option<f64>,
    /// Full within the horizon (`--horizon-steps`, `--horizon`).
    pub within_horizon: bool,
    /// Above the floor (`--min-new-growth`).
    pub above_floor: bool,
    /// Whether it makes B a regression: a cause, within the horizon or above the floor.
    pub regression: bool,
    /// The places (label, owner) whose growths it is, together: itself, or a native program's
    /// NCCL places, one set of communicators never destroyed.
    #[serde(skip)]
    pub places: Vec<(String, Option<String>)>,
}

/// Whether B regressed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    pub regression: bool,
    /// Every threshold that could be checked.
    pub checks: Vec<Check>,
    /// Every steady growth B has where A has none, in both views, fastest first.
    pub new_growth: Vec<NewGrowth>,
    /// What could not be checked, and why.
    pub notes: Vec<String>,
}

impl Verdict {
    /// A verdict of `checks` and `new_growth`.
    pub(crate) fn of(checks: Vec<Check>, new_growth: Vec<NewGrowth>, notes: Vec<String>) -> Self {
        let mut v = Verdict {
            regression: false,
            checks: Vec::new(),
            new_growth: Vec::new(),
            notes,
        };
        v.add(checks, new_growth);
        v
    }

    /// Adds the per-tensor view's checks and new growths: when it has new growths of its own,
    /// the driver's new growths of a framework allocator's segments are the memory reserved for
    /// those tensors (their evidence, as in the report's causes), not regressions of their own.
    pub(crate) fn add_tensors(&mut self, checks: Vec<Check>, new_growth: Vec<NewGrowth>) {
        if !new_growth.is_empty() {
            let segments =
                |g: &&mut NewGrowth| g.view == View::Driver && g.line_means == LineMeaning::Asked;
            for g in self.new_growth.iter_mut().filter(segments) {
                g.role = Role::Segments;
                g.regression = false;
            }
            let driver = self.new_growth.iter().filter(|g| g.view == View::Driver);
            let any = driver.clone().any(|g| g.regression);
            let fastest = (driver.filter(|g| g.regression))
                .map(|g| g.rate)
                .fold(0.0, f64::max);
            if let Some(c) = self.checks.iter_mut().find(|c| c.metric == "new_growth") {
                (c.exceeded, c.change) = (any, fastest);
            }
        }
        self.add(checks, new_growth);
    }

    /// Names each new growth of the driver's view that is a framework allocator's segments by
    /// the line B's own findings found keeping their tensors (`kept`), where the runs' tensors
    /// cannot be compared (A has no recorder): the line to fix, as B's report names it.
    pub(crate) fn kept_at(&mut self, kept: &[crate::compare::profile::KeptAt]) {
        for g in (self.new_growth.iter_mut())
            .filter(|g| g.view == View::Driver && g.line_means == LineMeaning::Asked)
        {
            let place = (g.label.clone(), g.owner.clone());
            if let Some(k) = kept.iter().find(|k| k.segments == place) {
                (g.label, g.owner) = k.line.clone();
                g.line_means = LineMeaning::Keeps;
            }
        }
    }

    /// Leaves out the checks of `metrics` (numbers one run cannot give whole: its peak, its
    /// failed calls, where rotation deleted its first segments), saying why in `note`.
    pub fn leave_out(&mut self, metrics: &[&str], note: String) {
        self.checks.retain(|c| !metrics.contains(&c.metric));
        self.notes.push(note);
        self.regression = self.checks.iter().any(|c| c.exceeded);
    }

    /// B's tracer raised `count` alerts on devices where A's raised none, in a run whose first
    /// segments rotation deleted: the growth it judged is not all on disk, and the alerts stand
    /// for it (`alerts`, exceeded), with `note` saying the first.
    pub fn alerted(&mut self, count: usize, note: String) {
        self.checks.push(Check {
            metric: "alerts",
            change: count as f64,
            threshold: 0.0,
            exceeded: true,
        });
        self.notes.push(note);
        self.regression = true;
    }

    /// Adds another view's checks and new growths.
    fn add(&mut self, checks: Vec<Check>, new_growth: Vec<NewGrowth>) {
        self.checks.extend(checks);
        self.new_growth.extend(new_growth);
        self.new_growth
            .sort_by(|a, b| b.rate.total_cmp(&a.rate).then(a.label.cmp(&b.label)));
        self.regression = self.checks.iter().any(|c| c.exceeded);
    }
}

/// One place of a new growth as the report names it: its label, owner and line meaning, its
/// rate, whether it is a native program's NCCL place, and the places it stands for.
struct Place {
    label: String,
    owner: Option<String>,
    line_means: LineMeaning,
    rate: f64,
    native_nccl: bool,
    members: Vec<(String, Option<String>)>,
}

/// The new growths among `rows` of one view (each held by `owner`, its line meaning what
/// `meaning` says), when its growth in all (`total`, A's and B's per unit) is comparable, and the
/// check they make (`metric`).
pub(crate) fn new_growth<M: Measures, P>(
    (view, metric): (View, &'static str),
    (rows, named): (
        &[Row<M, P>],
        // Its owner, what its line means, and whether it is a native program's place (no
        // Python line).
        impl Fn(&Row<M, P>) -> (Option<String>, LineMeaning, bool),
    ),
    total: Option<Rate>,
    (unit, fill): (GrowthUnit, Option<&Fill>),
    thresholds: &Thresholds,
) -> (Check, Vec<NewGrowth>) {
    let floor = thresholds.new_growth as f64;
    // One growth per place as the report names it: the native paths of one line (NCCL's buffers
    // of a communicator, made by several functions) are one cause, at their rates together.
    let mut places: Vec<Place> = Vec::new();
    if let Some(total) = total {
        for r in rows {
            let rate = r.new_growth();
            if rate <= 0.0 {
                continue;
            }
            let (owner, line_means, native) = named(r);
            let same = |p: &&mut Place| {
                p.label == r.label && p.owner == owner && p.line_means == line_means
            };
            match places.iter_mut().find(same) {
                Some(p) => p.rate += rate,
                None => {
                    let nccl = (owner.as_deref())
                        .is_some_and(|m| OwnerKind::of_module(m) == OwnerKind::Nccl);
                    places.push(Place {
                        members: vec![(r.label.clone(), owner.clone())],
                        label: r.label.clone(),
                        owner,
                        line_means,
                        rate,
                        native_nccl: native && nccl,
                    });
                }
            }
        }
        // A native program's NCCL buffers at several of its calls are the same communicators
        // never destroyed: one cause, named by its fastest place, as the report's causes say it
        // (a Python program's at two lines are two process groups).
        if let Some(at) = places.iter().position(|p| p.native_nccl) {
            let comms: Vec<_> = places.extract_if(.., |p| p.native_nccl).collect();
            let together: f64 = comms.iter().map(|p| p.rate).sum();
            let members = comms.iter().flat_map(|p| p.members.clone()).collect();
            if let Some(fastest) = comms.into_iter().max_by(|a, b| a.rate.total_cmp(&b.rate)) {
                let rate = together;
                places.insert(
                    at,
                    Place {
                        rate,
                        members,
                        ..fastest
                    },
                );
            }
        }
        places.retain(|p| total.change >= p.rate / 2.0);
    }
    let found: Vec<NewGrowth> = (places.into_iter())
        .map(|p| {
            let Place {
                label,
                owner,
                line_means,
                rate,
                members,
                ..
            } = p;
            let full = fill.and_then(|f| f.at(rate, unit));
            let within_horizon = full.is_some_and(|p| p.within_horizon);
            let above_floor = rate > floor;
            NewGrowth {
                view,
                view_name: view_name(view),
                label,
                owner,
                line_means,
                role: Role::Cause,
                rate,
                unit,
                steps_to_full: full.and_then(|p| p.steps_to_full),
                seconds_to_full: full.and_then(|p| p.seconds_to_full),
                within_horizon,
                above_floor,
                regression: within_horizon || above_floor,
                places: members,
            }
        })
        .collect();
    let check = Check {
        metric,
        change: found.iter().map(|g| g.rate).fold(0.0, f64::max),
        threshold: floor,
        exceeded: found.iter().any(|g| g.regression),
    };
    (check, found)
}
