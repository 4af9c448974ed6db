//! Running totals of live memory: per call site and holder (a device, or pinned host memory), per
//! holder, and per memory pool, kept current on every event so that the peak, the growth series
//! and an out-of-memory snapshot never need a scan of the live set.
//!
//! What each site held at a holder's peak is kept lazily: a site that changes for the first time
//! after the latest peak first saves the value it held then; a site unchanged since still holds
//! it. That keeps the peak exact at O(1) per event, however often a growing run sets a new one.

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::objects::hex;
use super::series::{Grid, Series};
use super::sites::CallId;
use crate::event::MemKind;
use crate::ids::SiteId;

/// Sample points kept per series for steps.
const STEP_POINTS: usize = 256;
/// Sample points kept per series for time windows.
const WINDOW_POINTS: usize = 128;
/// The narrowest time window, before the grid starts doubling it.
pub(crate) const BASE_WINDOW_NS: u64 = 1_000_000;

/// Where live bytes are: on a device, or pinned host memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(tag = "memory", rename_all = "kebab-case")]
pub enum Holder {
    /// Device memory on a device (-1 when the device is unknown).
    Device { device: i32 },
    /// Pinned or registered host memory.
    Host,
}

impl Holder {
    /// Short name for tables: `device 0`, `unknown device`, `host`.
    pub fn name(self) -> String {
        match self {
            Holder::Device { device } if device < 0 => "unknown device".to_string(),
            Holder::Device { device } => format!("device {device}"),
            Holder::Host => "host".to_string(),
        }
    }
}

/// A memory pool: its handle (0 for the device's default pool) and device.
pub(crate) type PoolKey = (u64, i32);

/// Who an object's bytes are charged to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Charge {
    pub(crate) site: SiteId,
    pub(crate) holder: Holder,
    /// The pool an async allocation came from.
    pub(crate) pool: Option<PoolKey>,
}

/// Where a charge lands: the indexes of its (site, holder) entry, its holder and its pool.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    entry: u32,
    holder: u32,
    /// [`NO_POOL`] when the charge is to no pool.
    pool: u32,
}

const NO_POOL: u32 = u32::MAX;

impl Slot {
    /// The slot of no charge yet: no entry has this index (a ledger of 2^32 entries would not
    /// fit in memory).
    const UNSET: Slot = Slot {
        entry: u32::MAX,
        holder: u32::MAX,
        pool: NO_POOL,
    };
}

/// The kinds of allocation whose charges go to different slots: host memory, device memory from
/// a pool, other device memory.
const KIND_CLASSES: usize = 3;

/// The class of `kind`: exhaustive, so that a new kind must be placed here (and should be in the
/// table [`kind_class`] reads).
const fn class_of(kind: MemKind) -> u8 {
    match kind {
        MemKind::HostPinned => 0,
        MemKind::Async => 1,
        MemKind::Device | MemKind::Managed | MemKind::Pitched | MemKind::Array => 2,
    }
}

/// [`class_of`] from a table by the kind's discriminant: one load, where the match took a
/// compare per class on every charge.
#[inline(always)]
fn kind_class(kind: MemKind) -> usize {
    const KINDS: [MemKind; 6] = [
        MemKind::Device,
        MemKind::Async,
        MemKind::Managed,
        MemKind::Pitched,
        MemKind::HostPinned,
        MemKind::Array,
    ];
    const CLASS: [u8; KINDS.len()] = {
        let mut c = [0; KINDS.len()];
        let mut i = 0;
        while i < KINDS.len() {
            // Each kind at its own discriminant: a kind left out or out of place fails here.
            assert!(KINDS[i] as usize == i);
            c[i] = class_of(KINDS[i]);
            i += 1;
        }
        c
    };
    // A kind the table lacks (one added since) still finds its class.
    usize::from(
        CLASS
            .get(kind as usize)
            .copied()
            .unwrap_or_else(|| class_of(kind)),
    )
}

/// A holder's highest live point.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PeakPoint {
    /// Live bytes then.
    pub bytes: u64,
    /// Live objects then.
    pub count: u64,
    /// Ordinal of the event after which it was reached (1 = the first event applied).
    pub event: u64,
    pub seq: u64,
    pub time_ns: u64,
    /// Steps begun before it.
    pub step: u64,
}

/// What a memory pool holds for stream-ordered allocations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PoolUse {
    /// Pool handle; `0x0` is the device's default pool.
    #[serde(serialize_with = "hex")]
    pub pool: u64,
    pub device: i32,
    /// Bytes of live allocations from it.
    pub in_use: u64,
    /// Live allocations from it.
    pub allocations: u64,
    /// The most it ever had in use.
    pub high_water: u64,
    /// The most it had in use since its last trim (what it may still hold: a pool keeps freed
    /// memory for reuse until trimmed or, past its release threshold, at a synchronization).
    pub high_water_since_trim: u64,
    pub trims: u64,
}

/// Live bytes of one site on one holder.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) site: SiteId,
    pub(crate) holder: Holder,
    pub(crate) bytes: u64,
    pub(crate) count: u64,
    /// Objects counted live since the ledger began (a restored one's since its snapshot).
    pub(crate) made: u64,
    /// Objects live when the state was restored from a segment's snapshot (0 otherwise).
    pub(crate) restored: u64,
    /// Event ordinal of the last change.
    last_change: u64,
    /// Bytes and count at the holder's peak, valid when changed since it.
    at_peak: (u64, u64),
    /// The ledger's ticks when the series were last settled.
    settled: u64,
    pub(crate) steps: Series,
    pub(crate) windows: Series,
}

/// Live bytes of one holder.
#[derive(Clone, Debug)]
pub(crate) struct HolderState {
    pub(crate) holder: Holder,
    pub(crate) bytes: u64,
    pub(crate) count: u64,
    pub(crate) peak: PeakPoint,
    /// The ledger's ticks when the series were last settled.
    settled: u64,
    pub(crate) steps: Series,
    pub(crate) windows: Series,
}

/// The running totals.
#[derive(Debug)]
pub(crate) struct Ledger {
    pub(crate) entries: Vec<Entry>,
    index: FxHashMap<(SiteId, Holder), u32>,
    pub(crate) holders: Vec<HolderState>,
    pools: Vec<PoolUse>,
    pool_index: FxHashMap<PoolKey, u32>,
    /// The slot of each call's allocations per kind class once charged ([`Slot::UNSET`] before):
    /// allocations come and go millions of times from a few calls, and this spares them the
    /// lookups. Not an `Option`: the slot is read field by field where it lies, not copied out.
    by_call: Vec<[Slot; KIND_CLASSES]>,
    pub(crate) steps: Grid,
    pub(crate) windows: Grid,
    /// Time of the first event: time windows count from it.
    window_origin: Option<u64>,
    /// Time at which the next time-window sample is due (0 before the first event).
    next_window_ns: u64,
    /// The current event: ordinal, seq, time, step.
    event: u64,
    seq: u64,
    time_ns: u64,
    step: u64,
    /// Sample points taken on either grid: a series settled at the current count has nothing to
    /// catch up, which most changes find with one comparison.
    ticks: u64,
    /// Holders changed by the current event: bit i for holder i < 64, the rest listed.
    touched: u64,
    touched_more: Vec<usize>,
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger {
            entries: Vec::new(),
            index: FxHashMap::default(),
            holders: Vec::new(),
            pools: Vec::new(),
            pool_index: FxHashMap::default(),
            by_call: Vec::new(),
            steps: Grid::new(STEP_POINTS),
            windows: Grid::new(WINDOW_POINTS),
            window_origin: None,
            next_window_ns: 0,
            event: 0,
            seq: 0,
            time_ns: 0,
            step: 0,
            ticks: 0,
            touched: 0,
            touched_more: Vec::new(),
        }
    }
}

impl Ledger {
    /// Starts an event: numbers it and takes the time-window samples that passed before it.
    #[inline]
    pub(crate) fn begin_event(&mut self, seq: u64, time_ns: u64, step: u64) {
        self.event += 1;
        self.seq = seq;
        self.time_ns = time_ns;
        self.step = step;
        // Most events fall inside the current window; only this method ticks the window grid,
        // so the time of the next sample stays valid until it is reached.
        if time_ns < self.next_window_ns {
            return;
        }
        self.window_ends(time_ns);
    }

    /// Starts the event after which a snapshot was taken (the `events`-th), for the charges
    /// that put its live objects back; [`Ledger::end_event`] ends it.
    pub(crate) fn begin_restore(&mut self, events: u64, seq: u64, time_ns: u64, step: u64) {
        self.event = events.saturating_sub(1);
        self.begin_event(seq, time_ns, step);
    }

    /// Takes the time-window samples that passed before `time_ns`: out of line, once a window.
    #[cold]
    #[inline(never)]
    fn window_ends(&mut self, time_ns: u64) {
        let origin = *self.window_origin.get_or_insert(time_ns);
        loop {
            let k = self.windows.next_kept_tick();
            let at = origin.saturating_add(k.saturating_mul(BASE_WINDOW_NS));
            if time_ns < at {
                self.next_window_ns = at;
                break;
            }
            self.windows.tick_at(k, at - origin);
            self.ticks += 1;
        }
    }

    /// Ends an event: a holder it raised above its peak sets a new one.
    #[inline]
    pub(crate) fn end_event(&mut self) {
        while self.touched != 0 {
            let i = self.touched.trailing_zeros() as usize;
            self.touched &= self.touched - 1;
            self.settle_peak(i);
        }
        if !self.touched_more.is_empty() {
            for i in std::mem::take(&mut self.touched_more) {
                self.settle_peak(i);
            }
        }
    }

    /// Holder `i` sets a new peak if the current event raised it above its last.
    #[inline]
    fn settle_peak(&mut self, i: usize) {
        let h = &mut self.holders[i];
        if h.bytes > h.peak.bytes {
            h.peak = PeakPoint {
                bytes: h.bytes,
                count: h.count,
                event: self.event,
                seq: self.seq,
                time_ns: self.time_ns,
                step: self.step,
            };
        }
    }

    /// The objects just restored from a snapshot are each entry's `restored`.
    pub(crate) fn note_restored(&mut self) {
        for e in &mut self.entries {
            e.restored = e.count;
        }
    }

    /// Drops every series' step samples (the steps were those of a pattern that stopped): the
    /// next step boundary is the first sample again. Time-window samples stay.
    pub(crate) fn forget_steps(&mut self) {
        self.steps = Grid::new(STEP_POINTS);
        for e in &mut self.entries {
            e.steps = Series::new(&self.steps);
        }
        for h in &mut self.holders {
            h.steps = Series::new(&self.steps);
        }
    }

    /// A step begins: every series takes a sample.
    pub(crate) fn step_boundary(&mut self, step: u64) {
        self.steps.tick(step);
        self.ticks += 1;
    }

    /// Time of the first event, from which time windows count.
    pub(crate) fn window_origin(&self) -> Option<u64> {
        self.window_origin
    }

    /// Sequence number of the current event.
    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }

    /// Time of the current event.
    pub(crate) fn time_ns(&self) -> u64 {
        self.time_ns
    }

    fn holder_index(&mut self, holder: Holder) -> usize {
        if let Some(i) = self.holders.iter().position(|h| h.holder == holder) {
            return i;
        }
        self.holders.push(HolderState {
            holder,
            bytes: 0,
            count: 0,
            peak: PeakPoint::default(),
            settled: self.ticks,
            steps: Series::new(&self.steps),
            windows: Series::new(&self.windows),
        });
        self.holders.len() - 1
    }

    fn entry_index(&mut self, site: SiteId, holder: Holder) -> usize {
        let next = self.entries.len() as u32;
        let i = *self.index.entry((site, holder)).or_insert(next);
        if i == next {
            self.entries.push(Entry {
                site,
                holder,
                bytes: 0,
                count: 0,
                made: 0,
                restored: 0,
                last_change: 0,
                at_peak: (0, 0),
                settled: self.ticks,
                steps: Series::new(&self.steps),
                windows: Series::new(&self.windows),
            });
        }
        i as usize
    }

    /// Counts an object of `bytes` as live.
    #[inline]
    pub(crate) fn charge(&mut self, c: Charge, bytes: u64) {
        let s = self.slot(c);
        self.change::<true>(s, bytes);
    }

    /// Counts an object of `bytes` as gone.
    #[inline]
    pub(crate) fn discharge(&mut self, c: Charge, bytes: u64) {
        let s = self.slot(c);
        self.change::<false>(s, bytes);
    }

    /// Counts an allocation of `kind` and `bytes` made by `call` as live (`ADD`) or gone;
    /// `charge` says where it goes the first time.
    #[inline(always)]
    pub(crate) fn change_by_call<const ADD: bool>(
        &mut self,
        call: CallId,
        kind: MemKind,
        charge: impl FnOnce() -> Charge,
        bytes: u64,
    ) {
        let (i, class) = (call as usize, kind_class(kind));
        match self.by_call.get(i).map(|s| s[class]) {
            Some(s) if s.entry != Slot::UNSET.entry => self.change::<ADD>(s, bytes),
            // Not merged with the slot found: a slot from either way went through memory.
            _ => self.first_charge::<ADD>(i, class, charge(), bytes),
        }
    }

    /// [`Ledger::change_by_call`] the first time call `i` charges kind class `class`: out of
    /// line, so that the path every other charge takes keeps few registers to save.
    #[cold]
    #[inline(never)]
    fn first_charge<const ADD: bool>(
        &mut self,
        i: usize,
        class: usize,
        charge: Charge,
        bytes: u64,
    ) {
        let s = self.slot(charge);
        if self.by_call.len() <= i {
            self.by_call.resize(i + 1, [Slot::UNSET; KIND_CLASSES]);
        }
        self.by_call[i][class] = s;
        self.change::<ADD>(s, bytes);
    }

    /// Where charge `c` lands, its entry, holder and pool made on first use.
    fn slot(&mut self, c: Charge) -> Slot {
        let holder = self.holder_index(c.holder) as u32;
        let entry = self.entry_index(c.site, c.holder) as u32;
        let pool = match c.pool {
            Some(key) => {
                let next = self.pools.len() as u32;
                let i = *self.pool_index.entry(key).or_insert(next);
                if i == next {
                    self.pools.push(PoolUse {
                        pool: key.0,
                        device: key.1,
                        ..PoolUse::default()
                    });
                }
                i
            }
            None => NO_POOL,
        };
        Slot {
            entry,
            holder,
            pool,
        }
    }

    /// Counts `bytes` as live (`ADD`) or gone at slot `s`. Generic, so that adding and removing
    /// are two straight paths rather than one with a branch that alternates unpredictably.
    #[inline(always)]
    fn change<const ADD: bool>(&mut self, s: Slot, bytes: u64) {
        let hi = s.holder as usize;
        debug_assert!(hi < self.holders.len() && (s.entry as usize) < self.entries.len());
        // SAFETY: `slot` made `s` from the indexes of a holder and an entry it found or pushed,
        // and neither list ever shrinks.
        let h = unsafe { self.holders.get_unchecked_mut(hi) };
        let peak_event = h.peak.event;
        // SAFETY: as above.
        let e = unsafe { self.entries.get_unchecked_mut(s.entry as usize) };
        if e.last_change <= peak_event {
            e.at_peak = (e.bytes, e.count);
        }
        e.last_change = self.event;
        if e.settled != self.ticks {
            settle(
                &mut e.steps,
                &mut e.windows,
                (&self.steps, &self.windows),
                e.bytes,
            );
            e.settled = self.ticks;
        }
        apply::<ADD>(&mut e.bytes, &mut e.count, bytes);
        e.made += u64::from(ADD);
        if h.settled != self.ticks {
            settle(
                &mut h.steps,
                &mut h.windows,
                (&self.steps, &self.windows),
                h.bytes,
            );
            h.settled = self.ticks;
        }
        apply::<ADD>(&mut h.bytes, &mut h.count, bytes);
        // Only what adds can raise a holder above its peak: a free leaves its holder alone at
        // the end of the event.
        if ADD {
            if hi < 64 {
                self.touched |= 1 << hi;
            } else if !self.touched_more.contains(&hi) {
                self.touched_more.push(hi);
            }
        }
        if let Some(p) = self.pools.get_mut(s.pool as usize) {
            apply::<ADD>(&mut p.in_use, &mut p.allocations, bytes);
            p.high_water = p.high_water.max(p.in_use);
            p.high_water_since_trim = p.high_water_since_trim.max(p.in_use);
        }
    }

    /// A pool trimmed to `keep` bytes: it now holds at most what is in use, or `keep`.
    pub(crate) fn trim_pool(&mut self, key: PoolKey, keep: u64) {
        if let Some(&i) = self.pool_index.get(&key) {
            let p = &mut self.pools[i as usize];
            p.trims += 1;
            p.high_water_since_trim = p.high_water_since_trim.min(p.in_use.max(keep));
        }
    }

    /// Live bytes and objects of a holder.
    pub(crate) fn holder_totals(&self, holder: Holder) -> (u64, u64) {
        self.holders
            .iter()
            .find(|h| h.holder == holder)
            .map_or((0, 0), |h| (h.bytes, h.count))
    }

    /// Bytes and count entry `e` held at its holder's peak.
    pub(crate) fn at_peak(&self, e: &Entry) -> (u64, u64) {
        let peak_event = self
            .holders
            .iter()
            .find(|h| h.holder == e.holder)
            .map_or(0, |h| h.peak.event);
        if e.last_change <= peak_event {
            (e.bytes, e.count)
        } else {
            e.at_peak
        }
    }

    /// Pools that ever had an allocation, by device and handle.
    pub(crate) fn pools(&self) -> Vec<PoolUse> {
        let mut pools = self.pools.clone();
        pools.sort_by_key(|p| (p.device, p.pool));
        pools
    }
}

/// Brings the series `steps` and `windows` of something that held `bytes` since it last
/// changed up to the grids' latest samples: once a step or window per entry and holder, so out
/// of line, leaving the way of every other change with few registers to save.
#[cold]
#[inline(never)]
fn settle(steps: &mut Series, windows: &mut Series, grids: (&Grid, &Grid), bytes: u64) {
    steps.settle(grids.0, bytes);
    windows.settle(grids.1, bytes);
}

#[inline]
fn apply<const ADD: bool>(bytes: &mut u64, count: &mut u64, n: u64) {
    if ADD {
        *bytes += n;
        *count += 1;
    } else {
        *bytes = bytes.saturating_sub(n);
        *count = count.saturating_sub(1);
    }
}
