//! Property tests: random valid event sequences against a plain model of what must be live.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

use proptest::prelude::*;
use vramtrace_collector::event::{Api, CommEnd, MemKind, Op};
use vramtrace_collector::live::{Category, LiveState};

use crate::support::*;

const KINDS: [MemKind; 5] = [
    MemKind::Device,
    MemKind::Async,
    MemKind::Managed,
    MemKind::Pitched,
    MemKind::HostPinned,
];

#[derive(Clone, Debug)]
enum MemAction {
    Alloc {
        kind: usize,
        slot: u64,
        size: u64,
        device: i32,
    },
    Free {
        slot: u64,
    },
    FreeHost {
        slot: u64,
    },
}

fn mem_action() -> impl Strategy<Value = MemAction> {
    prop_oneof![
        (0..KINDS.len(), 0..24u64, 1..10_000u64, 0..2i32).prop_map(|(kind, slot, size, device)| {
            MemAction::Alloc {
                kind,
                slot,
                size,
                device,
            }
        }),
        (0..24u64).prop_map(|slot| MemAction::Free { slot }),
        (0..24u64).prop_map(|slot| MemAction::FreeHost { slot }),
    ]
}

fn ptr(slot: u64) -> u64 {
    0x10_0000 + slot * 0x1_0000
}

/// Device bytes per device, recomputed from the listing.
fn listed_device_bytes(state: &LiveState) -> BTreeMap<i32, u64> {
    let mut by = BTreeMap::new();
    for o in state.live_objects() {
        if o.device_bytes() > 0 {
            *by.entry(o.device).or_default() += o.device_bytes();
        }
    }
    by
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn live_bytes_per_category_are_allocations_minus_frees(
        actions in prop::collection::vec(mem_action(), 1..200)
    ) {
        let mut t = Trace::new();
        // slot -> (kind, size, device); one slot holds one allocation of either family.
        let mut model: BTreeMap<u64, (MemKind, u64, i32)> = BTreeMap::new();
        for a in actions {
            match a {
                MemAction::Alloc { kind, slot, size, device } => {
                    if model.contains_key(&slot) {
                        continue;
                    }
                    let kind = KINDS[kind];
                    t.device = device;
                    t.ok(Api::CudaMalloc, alloc(kind, ptr(slot), size));
                    model.insert(slot, (kind, size, device));
                }
                MemAction::Free { slot } => {
                    if !model.get(&slot).is_some_and(|(k, _, _)| k.on_device()) {
                        continue;
                    }
                    t.free(ptr(slot));
                    model.remove(&slot);
                }
                MemAction::FreeHost { slot } => {
                    if model.get(&slot).is_none_or(|(k, _, _)| k.on_device()) {
                        continue;
                    }
                    t.ok(Api::CudaFreeHost, Op::FreeHost { ptr: ptr(slot) });
                    model.remove(&slot);
                }
            }
        }
        let mut want: BTreeMap<Category, (u64, u64)> = BTreeMap::new();
        let mut want_device: BTreeMap<i32, u64> = BTreeMap::new();
        for &(kind, size, device) in model.values() {
            let e = want.entry(Category::of_kind(kind)).or_default();
            e.0 += 1;
            e.1 += size;
            if kind.on_device() {
                *want_device.entry(device).or_default() += size;
            }
        }
        let got: BTreeMap<Category, (u64, u64)> = t
            .state
            .summary()
            .by_category
            .into_iter()
            .map(|c| (c.category, (c.count, c.bytes)))
            .collect();
        prop_assert_eq!(got, want);
        prop_assert_eq!(listed_device_bytes(&t.state), want_device.clone());
        for (d, b) in want_device {
            prop_assert_eq!(t.state.device_bytes(d), b);
        }
        prop_assert_eq!(t.state.anomalies().total(), 0);
    }
}

#[derive(Clone, Debug)]
enum VmmAction {
    Create { handle: u64, size: u64 },
    Release { handle: u64 },
    Retain { slot: u64 },
    Map { slot: u64, handle: u64 },
    Unmap { slot: u64, pages: u64 },
}

fn vmm_action() -> impl Strategy<Value = VmmAction> {
    prop_oneof![
        (1..8u64, 1..100_000u64).prop_map(|(handle, size)| VmmAction::Create { handle, size }),
        (1..8u64).prop_map(|handle| VmmAction::Release { handle }),
        (0..16u64).prop_map(|slot| VmmAction::Retain { slot }),
        (0..16u64, 1..8u64).prop_map(|(slot, handle)| VmmAction::Map { slot, handle }),
        (0..16u64, 1..4u64).prop_map(|(slot, pages)| VmmAction::Unmap { slot, pages }),
    ]
}

const VA: u64 = 0x7000_0000;
const PAGE: u64 = 0x1000;

#[derive(Clone, Copy, Debug, Default)]
struct ModelHandle {
    size: u64,
    refs: u32,
    mappings: u32,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn handles_live_while_referenced_or_mapped(
        actions in prop::collection::vec(vmm_action(), 1..200)
    ) {
        let mut t = Trace::new();
        t.ok(Api::CuMemAddressReserve, reserve(VA, 16 * PAGE));
        let mut handles: BTreeMap<u64, ModelHandle> = BTreeMap::new();
        let mut mapped: BTreeMap<u64, u64> = BTreeMap::new(); // slot -> handle
        for a in actions {
            match a {
                VmmAction::Create { handle, size } => {
                    if handles.contains_key(&handle) {
                        continue;
                    }
                    t.ok(Api::CuMemCreate, create(handle, size, 0));
                    handles.insert(handle, ModelHandle { size, refs: 1, mappings: 0 });
                }
                VmmAction::Release { handle } => {
                    let Some(h) = handles.get_mut(&handle) else { continue };
                    if h.refs == 0 {
                        continue;
                    }
                    t.ok(Api::CuMemRelease, Op::Release { handle });
                    h.refs -= 1;
                }
                VmmAction::Retain { slot } => {
                    let Some(&handle) = mapped.get(&slot) else { continue };
                    t.ok(Api::CuMemRetainAllocationHandle, Op::Retain { handle, ptr: VA + slot * PAGE });
                    handles.get_mut(&handle).unwrap().refs += 1;
                }
                VmmAction::Map { slot, handle } => {
                    if mapped.contains_key(&slot) || !handles.contains_key(&handle) {
                        continue;
                    }
                    t.ok(Api::CuMemMap, map(VA + slot * PAGE, PAGE, handle));
                    mapped.insert(slot, handle);
                    handles.get_mut(&handle).unwrap().mappings += 1;
                }
                VmmAction::Unmap { slot, pages } => {
                    // Only ranges of whole, consecutive mappings are valid.
                    let range: Vec<u64> = (slot..slot + pages).collect();
                    if !range.iter().all(|s| mapped.contains_key(s)) {
                        continue;
                    }
                    t.ok(Api::CuMemUnmap, Op::Unmap { ptr: VA + slot * PAGE, size: pages * PAGE });
                    for s in range {
                        let handle = mapped.remove(&s).unwrap();
                        handles.get_mut(&handle).unwrap().mappings -= 1;
                    }
                }
            }
            handles.retain(|_, h| h.refs > 0 || h.mappings > 0);
        }
        let listed: BTreeMap<u64, (u64, u32, u32)> = t
            .state
            .live_objects()
            .filter(|o| o.category == Category::Physical)
            .map(|o| (o.address, (o.bytes, o.refs.unwrap(), o.mappings.unwrap())))
            .collect();
        let want: BTreeMap<u64, (u64, u32, u32)> = handles
            .iter()
            .map(|(&k, h)| (k, (h.size, h.refs, h.mappings)))
            .collect();
        prop_assert_eq!(&listed, &want);
        for o in t.state.live_objects().filter(|o| o.category == Category::Mapping) {
            prop_assert!(listed.contains_key(&o.handle.unwrap()), "a mapping without its handle");
        }
        let mappings = t.state.live_objects().filter(|o| o.category == Category::Mapping).count();
        prop_assert_eq!(mappings, mapped.len());
        let bytes: u64 = handles.values().map(|h| h.size).sum();
        prop_assert_eq!(t.state.device_bytes(0), bytes);
        prop_assert_eq!(t.state.summary().device_memory.bytes, bytes);
        prop_assert_eq!(t.state.anomalies().total(), 0);
    }
}

/// One pointer-allocation event of a generated sequence.
#[derive(Clone, Debug)]
enum Step {
    Alloc { host: bool, ptr: u64, size: u64 },
    Free { host: bool, ptr: u64 },
}

/// Interprets random actions as a valid in-order sequence of allocations and frees.
fn valid_steps(actions: &[MemAction]) -> Vec<Step> {
    let mut live: BTreeMap<u64, bool> = BTreeMap::new();
    let mut steps = Vec::new();
    for a in actions {
        match *a {
            MemAction::Alloc {
                kind, slot, size, ..
            } => {
                if let Entry::Vacant(vacant) = live.entry(slot) {
                    let host = !KINDS[kind].on_device();
                    vacant.insert(host);
                    steps.push(Step::Alloc {
                        host,
                        ptr: ptr(slot),
                        size,
                    });
                }
            }
            MemAction::Free { slot } | MemAction::FreeHost { slot } => {
                if let Some(host) = live.remove(&slot) {
                    steps.push(Step::Free {
                        host,
                        ptr: ptr(slot),
                    });
                }
            }
        }
    }
    steps
}

/// Applies `(seq, step)` pairs in the given order.
fn apply_steps(order: &[(u64, Step)]) -> LiveState {
    let mut t = Trace::new();
    for (seq, step) in order {
        match *step {
            Step::Alloc { host, ptr, size } => {
                let kind = if host {
                    MemKind::HostPinned
                } else {
                    MemKind::Device
                };
                t.at(*seq, Api::CudaMalloc, alloc(kind, ptr, size));
            }
            Step::Free { host: false, ptr } => {
                t.at(*seq, Api::CudaFree, Op::Free { ptr, stream: 0 })
            }
            Step::Free { host: true, ptr } => t.at(*seq, Api::CudaFreeHost, Op::FreeHost { ptr }),
        }
    }
    t.state
}

fn live_set(state: &LiveState) -> Vec<(&'static str, u64, u64, u64)> {
    state
        .live_objects()
        .map(|o| (o.category.name(), o.address, o.bytes, o.origin.seq))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// The writer may put an event one place late; the live set must not notice.
    #[test]
    fn events_written_one_place_late_give_the_same_live_set(
        actions in prop::collection::vec(mem_action(), 1..150),
        swaps in prop::collection::vec(any::<bool>(), 150),
    ) {
        let in_order: Vec<(u64, Step)> = valid_steps(&actions)
            .into_iter()
            .enumerate()
            .map(|(i, s)| (i as u64 + 1, s))
            .collect();
        let mut late = in_order.clone();
        let mut i = 0;
        while i + 1 < late.len() {
            if swaps[i % swaps.len()] {
                late.swap(i, i + 1);
                i += 2;
            } else {
                i += 1;
            }
        }
        let want = apply_steps(&in_order);
        let got = apply_steps(&late);
        prop_assert_eq!(live_set(&got), live_set(&want));
        prop_assert_eq!(got.device_bytes(0), want.device_bytes(0));
        prop_assert_eq!(got.anomalies().total(), 0, "{:?}", got.anomalies().details());
    }
}

/// Any operation at all, over a few colliding addresses, handles and ids.
fn any_op() -> impl Strategy<Value = (Api, Op)> {
    let ptr = prop::sample::select(vec![0u64, 0x1000, 0x1800, 0x2000, 0x3000]);
    let size = prop::sample::select(vec![0u64, 1, 0x800, 0x1000, 0x2000]);
    let handle = 1..4u64;
    let comm = prop::sample::select(vec![0xau64, 0xb]);
    let kind = prop::sample::select(KINDS.to_vec());
    prop_oneof![
        (kind, ptr.clone(), size.clone()).prop_map(|(k, p, s)| (Api::CudaMalloc, alloc(k, p, s))),
        ptr.clone()
            .prop_map(|p| (Api::CudaFree, Op::Free { ptr: p, stream: 0 })),
        ptr.clone()
            .prop_map(|p| (Api::CudaFreeHost, Op::FreeHost { ptr: p })),
        (ptr.clone(), size.clone()).prop_map(|(p, s)| (Api::CuMemAddressReserve, reserve(p, s))),
        ptr.clone()
            .prop_map(|p| (Api::CuMemAddressFree, Op::ReserveFree { ptr: p, size: 0 })),
        (handle.clone(), size.clone(), 0..2i32)
            .prop_map(|(h, s, d)| (Api::CuMemCreate, create(h, s, d))),
        handle
            .clone()
            .prop_map(|h| (Api::CuMemRelease, Op::Release { handle: h })),
        (handle.clone(), ptr.clone()).prop_map(|(h, p)| (
            Api::CuMemRetainAllocationHandle,
            Op::Retain { handle: h, ptr: p }
        )),
        handle.clone().prop_map(|h| (
            Api::CuMemImportFromShareableHandle,
            Op::Import {
                handle: h,
                shareable: 0,
                handle_type: 0
            }
        )),
        (ptr.clone(), size.clone(), handle.clone())
            .prop_map(|(p, s, h)| (Api::CuMemMap, map(p, s, h))),
        (ptr.clone(), size.clone())
            .prop_map(|(p, s)| (Api::CuMemUnmap, Op::Unmap { ptr: p, size: s })),
        (handle.clone(), size.clone()).prop_map(|(a, b)| (
            Api::CuArrayCreate,
            Op::ArrayCreate {
                array: a,
                bytes: b,
                width: 0,
                height: 0,
                depth: 0,
                format: 0,
                channels: 0
            }
        )),
        handle
            .clone()
            .prop_map(|a| (Api::CuArrayDestroy, Op::ArrayDestroy { array: a })),
        ptr.clone()
            .prop_map(|p| (Api::CuIpcOpenMemHandle, Op::IpcOpen { ptr: p, flags: 0 })),
        ptr.clone()
            .prop_map(|p| (Api::CuIpcCloseMemHandle, Op::IpcClose { ptr: p })),
        (0..2i32).prop_map(|d| (
            Api::CuCtxCreateV2,
            Op::CtxCreate {
                ctx: 0xc1,
                device: d,
                flags: 0
            }
        )),
        Just((Api::CuCtxDestroy, Op::CtxDestroy { ctx: 0xc1 })),
        (0..2i32).prop_map(|d| (Api::CudaDeviceReset, Op::DeviceReset { device: d })),
        Just((
            Api::CudaMemPoolCreate,
            Op::PoolCreate { pool: 9, device: 0 }
        )),
        Just((Api::CudaMemPoolDestroy, Op::PoolDestroy { pool: 9 })),
        (comm.clone(), 0..2i32).prop_map(|(c, r)| (Api::NcclCommInitRank, comm_init(c, r, 2))),
        Just((
            Api::NcclCommInitAll,
            Op::CommInitAll {
                comms: vec![0xa, 0xb],
                devices: vec![0, 1]
            }
        )),
        (
            comm.clone(),
            prop::sample::select(vec![CommEnd::Destroy, CommEnd::Abort, CommEnd::Finalize])
        )
            .prop_map(|(c, how)| (Api::NcclCommDestroy, comm_end(c, how))),
        (ptr.clone(), size.clone())
            .prop_map(|(p, s)| (Api::NcclMemAlloc, Op::NcclMemAlloc { ptr: p, size: s })),
        (comm.clone(), ptr.clone(), handle.clone()).prop_map(|(c, p, h)| (
            Api::NcclCommRegister,
            Op::Register {
                comm: c,
                ptr: p,
                size: 16,
                handle: h
            }
        )),
        handle.prop_map(|h| (
            Api::NcclCommDeregister,
            Op::Deregister {
                comm: 0xa,
                handle: h
            }
        )),
        Just((Api::TracerMarkStep, Op::MarkStep { step: 0 })),
    ]
}

#[derive(Clone, Debug)]
pub(crate) struct AnyEvent {
    api: Api,
    op: Op,
    failed: bool,
    seq_back: u64,
    device: i32,
    context: u64,
    nccl_caller: bool,
    scope: u64,
    thread: u32,
}

pub(crate) fn any_event() -> impl Strategy<Value = AnyEvent> {
    (
        any_op(),
        prop::bool::weighted(0.15),
        prop::sample::select(vec![0u64, 0, 0, 1, 2]),
        0..2i32,
        prop::sample::select(vec![0u64, 0xc0, 0xc1]),
        any::<bool>(),
        0..3u64,
        0..3u32,
    )
        .prop_map(
            |((api, op), failed, seq_back, device, context, nccl_caller, scope, thread)| AnyEvent {
                api,
                op,
                failed,
                seq_back,
                device,
                context,
                nccl_caller,
                scope,
                thread,
            },
        )
}

/// The events of `events` as `t` numbers and places them (not applied): sequence numbers
/// from 11 on, some written a place or two late.
pub(crate) fn any_events(
    t: &mut Trace,
    events: Vec<AnyEvent>,
) -> Vec<vramtrace_collector::event::Event> {
    let mut seq = 10u64;
    events
        .into_iter()
        .map(|a| {
            t.device = a.device;
            t.context = a.context;
            t.caller = if a.nccl_caller {
                NCCL + 0x10
            } else {
                APP + 0x10
            };
            t.scope = a.scope;
            t.thread = a.thread;
            let mut e = t.make(a.api, a.op);
            seq += 1;
            e.seq = seq - a.seq_back;
            if a.failed {
                e.result = 2;
            }
            e
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Whatever a trace says, even nonsense out of order, the state stays consistent: the running
    /// per-device totals match the listing, every mapping has its handle, and a handle's counts
    /// match what uses it.
    #[test]
    fn any_event_sequence_keeps_the_state_consistent(
        events in prop::collection::vec(any_event(), 1..150)
    ) {
        let mut t = Trace::new();
        for e in any_events(&mut t, events) {
            t.apply(e);
        }
        let s = &t.state;
        for d in 0..2 {
            let listed: u64 = s.live_objects().filter(|o| o.device == d).map(|o| o.device_bytes()).sum();
            prop_assert_eq!(s.device_bytes(d), listed, "device {}", d);
        }
        let handles: BTreeMap<u64, (u32, u32)> = s
            .live_objects()
            .filter(|o| o.category == Category::Physical)
            .map(|o| (o.address, (o.refs.unwrap(), o.mappings.unwrap())))
            .collect();
        let mut uses: BTreeMap<u64, u32> = BTreeMap::new();
        for m in s.live_objects().filter(|o| o.category == Category::Mapping) {
            let h = m.handle.unwrap();
            prop_assert!(handles.contains_key(&h), "mapping at {:#x} without handle {h}", m.address);
            *uses.entry(h).or_default() += 1;
        }
        for (h, &(refs, mappings)) in &handles {
            prop_assert!(refs > 0 || mappings > 0, "handle {h} is dead but listed");
            prop_assert_eq!(mappings, uses.get(h).copied().unwrap_or(0), "handle {}", h);
        }
        let counted: u64 = s.anomalies().counts().map(|(_, n)| n).sum();
        prop_assert_eq!(counted, s.anomalies().total());
        let summary = s.summary();
        prop_assert_eq!(summary.device_memory.bytes, s.device_bytes(0) + s.device_bytes(1));
    }
}
