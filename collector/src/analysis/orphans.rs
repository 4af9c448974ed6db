//! Orphans: live memory whose owner is gone. A buffer of a destroyed or aborted communicator,
//! an allocation of a destroyed context or pool, a physical handle no mapping uses, a mapping
//! into a freed reservation, a registration whose buffer was freed or whose communicator is gone.
//!
//! Each orphan is named by its first reason in [`OrphanKind`] order (a registration whose buffer
//! and communicator are both gone counts once), and all its reasons are listed. An orphan that an
//! event the tracer lost after it was made may have freed is counted apart
//! ([`Orphans::uncertain`]), never listed.

use std::collections::BTreeMap;

use serde::Serialize;

use super::site::{name, SiteName};
use crate::live::{Category, CommState, Flag, LiveObject, LiveState, Totals};

/// Why a live object is an orphan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OrphanKind {
    /// Memory of a communicator that was destroyed.
    CommunicatorDestroyed,
    /// Memory of a communicator that was aborted.
    CommunicatorAborted,
    /// Made in a context since destroyed or reset (VMM objects outlive their context).
    ContextGone,
    /// An allocation from a memory pool since destroyed.
    PoolDestroyed,
    /// A physical handle with references but no mapping: memory nothing can reach.
    UnmappedHandle,
    /// A mapping whose reservation was freed under it.
    MappingWithoutReservation,
    /// A registration or window whose buffer was freed.
    RegistrationBufferGone,
    /// A registration or window whose communicator is gone.
    RegistrationCommunicatorGone,
}

impl OrphanKind {
    /// Short name used in reports (the same as its JSON spelling).
    pub const fn name(self) -> &'static str {
        match self {
            OrphanKind::CommunicatorDestroyed => "communicator-destroyed",
            OrphanKind::CommunicatorAborted => "communicator-aborted",
            OrphanKind::ContextGone => "context-gone",
            OrphanKind::PoolDestroyed => "pool-destroyed",
            OrphanKind::UnmappedHandle => "unmapped-handle",
            OrphanKind::MappingWithoutReservation => "mapping-without-reservation",
            OrphanKind::RegistrationBufferGone => "registration-buffer-gone",
            OrphanKind::RegistrationCommunicatorGone => "registration-communicator-gone",
        }
    }
}

/// One orphan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Orphan {
    /// Its first reason.
    pub kind: OrphanKind,
    /// Every reason.
    pub kinds: Vec<OrphanKind>,
    pub category: Category,
    /// Pointer, or the handle / registration / window value.
    #[serde(serialize_with = "crate::live::hex")]
    pub address: u64,
    /// Its bytes (device memory for memory categories; the registered or mapped size for views).
    pub bytes: u64,
    /// Device memory it holds (0 for views).
    pub device_bytes: u64,
    pub device: i32,
    /// The communicator it belonged to.
    #[serde(serialize_with = "crate::live::hex_opt")]
    pub communicator: Option<u64>,
    /// The call that made it.
    pub seq: u64,
    pub time_ns: u64,
    pub step: u64,
    #[serde(flatten)]
    pub site: SiteName,
}

/// Orphans of one kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct OrphanGroup {
    pub kind: OrphanKind,
    pub count: u64,
    /// Device memory.
    pub bytes: u64,
}

/// Every orphan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Orphans {
    /// Orphans, and the device memory they hold.
    pub total: Totals,
    /// Per kind, in [`OrphanKind`] order, for the kinds present.
    pub by_kind: Vec<OrphanGroup>,
    /// Each orphan, most device memory first, then by age.
    pub objects: Vec<Orphan>,
    /// Orphans left out of the above (and the device memory they hold): an event the tracer lost
    /// after each was made may have freed it.
    pub uncertain: Totals,
}

fn kinds_of(state: &LiveState, o: &LiveObject<'_>) -> Vec<OrphanKind> {
    let view = matches!(o.category, Category::Registration | Category::Window);
    let mut kinds = Vec::new();
    for flag in o.flags.iter().filter(|f| f.is_orphan()) {
        let kind = match flag {
            Flag::CommunicatorGone if view => OrphanKind::RegistrationCommunicatorGone,
            Flag::CommunicatorGone => {
                let aborted = o.origin.communicator.is_some_and(|c| {
                    state
                        .communicators()
                        .filter(|x| x.comm == c)
                        .last()
                        .is_some_and(|x| x.state == CommState::Aborted)
                });
                if aborted {
                    OrphanKind::CommunicatorAborted
                } else {
                    OrphanKind::CommunicatorDestroyed
                }
            }
            Flag::ContextGone => OrphanKind::ContextGone,
            Flag::PoolDestroyed => OrphanKind::PoolDestroyed,
            Flag::Unmapped => OrphanKind::UnmappedHandle,
            Flag::ReservationGone => OrphanKind::MappingWithoutReservation,
            Flag::BufferGone => OrphanKind::RegistrationBufferGone,
            _ => continue,
        };
        kinds.push(kind);
    }
    kinds.sort();
    kinds.dedup();
    kinds
}

/// The orphans of `state`.
pub fn orphans(state: &LiveState) -> Orphans {
    let mut objects = Vec::new();
    let mut total = Totals::default();
    let mut by_kind: BTreeMap<OrphanKind, Totals> = BTreeMap::new();
    let mut uncertain = Totals::default();
    for o in state.orphans() {
        let kinds = kinds_of(state, &o);
        let Some(&kind) = kinds.first() else { continue };
        if state.lost_after(o.origin.seq) {
            uncertain.add(o.device_bytes());
            continue;
        }
        total.add(o.device_bytes());
        by_kind.entry(kind).or_default().add(o.device_bytes());
        objects.push(Orphan {
            kind,
            kinds,
            category: o.category,
            address: o.address,
            bytes: o.bytes,
            device_bytes: o.device_bytes(),
            device: o.device,
            communicator: o.origin.communicator,
            seq: o.origin.seq,
            time_ns: o.origin.time_ns,
            step: o.origin.step,
            site: name(state, o.origin.site),
        });
    }
    objects.sort_by(|a, b| b.device_bytes.cmp(&a.device_bytes).then(a.seq.cmp(&b.seq)));
    Orphans {
        total,
        by_kind: by_kind
            .into_iter()
            .map(|(kind, t)| OrphanGroup {
                kind,
                count: t.count,
                bytes: t.bytes,
            })
            .collect(),
        objects,
        uncertain,
    }
}
