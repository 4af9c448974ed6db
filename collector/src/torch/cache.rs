//! What PyTorch's caching allocator holds, from its own view (a recorder snapshot's segments and
//! blocks, and its ring of actions): per device, what it reserved from the driver, what its
//! tensors use, and what it keeps cached and free — whole free segments, which
//! `torch.cuda.empty_cache()` gives back, and free blocks split inside segments still in use,
//! which it cannot. Of those, the blocks smaller than every request that had to take a new
//! segment are unusable for the requests that came: the fragmentation a program pays for.
//!
//! The driver's view sees segments only, and so cannot tell a cache from fragmentation; this
//! view can. At an out-of-memory error it also says whether `empty_cache()` (the free segments
//! given back) or `expandable_segments:True` (free space anywhere usable, as the allocator maps
//! pages into one growing segment) would have served the request.

use std::collections::BTreeMap;

use super::snapshot::{Action, AllocatorSnapshot, BlockState};
use crate::analysis::fragmentation::{CacheUse, OomRelief};

/// The cache of every device of `snapshot`, in device order.
pub(crate) fn cache_use(snapshot: &AllocatorSnapshot) -> Vec<CacheUse> {
    let mut devices: BTreeMap<i32, CacheUse> = BTreeMap::new();
    for s in &snapshot.segments {
        let d = devices.entry(s.device).or_insert_with(|| CacheUse {
            device: s.device,
            ..CacheUse::default()
        });
        d.reserved += s.total_size;
        let in_use: u64 = s
            .blocks
            .iter()
            .filter(|b| b.state != BlockState::Inactive)
            .map(|b| b.size)
            .sum();
        d.allocated += in_use;
        let free: Vec<u64> = s
            .blocks
            .iter()
            .filter(|b| b.state == BlockState::Inactive)
            .map(|b| b.size)
            .collect();
        if in_use == 0 {
            d.free_segments += s.total_size;
        } else {
            d.split_free += free.iter().sum::<u64>();
        }
        d.largest_free_block = d
            .largest_free_block
            .max(free.iter().copied().max().unwrap_or(0));
    }
    for d in devices.values_mut() {
        d.cached_free = d.reserved.saturating_sub(d.allocated);
        d.smallest_unserved_request = unserved_requests(snapshot, d.device).into_iter().min();
        if let Some(min) = d.smallest_unserved_request {
            d.unusable = split_blocks(snapshot, d.device)
                .filter(|&size| size < min)
                .sum();
        }
        d.at_steps = at_steps(snapshot, d);
    }
    devices.into_values().collect()
}

/// Sizes of the free blocks inside segments in use on `device`.
fn split_blocks(snapshot: &AllocatorSnapshot, device: i32) -> impl Iterator<Item = u64> + '_ {
    snapshot
        .segments
        .iter()
        .filter(move |s| s.device == device)
        .filter(|s| s.blocks.iter().any(|b| b.state != BlockState::Inactive))
        .flat_map(|s| s.blocks.iter())
        .filter(|b| b.state == BlockState::Inactive)
        .map(|b| b.size)
}

/// The requests on `device` that took a new segment: each tensor allocation at an address of a
/// segment the allocator took right before it.
fn unserved_requests(snapshot: &AllocatorSnapshot, device: i32) -> Vec<u64> {
    let mut out = Vec::new();
    let mut fresh: Option<(u64, u64)> = None;
    for e in snapshot.traces.iter().filter(|e| e.device == device) {
        match e.action {
            Action::SegmentAlloc | Action::SegmentMap => fresh = Some((e.addr, e.size)),
            Action::Alloc => {
                if let Some((start, size)) = fresh.take() {
                    if e.addr >= start && e.addr < start.saturating_add(size) {
                        out.push(e.size);
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// Reserved and allocated bytes at each step mark inside the ring's window: walked back from the
/// snapshot's totals, undoing each action after the mark.
fn at_steps(snapshot: &AllocatorSnapshot, now: &CacheUse) -> Vec<(u64, u64, u64)> {
    let Some(first) = snapshot
        .traces
        .iter()
        .find(|e| e.device == now.device)
        .map(|e| e.time_us)
    else {
        return Vec::new();
    };
    // Tensors' requested bytes, as the ring counts them (blocks round them up to 512 bytes).
    let requested: u64 = snapshot
        .segments
        .iter()
        .filter(|s| s.device == now.device)
        .flat_map(|s| s.blocks.iter())
        .filter(|b| b.state != BlockState::Inactive)
        .map(|b| b.requested_size)
        .sum();
    let (mut reserved, mut allocated) = (now.reserved as i128, requested as i128);
    let mut entries = snapshot
        .traces
        .iter()
        .rev()
        .filter(|e| e.device == now.device)
        .peekable();
    let mut out = Vec::new();
    for mark in snapshot.step_marks.iter().rev() {
        if mark.time_us < first {
            break;
        }
        while let Some(e) = entries.next_if(|e| e.time_us > mark.time_us) {
            let size = i128::from(e.size);
            match e.action {
                Action::SegmentAlloc | Action::SegmentMap => reserved -= size,
                Action::SegmentFree | Action::SegmentUnmap => reserved += size,
                Action::Alloc => allocated -= size,
                Action::FreeCompleted => allocated += size,
                _ => {}
            }
        }
        out.push((mark.step, reserved.max(0) as u64, allocated.max(0) as u64));
    }
    out.reverse();
    out
}

/// At the out-of-memory error a snapshot was taken at: whether `empty_cache()` or expandable
/// segments would have served the request.
pub fn oom_relief(snapshot: &AllocatorSnapshot) -> Option<OomRelief> {
    let oom = snapshot.oom?;
    let device = i32::try_from(oom.device).unwrap_or(-1);
    let cache = cache_use(snapshot)
        .into_iter()
        .find(|c| c.device == device)
        .unwrap_or_default();
    let room = |extra: u64| oom.device_free.saturating_add(extra) >= oom.requested;
    Some(OomRelief {
        device: oom.device,
        requested: oom.requested,
        device_free: oom.device_free,
        free_segments: cache.free_segments,
        cached_free: cache.cached_free,
        empty_cache_serves: room(cache.free_segments),
        expandable_serves: room(cache.cached_free),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::torch::snapshot::{OomFacts, SnapshotBlock, SnapshotSegment, StepMark, TraceEntry};

    const MIB: u64 = 1 << 20;

    fn block(address: u64, size: u64, requested: u64, state: BlockState) -> SnapshotBlock {
        SnapshotBlock {
            address,
            size,
            requested_size: requested,
            state,
            stack: 0,
        }
    }

    fn segment(address: u64, total: u64, blocks: Vec<SnapshotBlock>) -> SnapshotSegment {
        SnapshotSegment {
            device: 0,
            address,
            total_size: total,
            allocated_size: 0,
            active_size: 0,
            stream: 0,
            large: true,
            expandable: false,
            blocks,
        }
    }

    fn entry(action: Action, addr: u64, size: u64, time_us: i64) -> TraceEntry {
        TraceEntry {
            device: 0,
            action,
            addr,
            size,
            stream: 0,
            time_us,
            stack: 0,
        }
    }

    /// A 20 MiB segment holding an 8 MiB tensor with 10 MiB and 2 MiB free beside it, and a
    /// 4 MiB segment nothing uses. The ring: the 20 MiB segment taken for the 8 MiB tensor at
    /// step 1, a 4 MiB one for a 4 MiB tensor at step 2, that tensor freed at step 3.
    fn snapshot() -> AllocatorSnapshot {
        use Action::*;
        use BlockState::*;
        AllocatorSnapshot {
            segments: vec![
                segment(
                    0x1000_0000,
                    20 * MIB,
                    vec![
                        block(0x1000_0000, 8 * MIB, 8 * MIB - 100, ActiveAllocated),
                        block(0x1080_0000, 10 * MIB, 0, Inactive),
                        block(0x1120_0000, 2 * MIB, 0, Inactive),
                    ],
                ),
                segment(
                    0x2000_0000,
                    4 * MIB,
                    vec![block(0x2000_0000, 4 * MIB, 0, Inactive)],
                ),
            ],
            traces: vec![
                entry(SegmentAlloc, 0x1000_0000, 20 * MIB, 100),
                entry(Alloc, 0x1000_0000, 8 * MIB - 100, 101),
                entry(SegmentAlloc, 0x2000_0000, 4 * MIB, 200),
                entry(Alloc, 0x2000_0000, 4 * MIB, 201),
                entry(FreeRequested, 0x2000_0000, 4 * MIB, 300),
                entry(FreeCompleted, 0x2000_0000, 4 * MIB, 301),
            ],
            step_marks: [(1, 150), (2, 250), (3, 350)]
                .map(|(step, time_us)| StepMark { step, time_us })
                .to_vec(),
            ..AllocatorSnapshot::default()
        }
    }

    #[test]
    fn the_cache_is_told_apart_from_what_is_unusable() {
        let c = &cache_use(&snapshot())[0];
        assert_eq!(
            (c.reserved, c.allocated, c.cached_free),
            (24 * MIB, 8 * MIB, 16 * MIB)
        );
        assert_eq!((c.free_segments, c.split_free), (4 * MIB, 12 * MIB));
        assert_eq!(c.largest_free_block, 10 * MIB);
        // The requests that took a new segment: 8 MiB - 100 and 4 MiB; free split blocks
        // smaller than 4 MiB (the 2 MiB one) could serve none of them.
        assert_eq!(c.smallest_unserved_request, Some(4 * MIB));
        assert_eq!(c.unusable, 2 * MIB);
        let tensor = 8 * MIB - 100;
        assert_eq!(
            c.at_steps,
            [
                (1, 20 * MIB, tensor),
                (2, 24 * MIB, tensor + 4 * MIB),
                (3, 24 * MIB, tensor)
            ]
        );
    }

    #[test]
    fn an_out_of_memory_error_says_what_would_have_served_it() {
        let mut s = snapshot();
        let oom = |requested, device_free| OomFacts {
            device: 0,
            requested,
            device_allocated: 0,
            device_free,
        };
        s.oom = Some(oom(6 * MIB, 3 * MIB));
        let r = oom_relief(&s).unwrap();
        // 3 MiB free + 4 MiB of free segments: enough once given back.
        assert!(r.empty_cache_serves && r.expandable_serves);
        s.oom = Some(oom(16 * MIB, 3 * MIB));
        let r = oom_relief(&s).unwrap();
        // 3 + 4 is not enough; 3 + 16 free in all is, with pages mapped where they are free.
        assert!(!r.empty_cache_serves && r.expandable_serves);
        s.oom = Some(oom(64 * MIB, 3 * MIB));
        let r = oom_relief(&s).unwrap();
        assert!(!r.empty_cache_serves && !r.expandable_serves);
        s.oom = None;
        assert_eq!(oom_relief(&s), None);
    }
}
