//! The timeline's call sites grouped into the holders a user recognises — the program's Python
//! line, the owner module (libnccl, libcublas, an extension), the native function — with the
//! largest few kept per device and the rest added up as "other".

use std::collections::HashMap;

use vramtrace_collector::live::{LiveState, SiteId};
use vramtrace_collector::symbols::{frames_label, Attribution, CallRef, Granularity};

use super::{Timeline, OTHER_SITES};

/// What one holder held on one device at the end of each stretch.
#[derive(Clone, Debug)]
pub struct Band {
    pub device: i32,
    pub label: String,
    /// The call holding the most at any one time, whose stack stands for the band (`None` for
    /// "other").
    pub example: Option<CallRef>,
    /// Bytes per stretch.
    pub values: Vec<u64>,
}

/// A holder being gathered: its bytes per stretch, and the call holding the most at any one
/// time with that amount.
struct Group {
    values: Vec<u64>,
    example: Option<CallRef>,
    example_bytes: u64,
}

/// The label of the band of every site the most sites did not make it into.
pub const OTHER: &str = "other";

/// The call a site stands for: its stack (else caller) and the first Python stack seen there.
pub fn site_call(state: &LiveState, site: SiteId) -> Option<CallRef> {
    let (key, caller) = state.site(site)?;
    let py_stack = state.site_python(site).map_or(0, |(p, _)| p);
    Some(CallRef {
        caller,
        stack: key.stack,
        py_stack,
    })
}

/// The timeline's sites grouped `by`, the `top` largest holders per device (by their highest
/// value) in that order, then one band of the rest where there is any.
pub fn bands(
    timeline: &Timeline,
    state: &LiveState,
    naming: &mut Attribution<'_>,
    by: Granularity,
    top: usize,
) -> Vec<Band> {
    let n = timeline.stretches.len();
    let mut labels: HashMap<SiteId, Option<(String, CallRef)>> = HashMap::new();
    let mut out = Vec::new();
    for &device in timeline.devices() {
        let mut groups: HashMap<String, Group> = HashMap::new();
        for (i, stretch) in timeline.stretches.iter().enumerate() {
            for &(d, site, bytes) in &stretch.sites {
                if d != device {
                    continue;
                }
                let named = labels.entry(site).or_insert_with(|| {
                    if site == OTHER_SITES {
                        return None;
                    }
                    let call = site_call(state, site)?;
                    // By place (a Python line; a native program's function), named as every
                    // output names it.
                    let by_place = match by {
                        Granularity::Python => true,
                        Granularity::Function => call.py_stack == 0,
                        _ => false,
                    };
                    let place = by_place
                        .then(|| frames_label(&naming.stack(call)))
                        .flatten();
                    Some((
                        place.unwrap_or_else(|| naming.key(by, call).to_string()),
                        call,
                    ))
                });
                let (label, call) = match named {
                    Some((label, call)) => (label.clone(), Some(*call)),
                    None => (OTHER.to_string(), None),
                };
                let g = groups.entry(label).or_insert_with(|| Group {
                    values: vec![0; n],
                    example: None,
                    example_bytes: 0,
                });
                g.values[i] += bytes;
                if call.is_some() && bytes > g.example_bytes {
                    g.example = call;
                    g.example_bytes = bytes;
                }
            }
        }
        let mut ranked: Vec<(String, Group)> = groups.into_iter().collect();
        let highest = |g: &Group| g.values.iter().copied().max().unwrap_or(0);
        ranked.sort_by(|a, b| {
            (b.0 != OTHER, highest(&b.1))
                .cmp(&(a.0 != OTHER, highest(&a.1)))
                .then(a.0.cmp(&b.0))
        });
        let mut rest = vec![0u64; n];
        let mut any_rest = false;
        for (
            label,
            Group {
                values, example, ..
            },
        ) in ranked
        {
            if label != OTHER && out.iter().filter(|b: &&Band| b.device == device).count() < top {
                out.push(Band {
                    device,
                    label,
                    example,
                    values,
                });
            } else {
                any_rest = true;
                for (r, v) in rest.iter_mut().zip(values) {
                    *r += v;
                }
            }
        }
        if any_rest {
            out.push(Band {
                device,
                label: OTHER.to_string(),
                example: None,
                values: rest,
            });
        }
    }
    out
}
