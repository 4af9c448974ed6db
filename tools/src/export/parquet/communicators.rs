//! The `communicators` table: one row per NCCL communicator the trace showed, as the report
//! lists them (live and finalized ones, then up to 1024 ended ones, the most recent), with where
//! it was made. Its memory is the `allocations` rows whose `communicator` is its `comm`.

use anyhow::Result;
use arrow_array::builder::{Int32Builder, Int64Builder, StringBuilder};
use vramtrace_collector::live::LiveState;

use super::allocations::bits;
use super::names::Names;
use super::table::{table, TableFile};

table! {
    /// The columns of `communicators` (docs/data.md).
    Communicators {
        pid: Int64Builder = Int64Builder::new(), false;
        comm: Int64Builder = Int64Builder::new(), false;
        comm_rank: Int32Builder = Int32Builder::new(), false;
        nranks: Int32Builder = Int32Builder::new(), false;
        device: Int32Builder = Int32Builder::new(), false;
        parent: Int64Builder = Int64Builder::new(), true;
        state: StringBuilder = StringBuilder::new(), false;
        api: StringBuilder = StringBuilder::new(), false;
        created_seq: Int64Builder = Int64Builder::new(), false;
        created_time_ns: Int64Builder = Int64Builder::new(), false;
        created_step: Int64Builder = Int64Builder::new(), false;
        ended_seq: Int64Builder = Int64Builder::new(), true;
        site: Int64Builder = Int64Builder::new(), false;
        label: StringBuilder = StringBuilder::new(), false;
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
        rows.pid.append_value(pid);
        rows.comm.append_value(bits(c.comm));
        rows.comm_rank.append_value(c.rank);
        rows.nranks.append_value(c.nranks);
        rows.device.append_value(c.device);
        rows.parent
            .append_option((c.parent != 0).then_some(bits(c.parent)));
        rows.state.append_value(c.state.name());
        rows.api.append_value(o.api.name());
        rows.created_seq.append_value(bits(o.seq));
        rows.created_time_ns.append_value(bits(o.time_ns));
        rows.created_step.append_value(bits(o.step));
        rows.ended_seq.append_option(c.ended_seq.map(bits));
        rows.site.append_value(i64::from(o.site));
        rows.label.append_value(names.site(state, o.site));
        t.row_done()?;
    }
    Ok(())
}
