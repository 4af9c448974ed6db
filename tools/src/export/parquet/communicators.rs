//! The `communicators` table: one row per NCCL communicator the trace showed, as the report
//! lists them (live and finalized ones, then up to 1024 ended ones, the most recent), with where
//! it was made. Its memory is the `allocations` rows whose `communicator` is its `comm`.

use anyhow::Result;
use vramtrace_collector::live::LiveState;

use super::allocations::bits;
use super::names::Names;
use super::table::{table, TableFile};

table! {
    /// The columns of `communicators` (docs/data.md).
    Communicators {
        pid: "required int64" => Dictionary;
        comm: "required int64" => Plain;
        comm_rank: "required int32" => Dictionary;
        nranks: "required int32" => Dictionary;
        device: "required int32" => Dictionary;
        parent: "optional int64" => Plain;
        state: "required binary" " (STRING);" => Dictionary;
        api: "required binary" " (STRING);" => Dictionary;
        created_seq: "required int64" => Delta;
        created_time_ns: "required int64" => Delta;
        created_step: "required int64" => Dictionary;
        ended_seq: "optional int64" => Delta;
        site: "required int64" => Dictionary;
        label: "required binary" " (STRING);" => Dictionary;
    }
}

/// A row per communicator of `state`.
pub fn write(
    t: &mut TableFile<Communicators>,
    state: &LiveState,
    names: &mut Names,
    pid: i64,
) -> Result<()> {
    for c in state.communicators() {
        let rows = &mut t.rows;
        let o = &c.origin;
        rows.pid.int(pid);
        rows.comm.int(bits(c.comm));
        rows.comm_rank.int(c.rank);
        rows.nranks.int(c.nranks);
        rows.device.int(c.device);
        rows.parent
            .opt_int((c.parent != 0).then_some(bits(c.parent)));
        rows.state.text(c.state.name());
        rows.api.text(o.api.name());
        rows.created_seq.int(bits(o.seq));
        rows.created_time_ns.int(bits(o.time_ns));
        rows.created_step.int(bits(o.step));
        rows.ended_seq.opt_int(c.ended_seq.map(bits));
        rows.site.int(i64::from(o.site));
        rows.label.text(names.site(state, o.site));
        t.row_done()?;
    }
    Ok(())
}
