//! Fragmentation: address space reserved against physical memory mapped into it, physical memory
//! that no mapping reaches, memory pools' reserve against what they have in use, and the share of
//! allocated device memory that serves no live allocation, where the trace lets it be computed.
//!
//! A pool's reserve is not traced (the driver grows and releases it on its own); the most it had
//! in use since its last trim is the upper bound reported, exact for a pool that never releases
//! (release threshold at its maximum, as frameworks set it).

use serde::Serialize;

use crate::live::{Category, LiveState, PoolUse};

/// One reservation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReservationUse {
    #[serde(serialize_with = "crate::live::hex")]
    pub address: u64,
    pub size: u64,
    /// Bytes of it mapped.
    pub mapped: u64,
    /// The largest unmapped gap in it.
    pub largest_gap: u64,
}

/// Reserved address space and mappings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AddressSpace {
    pub reservations: u64,
    pub reserved_bytes: u64,
    /// Bytes mapped inside reservations.
    pub mapped_bytes: u64,
    pub unmapped_bytes: u64,
    /// Reservations with unmapped space, most unmapped first.
    pub by_reservation: Vec<ReservationUse>,
}

/// Physical memory and its mappings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PhysicalMemory {
    pub handles: u64,
    pub bytes: u64,
    /// Bytes some mapping covers.
    pub mapped_bytes: u64,
    /// Bytes no mapping covers: allocated, and unreachable.
    pub unmapped_bytes: u64,
}

/// One pool's reserve against its use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PoolReserve {
    #[serde(flatten)]
    pub pool: PoolUse,
    /// What it may hold but has not in use (`high_water_since_trim - in_use`).
    pub free_bytes: u64,
}

/// Fragmentation of everything live.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fragmentation {
    pub address_space: AddressSpace,
    pub physical: PhysicalMemory,
    pub pools: Vec<PoolReserve>,
    /// Device memory allocated but serving no live allocation: pools' free reserve and unmapped
    /// physical memory.
    pub unusable_bytes: u64,
    /// `unusable_bytes` over all device memory allocated (in use plus unusable); `null` when
    /// nothing is in use (memory a pool keeps after everything was freed is a cache for reuse,
    /// not fragmentation).
    pub unusable_share: Option<f64>,
    /// PyTorch's caching allocator per device, from its own view (its recorder's last snapshot):
    /// what it reserved, what its tensors use, what it keeps cached, and how much of that is
    /// unusable for the requests that came; empty without a snapshot.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allocator: Vec<CacheUse>,
    /// At PyTorch's first out-of-memory error: whether `empty_cache()` or expandable segments
    /// would have served it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oom_relief: Option<OomRelief>,
}

/// The fragmentation of `state`.
pub fn fragmentation(state: &LiveState) -> Fragmentation {
    let mut space = AddressSpace::default();
    let mappings: Vec<(u64, u64)> = state
        .live_objects()
        .filter(|o| o.category == Category::Mapping)
        .map(|o| (o.address, o.bytes))
        .collect();
    for r in state
        .live_objects()
        .filter(|o| o.category == Category::ReservationVa)
    {
        let end = r.address.saturating_add(r.bytes);
        let (mut mapped, mut gap, mut cursor) = (0u64, 0u64, r.address);
        // Mappings are in address order and do not overlap.
        for &(start, size) in mappings.iter().filter(|m| m.0 >= r.address && m.0 < end) {
            gap = gap.max(start.saturating_sub(cursor));
            let stop = start.saturating_add(size).min(end);
            mapped += stop - start;
            cursor = cursor.max(stop);
        }
        gap = gap.max(end.saturating_sub(cursor));
        space.reservations += 1;
        space.reserved_bytes += r.bytes;
        space.mapped_bytes += mapped;
        if mapped < r.bytes {
            space.by_reservation.push(ReservationUse {
                address: r.address,
                size: r.bytes,
                mapped,
                largest_gap: gap,
            });
        }
    }
    space.unmapped_bytes = space.reserved_bytes - space.mapped_bytes;
    space.by_reservation.sort_by(|a, b| {
        (b.size - b.mapped)
            .cmp(&(a.size - a.mapped))
            .then(a.address.cmp(&b.address))
    });
    let mut physical = PhysicalMemory::default();
    for (_, size, covered) in state.physical_coverage(None) {
        physical.handles += 1;
        physical.bytes += size;
        physical.mapped_bytes += covered;
    }
    physical.unmapped_bytes = physical.bytes - physical.mapped_bytes;
    let pools: Vec<PoolReserve> = state
        .pool_usage()
        .into_iter()
        .map(|p| PoolReserve {
            free_bytes: p.high_water_since_trim.saturating_sub(p.in_use),
            pool: p,
        })
        .collect();
    let unusable = physical.unmapped_bytes + pools.iter().map(|p| p.free_bytes).sum::<u64>();
    let in_use: u64 = state.summary().device_memory.bytes;
    let allocated = in_use + pools.iter().map(|p| p.free_bytes).sum::<u64>();
    Fragmentation {
        address_space: space,
        physical,
        pools,
        unusable_bytes: unusable,
        unusable_share: (in_use > 0).then(|| unusable as f64 / allocated as f64),
        allocator: Vec::new(),
        oom_relief: None,
    }
}

/// The caching allocator's memory on one device at a snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CacheUse {
    pub device: i32,
    /// Bytes of segments held from the driver.
    pub reserved: u64,
    /// Bytes of blocks held by tensors (or waiting for a stream to let them go).
    pub allocated: u64,
    /// `reserved - allocated`: cached and free.
    pub cached_free: u64,
    /// Of it, whole segments with no block in use: what `torch.cuda.empty_cache()` gives back.
    pub free_segments: u64,
    /// Of it, free blocks inside segments still in use: kept whatever the program does.
    pub split_free: u64,
    /// The largest free block.
    pub largest_free_block: u64,
    /// The smallest request in the recorder's window that the cache could not serve (it took a
    /// new segment); `null` when none did.
    pub smallest_unserved_request: Option<u64>,
    /// Free split blocks smaller than that request: unusable for the requests that came.
    pub unusable: u64,
    /// Reserved bytes, and tensors' requested bytes, at the program's step marks inside the
    /// recorder's window, `(step, reserved, allocated)`: the cache over time.
    pub at_steps: Vec<(u64, u64, u64)>,
}

/// Whether freeing the cache would have served a failed request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct OomRelief {
    pub device: i64,
    pub requested: u64,
    /// Bytes the driver had free when it failed.
    pub device_free: u64,
    /// Whole free segments then (`empty_cache()` returns them to the driver).
    pub free_segments: u64,
    /// All of the cache's free bytes then.
    pub cached_free: u64,
    /// `device_free + free_segments` covers the request.
    pub empty_cache_serves: bool,
    /// `device_free + cached_free` covers it: with `expandable_segments:True` the allocator maps
    /// pages wherever they are free instead of needing a whole segment.
    pub expandable_serves: bool,
}
