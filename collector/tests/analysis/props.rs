//! Property tests of the running totals against a plain model: for random valid sequences of
//! allocations, frees and step marks, per-site totals add up to the device totals and to the
//! listing, the peak is the highest point with exactly what was live then, and the step series
//! holds the model's value at every kept step boundary.

use std::collections::BTreeMap;

use proptest::prelude::*;
use vramtrace_collector::analysis::peaks;
use vramtrace_collector::event::{Api, MemKind, Op};
use vramtrace_collector::live::{Holder, LiveState, SampleAxis, StepSource};

use crate::support::*;

#[derive(Clone, Debug)]
enum Action {
    Alloc {
        slot: u64,
        size: u64,
        at: u64,
        device: i32,
        host: bool,
    },
    Free {
        slot: u64,
    },
    Mark,
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => (0..32u64, 1..1_000_000u64, 0..6u64, 0..2i32, prop::bool::weighted(0.15))
            .prop_map(|(slot, size, at, device, host)| Action::Alloc { slot, size, at, device, host }),
        3 => (0..32u64).prop_map(|slot| Action::Free { slot }),
        2 => Just(Action::Mark),
    ]
}

/// Site key (caller), device (-1 for host), size.
type Live = BTreeMap<u64, (u64, i32, u64)>;

fn totals(live: &Live, device: i32) -> (u64, BTreeMap<u64, (u64, u64)>) {
    let mut by_site = BTreeMap::new();
    let mut total = 0;
    for &(at, d, size) in live.values() {
        if d == device {
            total += size;
            let e: &mut (u64, u64) = by_site.entry(at).or_default();
            e.0 += 1;
            e.1 += size;
        }
    }
    (total, by_site)
}

fn site_totals(
    state: &LiveState,
    holdings: Vec<vramtrace_collector::live::SiteHolding>,
) -> BTreeMap<u64, (u64, u64)> {
    holdings
        .into_iter()
        .map(|h| (state.site(h.site).unwrap().1, (h.count, h.bytes)))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    #[test]
    fn totals_peaks_and_series_follow_the_model(actions in prop::collection::vec(action(), 1..1500)) {
        let mut b = Builder::new();
        let mut live: Live = BTreeMap::new();
        // Model of device 0: highest total and what each site held then; value at each mark.
        let mut peak = (0u64, BTreeMap::new());
        let mut at_marks = Vec::new();
        for a in actions {
            match a {
                Action::Alloc { slot, size, at, device, host } => {
                    if live.contains_key(&slot) {
                        continue;
                    }
                    b.device = device;
                    b.caller = site(at + 1);
                    let kind = if host { MemKind::HostPinned } else { MemKind::Device };
                    b.ok(Api::CudaMalloc, alloc(kind, 0x10_0000 * (slot + 1), size, 0));
                    live.insert(slot, (site(at + 1), if host { -1 } else { device }, size));
                }
                Action::Free { slot } => {
                    let Some((_, d, _)) = live.remove(&slot) else { continue };
                    let ptr = 0x10_0000 * (slot + 1);
                    if d < 0 {
                        b.ok(Api::CudaFreeHost, Op::FreeHost { ptr });
                    } else {
                        b.free(ptr);
                    }
                }
                Action::Mark => {
                    at_marks.push(totals(&live, 0).0);
                    b.mark(0);
                }
            }
            let (total, by_site) = totals(&live, 0);
            if total > peak.0 {
                peak = (total, by_site);
            }
        }
        let state = replay(&b.bytes(), StepSource::Marks);
        for device in [0, 1] {
            let holder = Holder::Device { device };
            let (total, by_site) = totals(&live, device);
            prop_assert_eq!(state.device_bytes(device), total);
            prop_assert_eq!(site_totals(&state, state.site_holdings(holder)), by_site);
            let listed: u64 = state.live_objects().filter(|o| o.device == device).map(|o| o.device_bytes()).sum();
            prop_assert_eq!(listed, total);
        }
        let (host, host_sites) = totals(&live, -1);
        prop_assert_eq!(site_totals(&state, state.site_holdings(Holder::Host)), host_sites);
        prop_assert_eq!(state.summary().host_memory.bytes, host);
        let device0 = Holder::Device { device: 0 };
        let p = peaks(&state);
        let got = p.holders.iter().find(|h| h.holder == device0).map_or(0, |h| h.peak.bytes);
        prop_assert_eq!(got, peak.0);
        if peak.0 > 0 {
            prop_assert_eq!(site_totals(&state, state.peak_holdings(device0)), peak.1);
        }
        // Every kept step sample is the model's total at that mark (before the holder was born,
        // the series has no points, or the leading zero).
        let series = state.holder_series(device0, SampleAxis::Steps);
        for (x, bytes) in series {
            prop_assert_eq!(bytes, at_marks[x as usize], "step {}", x);
        }
    }
}
