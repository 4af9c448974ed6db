//! Contexts, and the memory that goes with them when they are destroyed or reset.
//!
//! Destroying a context frees every pointer allocation and array made in it; resetting a device's
//! primary context (or `cudaDeviceReset`) frees those made in the primary context on that device.
//! Such objects were not leaked, so they leave the live set and are counted apart. Physical
//! handles, reservations and mappings are process-wide and survive.

use super::objects::{Allocation, Context, Flag, Origin};
use super::summary::Totals;
use super::{LiveState, ObjectRef};
use crate::event::Event;

impl LiveState {
    pub(super) fn on_ctx_create(
        &mut self,
        origin: Origin,
        ctx: u64,
        device: i32,
    ) -> Option<ObjectRef> {
        self.contexts.insert(
            ctx,
            Context {
                ctx,
                device,
                origin,
            },
        );
        None
    }

    pub(super) fn on_ctx_destroy(&mut self, e: &Event, ctx: u64) -> Option<ObjectRef> {
        self.contexts.remove(&ctx);
        let freed = self.tear_down(e.seq, |o| o.context == ctx);
        self.teardown.by_context_destroy.add_totals(freed);
        flag_survivors(self, |o| o.context == ctx);
        None
    }

    pub(super) fn on_device_reset(&mut self, e: &Event, device: i32) -> Option<ObjectRef> {
        // Everything on the device not made in a context of the program's own is the primary
        // context's (an unknown context, 0, included).
        let created: std::collections::HashSet<u64> = self.contexts.keys().copied().collect();
        let freed = self.tear_down(e.seq, |o| {
            o.device == device && !created.contains(&o.context)
        });
        self.teardown.by_device_reset.add_totals(freed);
        // What outlives the primary context (VMM objects made in it) has lost its context.
        flag_survivors(self, |o| {
            o.device == device && !created.contains(&o.context)
        });
        None
    }

    /// A primary context reference released: the last one destroys the primary context and
    /// everything in it, like a reset. Only counted references count: a release without a
    /// traced retain changes nothing.
    pub(super) fn on_primary_release(&mut self, e: &Event, device: i32) -> Option<ObjectRef> {
        let refs = self.primary_refs.get_mut(&device)?;
        *refs = refs.saturating_sub(1);
        if *refs > 0 {
            return None;
        }
        self.primary_refs.remove(&device);
        self.on_device_reset(e, device)
    }

    /// Removes the pointer allocations and arrays whose origin `doomed` selects.
    fn tear_down(&mut self, seq: u64, doomed: impl Fn(&Origin) -> bool) -> Totals {
        let mut freed = Totals::default();
        let sites = &self.sites;
        let doomed_allocation = |a: &Allocation| {
            let call = sites.call(a.call);
            doomed(&call.origin(a.seq, a.time_ns, a.step))
        };
        let gone: Vec<Allocation> = [&mut self.memory.device, &mut self.memory.host]
            .into_iter()
            .flat_map(|t| t.tear_down(seq, doomed_allocation))
            .collect();
        for a in gone {
            freed.add(a.size);
            self.discharge_allocation(&a);
            self.ended_now(&a);
        }
        let arrays: Vec<u64> = self
            .memory
            .arrays
            .values()
            .filter(|a| doomed(&a.origin))
            .map(|a| a.array)
            .collect();
        for id in arrays {
            if let Some(a) = self.memory.arrays.remove(&id) {
                freed.add(a.bytes);
                self.discharge_array(&a);
                self.ended_now(&a);
            }
        }
        freed
    }
}

/// Flags the VMM objects made in a destroyed context: they outlive it, and the user should know
/// their context is gone.
fn flag_survivors(state: &mut LiveState, made_in: impl Fn(&Origin) -> bool) {
    let v = &mut state.vmm;
    let flags = v
        .reservations
        .values_mut()
        .filter(|o| made_in(&o.origin))
        .map(|o| &mut o.flags)
        .chain(
            v.handles
                .values_mut()
                .filter(|o| made_in(&o.origin))
                .map(|o| &mut o.flags),
        )
        .chain(
            v.mappings
                .values_mut()
                .filter(|o| made_in(&o.origin))
                .map(|o| &mut o.flags),
        );
    for f in flags {
        f.insert(Flag::ContextGone);
    }
}
