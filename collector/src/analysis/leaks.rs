//! Leaks: everything still live at the end (or wherever the replay stopped), grouped by the place
//! that made it (the program's Python line, else the native call site: see [`Place`]), with when
//! the oldest and newest of each group were made.
//!
//! Anything freed before the end (a temporary, a cache emptied at shutdown, memory torn down with
//! its context) is not here, whatever its size; what is here is exactly the live set — except
//! objects that an event the tracer lost after they were made may have freed: those are counted
//! apart ([`Leaks::uncertain`]), never reported as leaks.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use super::site::{name, place, Place, SiteName};
use crate::live::{Accounting, Category, CommState, LiveState, SiteId, Totals};

/// What one call site left live.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LeakSite {
    #[serde(flatten)]
    pub site: SiteName,
    /// Live objects of any category (registrations and mappings included).
    pub count: u64,
    /// Of them, the objects of device memory (what `bytes` is the memory of).
    pub device_count: u64,
    /// Device memory.
    pub bytes: u64,
    /// Pinned and registered host memory.
    pub host_bytes: u64,
    /// Objects among them that are orphans, or physical handles that only an orphaned mapping
    /// reaches.
    pub orphans: u64,
    /// The oldest and newest of them: sequence number, time, and steps begun before it.
    pub first_seq: u64,
    pub last_seq: u64,
    pub first_time_ns: u64,
    pub last_time_ns: u64,
    pub first_step: u64,
    pub last_step: u64,
    pub categories: BTreeSet<Category>,
    /// Call sites merged into this place.
    pub sites: usize,
    /// NCCL communicators never destroyed that own device memory here, and those bytes: memory
    /// the exit releases, which the program could release with the communicator.
    #[serde(skip)]
    pub communicators: BTreeSet<u64>,
    #[serde(skip)]
    pub communicator_bytes: u64,
    /// Steps its device objects were made in, up to [`MANY_STEPS`] of them.
    #[serde(skip)]
    pub made_in: BTreeSet<u64>,
}

/// The live set by call site.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Leaks {
    /// Device memory live.
    pub device: Totals,
    /// Host memory live.
    pub host: Totals,
    /// Live objects holding no memory of their own (reservations, mappings, NCCL labels,
    /// registrations, windows).
    pub views: u64,
    /// Sites, largest device memory first (then host memory, then count).
    pub sites: Vec<LeakSite>,
    /// Live objects left out of the above: an event the tracer lost after each was made may have
    /// freed it.
    pub uncertain: UncertainLive,
}

/// Live objects whose free may be among the events the tracer lost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UncertainLive {
    /// Device memory.
    pub device: Totals,
    /// Host memory.
    pub host: Totals,
    /// Objects holding no memory of their own.
    pub views: u64,
}

impl UncertainLive {
    /// Objects in all.
    pub fn count(&self) -> u64 {
        self.device.count + self.host.count + self.views
    }
}

/// Steps over which the objects a place holds at the end were made, and how many of them, from
/// which it grew for long: growth that stopped, not a warm-up's few rises.
pub const MANY_STEPS: u64 = 16;

impl LeakSite {
    /// Whether the device objects it holds at the end were made in [`MANY_STEPS`] steps or more:
    /// it grew for long, then stopped (or grows still). A warm-up's objects, made in a few steps,
    /// and a cache's segment added now and then, are not.
    pub fn grew_for_long(&self) -> bool {
        self.made_in.len() as u64 >= MANY_STEPS
    }

    /// Whether it grew for long and then stopped well before `steps` (the steps begun at the
    /// end): the steps since its newest object are at least [`MANY_STEPS`] and four times the
    /// mean gap between the steps it was made in (at most its span over `MANY_STEPS - 1`, as
    /// it was made in that many steps at least), so that a leak that rises now and then is not
    /// taken for one that stopped between two rises.
    pub fn stopped_by(&self, steps: u64) -> bool {
        let since = steps.saturating_sub(self.last_step);
        let gap = (self.last_step - self.first_step).div_ceil(MANY_STEPS - 1);
        self.grew_for_long() && since >= MANY_STEPS && since >= 4 * gap
    }
}

/// The live set of `state`, by call site.
pub fn leaks(state: &LiveState) -> Leaks {
    let mut sites: BTreeMap<Place, LeakSite> = BTreeMap::new();
    let mut members: BTreeMap<Place, BTreeMap<SiteId, u64>> = BTreeMap::new();
    let (mut device, mut host, mut views) = (Totals::default(), Totals::default(), 0);
    let mut uncertain = UncertainLive::default();
    let mut places: HashMap<SiteId, Place> = HashMap::new();
    // Physical handles by value, with their place and whether they are orphans themselves; and
    // the handles orphaned mappings map: a handle only a mapping into freed address space
    // reaches is that orphan's memory, counted among the place's orphans.
    let mut handles: HashMap<u64, (Place, bool)> = HashMap::new();
    let mut mapped_by_orphans: Vec<u64> = Vec::new();
    let live_comms: BTreeSet<u64> = (state.communicators())
        .filter(|c| matches!(c.state, CommState::Live | CommState::Finalized))
        .map(|c| c.comm)
        .collect();
    for o in state.live_objects() {
        let origin = o.origin;
        if state.lost_after(origin.seq) {
            match o.category.accounting() {
                Accounting::Device => uncertain.device.add(o.bytes),
                Accounting::Host => uncertain.host.add(o.bytes),
                Accounting::VirtualAddress | Accounting::None => uncertain.views += 1,
            }
            continue;
        }
        // A place is worked out once per site: the live set holds many objects of each.
        let at = *(places.entry(origin.site)).or_insert_with(|| place(state, origin.site));
        *members
            .entry(at)
            .or_default()
            .entry(origin.site)
            .or_default() += o.bytes;
        let s = sites.entry(at).or_insert_with(|| LeakSite {
            site: name(state, origin.site),
            count: 0,
            device_count: 0,
            bytes: 0,
            host_bytes: 0,
            orphans: 0,
            first_seq: u64::MAX,
            last_seq: 0,
            first_time_ns: u64::MAX,
            last_time_ns: 0,
            first_step: u64::MAX,
            last_step: 0,
            categories: BTreeSet::new(),
            sites: 0,
            communicators: BTreeSet::new(),
            communicator_bytes: 0,
            made_in: BTreeSet::new(),
        });
        s.count += 1;
        match o.category.accounting() {
            Accounting::Device => {
                s.bytes += o.bytes;
                s.device_count += 1;
                if (s.made_in.len() as u64) < MANY_STEPS {
                    s.made_in.insert(origin.step);
                }
                device.add(o.bytes);
            }
            Accounting::Host => {
                s.host_bytes += o.bytes;
                host.add(o.bytes);
            }
            Accounting::VirtualAddress | Accounting::None => views += 1,
        }
        if let Some(c) = origin.communicator.filter(|c| live_comms.contains(c)) {
            if o.category.accounting() == Accounting::Device {
                s.communicators.insert(c);
                s.communicator_bytes += o.bytes;
            }
        }
        let orphan = o.flags.is_orphan();
        if orphan {
            s.orphans += 1;
        }
        match (o.category, o.handle) {
            (Category::Physical, _) => {
                handles.insert(o.address, (at, orphan));
            }
            (Category::Mapping, Some(handle)) if orphan => mapped_by_orphans.push(handle),
            _ => {}
        }
        s.first_seq = s.first_seq.min(origin.seq);
        s.last_seq = s.last_seq.max(origin.seq);
        s.first_time_ns = s.first_time_ns.min(origin.time_ns);
        s.last_time_ns = s.last_time_ns.max(origin.time_ns);
        s.first_step = s.first_step.min(origin.step);
        s.last_step = s.last_step.max(origin.step);
        s.categories.insert(o.category);
    }
    for handle in mapped_by_orphans {
        if let Some((at, orphan)) = handles.get_mut(&handle) {
            if !*orphan {
                *orphan = true;
                if let Some(s) = sites.get_mut(at) {
                    s.orphans += 1;
                }
            }
        }
    }
    // Each place is named by its site holding the most (the first seen among equals).
    for (at, s) in &mut sites {
        let ids = &members[at];
        s.sites = ids.len();
        if let Some((&id, _)) = ids
            .iter()
            .max_by_key(|&(&id, &b)| (b, std::cmp::Reverse(id)))
        {
            s.site = name(state, id);
        }
    }
    let mut sites: Vec<LeakSite> = sites.into_values().collect();
    sites.sort_by(|a, b| {
        (b.bytes, b.host_bytes, b.count)
            .cmp(&(a.bytes, a.host_bytes, a.count))
            .then(a.first_seq.cmp(&b.first_seq))
    });
    Leaks {
        device,
        host,
        views,
        sites,
        uncertain,
    }
}
