//! Naming a call site for reports: the frame that names its owner as `module+offset`, with the
//! raw stack id, caller address and an example Python stack kept for symbolization, and a label
//! a symbolizing reader fills in; and the place the analyses group sites by.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::live::{LiveState, ProgramLine, SiteId};

/// Where the analyses group call sites: the program's own Python line and the module that
/// allocated for it (one line reaches the allocator through many native paths, and the line is
/// what the user can change), or the native call site for a call without Python frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Place {
    Line {
        line: ProgramLine,
        module: Option<u32>,
    },
    Site(SiteId),
}

/// The place of call site `id`.
pub fn place(state: &LiveState, id: SiteId) -> Place {
    match state.site(id) {
        Some((key, caller)) if key.line.is_some() => Place::Line {
            line: key.line,
            module: state.owners().resolve(caller, key.stack).module,
        },
        _ => Place::Site(id),
    }
}

/// A call site as reports show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SiteName {
    /// Interned native stack, 0 when the site is its caller address alone.
    pub stack: u32,
    /// Return address of the (first) allocating call there.
    #[serde(serialize_with = "crate::live::hex")]
    pub caller: u64,
    /// The frame naming the owner, as `module+offset`.
    pub site: String,
    /// Owner module id and file name.
    pub module: Option<u32>,
    pub module_name: Option<String>,
    /// The Python stack of the first call there that had one (0: none). Sites are native
    /// stacks; this names the Python line that reached it.
    pub py_stack: u32,
    /// Whether calls at the site came from more than one Python stack.
    pub py_stacks_vary: bool,
    /// The site in words (`train.py:88 in step`, or the native function that asked), filled in
    /// by a reader with symbols ([`Analysis::sites_mut`](super::Analysis::sites_mut)); `null`
    /// otherwise.
    pub label: Option<String>,
    /// The place the analyses group the site in.
    #[serde(skip)]
    pub place: Place,
}

/// Names call site `id` of `state`.
pub fn name(state: &LiveState, id: SiteId) -> SiteName {
    let Some((key, caller)) = state.site(id) else {
        return SiteName {
            stack: 0,
            caller: 0,
            site: "(unknown)".to_string(),
            module: None,
            module_name: None,
            py_stack: 0,
            py_stacks_vary: false,
            label: None,
            place: Place::Site(id),
        };
    };
    let (py_stack, py_stacks_vary) = state.site_python(id).unwrap_or((0, false));
    let owner = state.owners().resolve(caller, key.stack);
    let location = state.locate(owner.frame);
    SiteName {
        stack: key.stack,
        caller,
        site: location.to_string(),
        module: owner.module,
        module_name: owner
            .module
            .and_then(|m| state.owners().module_name(m).map(str::to_string)),
        py_stack,
        py_stacks_vary,
        label: None,
        place: place(state, id),
    }
}

/// What one place holds (see [`Place`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SiteAmount {
    /// The place's largest call site.
    #[serde(flatten)]
    pub site: SiteName,
    pub count: u64,
    pub bytes: u64,
    /// Call sites merged into it.
    pub sites: usize,
}

/// Names a list of `(site, count, bytes)`, merged by place, largest first.
pub(crate) fn amounts(
    state: &LiveState,
    holdings: impl IntoIterator<Item = crate::live::SiteHolding>,
) -> Vec<SiteAmount> {
    // Per place: objects, bytes, and each site's bytes.
    type Tally = (u64, u64, Vec<(u64, SiteId)>);
    let mut by_place: BTreeMap<Place, Tally> = BTreeMap::new();
    for h in holdings {
        let e = by_place.entry(place(state, h.site)).or_default();
        e.0 += h.count;
        e.1 += h.bytes;
        e.2.push((h.bytes, h.site));
    }
    let mut list: Vec<SiteAmount> = by_place
        .into_values()
        .map(|(count, bytes, mut sites)| {
            sites.sort_by_key(|&(b, id)| (std::cmp::Reverse(b), id));
            SiteAmount {
                site: name(state, sites[0].1),
                count,
                bytes,
                sites: sites.len(),
            }
        })
        .collect();
    list.sort_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then(b.count.cmp(&a.count))
            .then((a.site.stack, a.site.caller).cmp(&(b.site.stack, b.site.caller)))
    });
    list
}
