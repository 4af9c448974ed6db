//! Call sites as nodes of the graph: every object points at the site that allocated it.
//!
//! A site is the interned native stack of the call when one was captured, else the call's return
//! address alone (the same grouping the call-site table has always used). Sites get small dense
//! ids in the order they are first seen, so replaying the same trace twice gives the same ids.

use serde::Serialize;

use crate::event::StackId;
use crate::fasthash::FxHashMap;

/// Dense id of a call site within one replay.
pub type SiteId = u32;

/// What identifies a call site in a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct SiteKey {
    /// Interned stack, 0 when the site is its caller address alone.
    pub stack: StackId,
    /// Return address of the call when no stack was captured, else 0.
    #[serde(serialize_with = "super::objects::hex")]
    pub caller: u64,
}

impl SiteKey {
    /// The site of a call from `caller` with `stack`.
    pub fn of(caller: u64, stack: StackId) -> Self {
        if stack != 0 {
            SiteKey { stack, caller: 0 }
        } else {
            SiteKey { stack: 0, caller }
        }
    }
}

/// Sites seen so far, with the first call seen at each (which names it in reports).
#[derive(Debug, Default)]
pub(crate) struct SiteTable {
    ids: FxHashMap<SiteKey, SiteId>,
    /// Per site: its key and the return address of the first call seen there.
    sites: Vec<(SiteKey, u64)>,
}

impl SiteTable {
    /// The id of the site of a call from `caller` with `stack`.
    #[inline]
    pub(crate) fn intern(&mut self, caller: u64, stack: StackId) -> SiteId {
        let key = SiteKey::of(caller, stack);
        let next = self.sites.len() as SiteId;
        let id = *self.ids.entry(key).or_insert(next);
        if id == next {
            self.sites.push((key, caller));
        }
        id
    }

    /// The key of site `id`, and the return address of the first call there.
    pub(crate) fn get(&self, id: SiteId) -> Option<(SiteKey, u64)> {
        self.sites.get(id as usize).copied()
    }

    /// The id of a site, if seen.
    pub(crate) fn find(&self, key: SiteKey) -> Option<SiteId> {
        self.ids.get(&key).copied()
    }

    /// Sites seen.
    pub(crate) fn len(&self) -> usize {
        self.sites.len()
    }
}
