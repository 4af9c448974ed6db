//! Grouped totals of what is live: by device, category, owner module, communicator and call
//! site.
//!
//! Only device memory (pointer allocations, arrays, physical handles, IPC) counts as memory used;
//! pinned and registered host memory is totalled apart, reservations count as address space, and
//! mappings, NCCL buffer labels, registrations and windows name bytes already counted elsewhere.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use super::objects::{api_name, hex, Accounting, Category, CommState, Flag, LiveObject};
use super::origin::CodeLocation;
use super::LiveState;
use crate::event::{Api, StackId};
use crate::ids::SiteId;

/// A count of objects and their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub count: u64,
    pub bytes: u64,
}

impl Totals {
    /// Counts one object of `bytes`.
    pub fn add(&mut self, bytes: u64) {
        self.count += 1;
        self.bytes += bytes;
    }

    /// Adds another total.
    pub(crate) fn add_totals(&mut self, other: Totals) {
        self.count += other.count;
        self.bytes += other.bytes;
    }
}

/// Device memory live on one device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeviceTotals {
    pub device: i32,
    pub count: u64,
    pub bytes: u64,
}

/// Live objects of one category.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CategoryTotals {
    pub category: Category,
    pub accounting: Accounting,
    pub count: u64,
    pub bytes: u64,
}

/// Device memory live that one module asked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ModuleTotals {
    /// Module id, `None` when the owner could not be named.
    pub module: Option<u32>,
    /// Module file name.
    pub name: Option<String>,
    pub count: u64,
    pub bytes: u64,
}

/// What one communicator holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CommunicatorTotals {
    #[serde(serialize_with = "hex")]
    pub comm: u64,
    /// `None` for a communicator the trace never showed created.
    pub state: Option<CommState>,
    /// Its rank and size (`None` where the trace does not say them: a split communicator's).
    pub rank: Option<i32>,
    pub nranks: Option<i32>,
    pub device: Option<i32>,
    /// Device memory objects and bytes.
    pub count: u64,
    pub bytes: u64,
    pub registrations: u64,
    pub windows: u64,
}

/// Totals of everything live.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Device memory in use.
    pub device_memory: Totals,
    /// Pinned and registered host memory.
    pub host_memory: Totals,
    /// Reserved virtual address space.
    pub reserved_va: Totals,
    /// Device memory in objects whose owner is gone.
    pub orphaned: Totals,
    /// Device memory attributed to no communicator.
    pub without_communicator: Totals,
    pub by_device: Vec<DeviceTotals>,
    /// Every category with live objects, in [`Category::ALL`] order.
    pub by_category: Vec<CategoryTotals>,
    /// Device memory by owner module, largest first.
    pub by_module: Vec<ModuleTotals>,
    /// Live and ended communicators holding anything, and live ones holding nothing.
    pub by_communicator: Vec<CommunicatorTotals>,
}

/// Live memory grouped by where it was allocated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CallSite {
    /// Interned stack of the site, 0 when the site is its caller address alone.
    pub stack: StackId,
    /// Interned Python stack of the first object (Python stacks do not split a site).
    pub py_stack: StackId,
    /// Return address of the allocating call (of the first object, for a stack site).
    #[serde(serialize_with = "hex")]
    pub caller: u64,
    /// The frame naming the owner, as `module+offset`.
    pub location: CodeLocation,
    /// `location` as text (`libtorch_cuda.so+0x1234`).
    pub site: String,
    #[serde(serialize_with = "api_name")]
    pub api: Api,
    /// Owner module id and file name.
    pub module: Option<u32>,
    pub module_name: Option<String>,
    /// Objects counted (those holding device or host memory).
    pub count: u64,
    /// Device memory.
    pub bytes: u64,
    /// Pinned host memory.
    pub host_bytes: u64,
    pub first_seq: u64,
    pub last_seq: u64,
    pub categories: BTreeSet<Category>,
    /// Whether its objects were allocated at several Python lines (its label names the first
    /// object's; the report's tables by place split them).
    pub lines_vary: bool,
    /// The site (native stack and Python line) of the first object.
    #[serde(skip)]
    first_site: SiteId,
}

impl LiveState {
    /// Totals of everything live.
    pub fn summary(&self) -> Summary {
        let mut s = Summary::default();
        let mut by_device: BTreeMap<i32, Totals> = BTreeMap::new();
        let mut by_category: BTreeMap<Category, Totals> = BTreeMap::new();
        let mut by_module: BTreeMap<Option<u32>, Totals> = BTreeMap::new();
        // Keyed by (communicator, gone): an ended communicator's id may be reused by a new one.
        let mut by_comm: BTreeMap<(u64, bool), CommunicatorTotals> = BTreeMap::new();
        for c in self.nccl.communicators() {
            if !c.state.is_gone() {
                by_comm.insert((c.comm, false), self.comm_totals(c.comm, false));
            }
        }
        for o in self.live_objects() {
            by_category.entry(o.category).or_default().add(o.bytes);
            let comm = o.origin.communicator.map(|c| {
                let gone = o.flags.contains(Flag::CommunicatorGone);
                by_comm
                    .entry((c, gone))
                    .or_insert_with(|| self.comm_totals(c, gone))
            });
            match o.category.accounting() {
                Accounting::Device => {
                    s.device_memory.add(o.bytes);
                    by_device.entry(o.device).or_default().add(o.bytes);
                    by_module.entry(o.origin.module).or_default().add(o.bytes);
                    if o.flags.is_orphan() {
                        s.orphaned.add(o.bytes);
                    }
                    match comm {
                        Some(c) => {
                            c.count += 1;
                            c.bytes += o.bytes;
                        }
                        None => s.without_communicator.add(o.bytes),
                    }
                }
                Accounting::Host => s.host_memory.add(o.bytes),
                Accounting::VirtualAddress => s.reserved_va.add(o.bytes),
                Accounting::None => match (o.category, comm) {
                    (Category::Registration, Some(c)) => c.registrations += 1,
                    (Category::Window, Some(c)) => c.windows += 1,
                    _ => {}
                },
            }
        }
        s.by_device = by_device
            .into_iter()
            .map(|(device, t)| DeviceTotals {
                device,
                count: t.count,
                bytes: t.bytes,
            })
            .collect();
        s.by_category = by_category
            .into_iter()
            .map(|(category, t)| CategoryTotals {
                category,
                accounting: category.accounting(),
                count: t.count,
                bytes: t.bytes,
            })
            .collect();
        s.by_module = by_module
            .into_iter()
            .map(|(module, t)| ModuleTotals {
                module,
                name: module.and_then(|id| self.owners.module_name(id).map(str::to_string)),
                count: t.count,
                bytes: t.bytes,
            })
            .collect();
        s.by_module
            .sort_by(|a, b| b.bytes.cmp(&a.bytes).then(b.count.cmp(&a.count)));
        s.by_communicator = by_comm.into_values().collect();
        s.by_communicator
            .sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.comm.cmp(&b.comm)));
        s
    }

    fn comm_totals(&self, comm: u64, gone: bool) -> CommunicatorTotals {
        let known = if gone {
            self.nccl.find_ended(comm)
        } else {
            self.nccl.find(comm)
        };
        CommunicatorTotals {
            comm,
            state: known
                .map(|c| c.state)
                .or(gone.then_some(CommState::Destroyed)),
            // A split communicator's place in its group is not in the call that made it: the
            // tracer records -1 of 0, which is no rank.
            rank: known.map(|c| c.rank).filter(|&r| r >= 0),
            nranks: known.map(|c| c.nranks).filter(|&n| n > 0),
            device: known.map(|c| c.device),
            count: 0,
            bytes: 0,
            registrations: 0,
            windows: 0,
        }
    }

    /// Live device and host memory grouped by call site (stack id when one was captured, else
    /// caller address), largest first.
    pub fn by_call_site(&self) -> Vec<CallSite> {
        let mut sites: HashMap<(StackId, u64), CallSite> = HashMap::new();
        for o in self.live_objects() {
            let (device, host) = (o.device_bytes(), o.host_bytes());
            if !matches!(
                o.category.accounting(),
                Accounting::Device | Accounting::Host
            ) {
                continue;
            }
            let origin = &o.origin;
            let key = if origin.stack != 0 {
                (origin.stack, 0)
            } else {
                (0, origin.caller)
            };
            let site = sites.entry(key).or_insert_with(|| self.new_site(&o));
            site.count += 1;
            site.bytes += device;
            site.host_bytes += host;
            site.lines_vary |= origin.site != site.first_site;
            site.first_seq = site.first_seq.min(origin.seq);
            site.last_seq = site.last_seq.max(origin.seq);
            site.categories.insert(o.category);
        }
        let mut sites: Vec<CallSite> = sites.into_values().collect();
        sites.sort_by(|a, b| {
            (b.bytes, b.host_bytes, b.count)
                .cmp(&(a.bytes, a.host_bytes, a.count))
                .then(a.first_seq.cmp(&b.first_seq))
                // Only a damaged trace has two sites with one first seq; the map's order must
                // not decide then.
                .then((a.stack, a.caller).cmp(&(b.stack, b.caller)))
        });
        sites
    }

    fn new_site(&self, o: &LiveObject<'_>) -> CallSite {
        let origin = &o.origin;
        let owner = self.owners.resolve(origin.caller, origin.stack);
        let location = self.owners.locate(owner.frame);
        CallSite {
            stack: origin.stack,
            py_stack: origin.py_stack,
            caller: origin.caller,
            site: location.to_string(),
            location,
            api: origin.api,
            module: origin.module,
            module_name: origin
                .module
                .and_then(|id| self.owners.module_name(id).map(str::to_string)),
            count: 0,
            bytes: 0,
            host_bytes: 0,
            first_seq: u64::MAX,
            last_seq: 0,
            categories: BTreeSet::new(),
            lines_vary: false,
            first_site: origin.site,
        }
    }
}
