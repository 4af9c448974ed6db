//! Calls made where the tracer could not tell the device (no context current on the thread,
//! device -1): charged to the device of their context when an earlier call named it, and named
//! "unknown device" otherwise, never "device -1".

use vramtrace_collector::analysis::peaks;
use vramtrace_collector::live::Holder;

use crate::support::*;

#[test]
fn the_device_of_a_call_comes_from_its_context() {
    let mut b = Builder::new();
    // A call on context 0xc0 that knew its device (0), then two that did not: one on the same
    // context, one on a context never seen with a device.
    b.malloc(site(1), 0x1000_0000, MIB);
    b.device = -1;
    b.malloc(site(2), 0x2000_0000, 2 * MIB);
    b.context = 0xd0;
    b.malloc(site(3), 0x3000_0000, 4 * MIB);
    let state = b.replay();
    let holders: Vec<(Holder, u64)> = state
        .holders()
        .iter()
        .map(|h| (h.holder, h.bytes))
        .collect();
    let (device0, unknown) = (Holder::Device { device: 0 }, Holder::Device { device: -1 });
    assert_eq!(holders, [(unknown, 4 * MIB), (device0, 3 * MIB)]);
    let names: Vec<String> = peaks(&state)
        .holders
        .iter()
        .map(|h| h.holder.name())
        .collect();
    assert_eq!(names, ["unknown device", "device 0"]);
}
