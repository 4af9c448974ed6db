//! The report as terminal tables: its verdict in one line, facts about the trace (including
//! whether anything was lost), then what is live, then what went wrong.

use std::io::{self, Write};

use vramtrace_collector::live::{CommState, LiveObject};

use super::{stacks, Report};
use crate::options::RankBy;
use crate::render::units::{bytes, count};

use crate::render::tables::{emit, or_unknown, seq_range, table};

/// Why the orphan `o` is one, in the analysis' words (`registration-buffer-gone`,
/// `communicator-aborted`), as its finding and the JSON's `analysis.orphans` say it: not the
/// object's flags, which one flag says for several reasons.
fn orphan_why(r: &Report<'_>, o: &LiveObject<'_>) -> String {
    let found = (r.analysis.orphans.objects.iter())
        .find(|x| x.seq == o.origin.seq && x.address == o.address);
    // The report and the analysis list the same orphans (`LiveState::orphans`, those no lost
    // event may have freed).
    found.map_or("-".to_string(), |x| {
        (x.kinds.iter().map(|k| k.name()))
            .collect::<Vec<_>>()
            .join(", ")
    })
}

/// `1 object`, `2 objects`.
fn counted(count: u64, noun: &str) -> String {
    let s = if count == 1 { "" } else { "s" };
    format!("{count} {noun}{s}")
}

fn objects_and_bytes(count: u64, n: u64) -> String {
    format!("{} in {}", bytes(n), counted(count, "object"))
}

/// Writes the whole report.
pub fn render(out: &mut impl Write, r: &Report<'_>, by: RankBy, full: bool) -> io::Result<()> {
    facts(out, r)?;
    // What matters first: orphans and growth, then what went wrong, then the live set.
    crate::render::findings::render(out, &r.analysis, r.top, "at the end", &r.gaps())?;
    orphans(out, r)?;
    live(out, r)?;
    ranking(out, r, by, full)?;
    failures(out, r)?;
    anomalies(out, r)?;
    tracer_notes(out, r)
}

fn facts(out: &mut impl Write, r: &Report<'_>) -> io::Result<()> {
    let t = &r.trace;
    writeln!(out, "vramtrace report: {}", t.path)?;
    let verdict = crate::render::findings::diagnosis::verdict(&r.analysis, &r.gaps(), true);
    writeln!(out, "  verdict   {verdict}")?;
    let mut process = format!("pid {} (parent {})", t.pid, t.ppid);
    if let Some(parent) = t.forked_from {
        process += &format!(", forked from {parent}");
    }
    process += &format!(", host {}", t.host);
    match (t.rank, t.world_size) {
        (Some(rank), Some(world)) => process += &format!(", rank {rank} of {world}"),
        (Some(rank), None) => process += &format!(", rank {rank}"),
        _ => {}
    }
    if let Some(local) = t.local_rank {
        process += &format!(" (local rank {local})");
    }
    writeln!(out, "  process   {process}")?;
    writeln!(out, "  command   {}", t.command_line.join(" "))?;
    writeln!(out, "  tracer    vramtrace {}", t.tool_version)?;
    if let Some(a) = &r.allocator {
        writeln!(out, "  allocator {}", a.describe())?;
    }
    let reading = &r.reading;
    let mut ending = reading.ending.description.clone();
    if let Some(reason) = &reading.end_reason {
        ending += &format!(" (the process ended: {reason})");
    }
    writeln!(out, "  trace     {ending}")?;
    writeln!(
        out,
        "  records   {} read in {} ({}); {} skipped (kinds this version does not know)",
        reading.records,
        count(reading.chunks, "chunk"),
        count(reading.bytes_read, "byte"),
        reading.skipped_records
    )?;
    match reading.segments.as_ref() {
        Some(segments) if segments.is_cut() => {
            writeln!(out, "  segments  {}", segments.describe())?;
        }
        // --last and --since choose the segment to start from: a trace of one is read whole.
        Some(segments) => {
            if let Some(whole) = segments.read_whole() {
                writeln!(out, "  segments  {whole}")?;
            }
        }
        None => {}
    }
    let unread = &reading.unread;
    if unread.ranges_total > 0 {
        let events = if unread.events_known {
            count(unread.events, "event")
        } else if unread.events > 0 {
            format!("at least {}", count(unread.events, "event"))
        } else {
            "events unknown".to_string()
        };
        let ranges: Vec<String> = unread
            .ranges
            .iter()
            .take(3)
            .map(|u| format!("{}..{} ({})", u.offset, u.offset + u.bytes, u.reason))
            .collect();
        let more = unread.ranges_total.saturating_sub(ranges.len());
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        let places = match unread.ranges_total {
            1 => "1 place".to_string(),
            n => format!("{n} places"),
        };
        writeln!(
            out,
            "  unread    {} bytes in {places}, {events}: bytes {}{more}",
            unread.bytes,
            ranges.join(", ")
        )?;
    }
    let tracer = &r.tracer;
    // "Dropped" only where events were: the tracer says so in its counters.
    let (word, lost) = if !tracer.recorded {
        (
            "lost",
            "not known: the trace holds no tracer counters (it stops before the first stats \
             record)"
                .to_string(),
        )
    } else if tracer.dropped == 0 && unread.ranges_total > 0 {
        // The unread bytes' events are the file's loss, not the tracer's.
        ("lost", "no event dropped by the tracer".to_string())
    } else if tracer.dropped == 0 {
        ("lost", "no event".to_string())
    } else {
        (
            "dropped",
            format!(
                "{} LOST (the tracer's buffer was full, or their call had not returned at the \
                 end): the live set below may be wrong; the findings leave out what they could \
                 explain",
                count(tracer.dropped, "event")
            ),
        )
    };
    writeln!(out, "  {word:<9} {lost}")?;
    if tracer.hook_panics > 0 || tracer.missing_real > 0 {
        writeln!(
            out,
            "  problems  {} hook panics, {} hooks without their real function",
            tracer.hook_panics, tracer.missing_real
        )?;
    }
    let e = &r.events;
    writeln!(
        out,
        "  events    {} applied (last seq {}), {} late, {}",
        e.applied,
        e.last_seq,
        tracer.late,
        count(e.steps, "step")
    )
}

fn live(out: &mut impl Write, r: &Report<'_>) -> io::Result<()> {
    let s = &r.live;
    writeln!(out, "\nLIVE AT THE END")?;
    writeln!(
        out,
        "  device memory  {}",
        objects_and_bytes(s.device_memory.count, s.device_memory.bytes)
    )?;
    // The line counts device memory; an orphan holding none of its own (a registration, a
    // mapping) is said beside it, or FINDINGS' orphans would not add up here.
    let views = r.orphans_total.saturating_sub(s.orphaned.count as usize);
    let views = match views {
        0 => String::new(),
        1 => "; and 1 orphan holding no device memory of its own".to_string(),
        n => format!("; and {n} orphans holding no device memory of their own"),
    };
    writeln!(
        out,
        "  orphaned       {}{views}",
        objects_and_bytes(s.orphaned.count, s.orphaned.bytes)
    )?;
    writeln!(
        out,
        "  host memory    {}",
        objects_and_bytes(s.host_memory.count, s.host_memory.bytes)
    )?;
    writeln!(
        out,
        "  reserved VA    {}",
        objects_and_bytes(s.reserved_va.count, s.reserved_va.bytes)
    )?;
    let td = &r.teardown;
    let torn = td.by_context_destroy.count + td.by_device_reset.count;
    if torn > 0 {
        writeln!(
            out,
            "  freed by teardown (not leaks): {} by context destroy, {} by device reset",
            objects_and_bytes(td.by_context_destroy.count, td.by_context_destroy.bytes),
            objects_and_bytes(td.by_device_reset.count, td.by_device_reset.bytes)
        )?;
    }
    if !s.by_device.is_empty() {
        let mut t = table(&["device", "objects", "bytes"], &[0, 1, 2]);
        for d in &s.by_device {
            t.add_row(vec![
                crate::render::units::device(d.device),
                d.count.to_string(),
                bytes(d.bytes),
            ]);
        }
        emit(out, "By device", &t)?;
    }
    if !r.device_accounting.is_empty() {
        let mut t = table(
            &[
                "device",
                "driver used",
                "context baseline",
                "traced live",
                "unexplained",
                "samples",
            ],
            &[1, 2, 3, 4, 5],
        );
        for a in &r.device_accounting {
            let unexplained = if a.unexplained < 0 {
                format!("-{}", bytes(a.unexplained.unsigned_abs()))
            } else {
                bytes(a.unexplained as u64)
            };
            t.add_row(vec![
                crate::render::units::device(a.device),
                bytes(a.driver_used),
                bytes(a.context_baseline),
                bytes(a.traced_live),
                unexplained,
                a.samples.to_string(),
            ]);
        }
        emit(
            out,
            "Device accounting (driver's cuMemGetInfo at the last sample; baseline = used at the first sample minus what the trace held then)",
            &t,
        )?;
        if r.device_accounting.iter().any(|a| a.unexplained > 2 << 20) {
            // What docs/gpu-validation.md ("Device accounting") measured the remainder to be.
            writeln!(
                out,
                "  unexplained: device memory no allocation call made. Measured on an H200: the \
                 driver's copy of kernel code loaded at first launch (about 94 MiB for PyTorch's \
                 first kernels, more with cuBLAS and NCCL; CUDA_MODULE_LOADING=EAGER moves it \
                 into the baseline), and memory a stream-ordered pool keeps after frees; other \
                 processes starting on the device after the first sample count too."
            )?;
        }
        if r.device_accounting
            .iter()
            .any(|a| a.unexplained < -(2 << 20))
        {
            // cuMemGetInfo counts every process on the device.
            writeln!(
                out,
                "  unexplained below 0: the driver reported less memory used at the last sample \
                 than the baseline holds: memory of other processes on the device (the driver \
                 counts every process) was freed during the run, so the baseline does not hold \
                 and the remainder says nothing."
            )?;
        }
    }
    if !s.by_category.is_empty() {
        let mut t = table(&["category", "objects", "bytes", "counts as"], &[1, 2]);
        for c in &s.by_category {
            let counts = match c.accounting {
                vramtrace_collector::live::Accounting::Device => "device memory",
                vramtrace_collector::live::Accounting::Host => "host memory",
                vramtrace_collector::live::Accounting::VirtualAddress => "address space",
                vramtrace_collector::live::Accounting::None => "counted elsewhere",
            };
            t.add_row(vec![
                c.category.name().to_string(),
                c.count.to_string(),
                bytes(c.bytes),
                counts.to_string(),
            ]);
        }
        emit(out, "By category", &t)?;
    }
    if !s.by_communicator.is_empty() {
        let headers = [
            "communicator",
            "state",
            "rank",
            "device",
            "objects",
            "bytes",
            "registrations",
            "windows",
        ];
        let mut t = table(&headers, &[2, 3, 4, 5, 6, 7]);
        for c in &s.by_communicator {
            let rank = match (c.rank, c.nranks) {
                (Some(r), Some(n)) => format!("{r}/{n}"),
                _ => "-".to_string(),
            };
            t.add_row(vec![
                format!("{:#x}", c.comm),
                c.state.map_or("unknown", CommState::name).to_string(),
                rank,
                c.device.map_or("-".to_string(), |d| d.to_string()),
                c.count.to_string(),
                bytes(c.bytes),
                c.registrations.to_string(),
                c.windows.to_string(),
            ]);
        }
        emit(out, "By communicator", &t)?;
        if s.without_communicator.count > 0 {
            writeln!(
                out,
                "  not attributed to a communicator: {}",
                objects_and_bytes(s.without_communicator.count, s.without_communicator.bytes)
            )?;
        }
    }
    Ok(())
}

fn ranking(out: &mut impl Write, r: &Report<'_>, by: RankBy, full: bool) -> io::Result<()> {
    match by {
        RankBy::Python | RankBy::Function | RankBy::Line => stacks::groups(out, r, full),
        RankBy::Module => {
            let modules = &r.live.by_module;
            if modules.is_empty() {
                return Ok(());
            }
            let mut t = table(&["owner module", "objects", "bytes"], &[1, 2]);
            for m in modules.iter().take(r.top) {
                t.add_row(vec![
                    or_unknown(m.name.as_deref()).to_string(),
                    m.count.to_string(),
                    bytes(m.bytes),
                ]);
            }
            let shown = modules.len().min(r.top);
            let title = format!(
                "Top owner modules by device memory ({shown} of {})",
                modules.len()
            );
            emit(out, &title, &t)
        }
        RankBy::Site => {
            if r.call_sites.is_empty() {
                return Ok(());
            }
            let headers = [
                "#",
                "bytes",
                "host",
                "objects",
                "api",
                "owner module",
                "site",
                "stack",
                "seq",
            ];
            let mut t = table(&headers, &[0, 1, 2, 3, 7]);
            for (i, site) in r.call_sites.iter().enumerate() {
                let s = &site.item;
                let seqs = seq_range(s.first_seq, s.last_seq);
                let mut place = vramtrace_collector::symbols::frames_label(&site.frames)
                    .unwrap_or_else(|| s.location.to_string());
                // A native site reached from several lines: its label is its first object's.
                if s.lines_vary {
                    place.push_str(" and other lines");
                }
                t.add_row(vec![
                    (i + 1).to_string(),
                    bytes(s.bytes),
                    bytes(s.host_bytes),
                    s.count.to_string(),
                    s.api.name().to_string(),
                    or_unknown(s.module_name.as_deref()).to_string(),
                    place,
                    s.stack.to_string(),
                    seqs,
                ]);
            }
            let title = format!(
                "Top native call sites by device memory ({} of {})",
                r.call_sites.len(),
                r.call_sites_total
            );
            emit(out, &title, &t)?;
            stacks::site_stacks(out, r, full)
        }
    }
}

fn orphans(out: &mut impl Write, r: &Report<'_>) -> io::Result<()> {
    if r.orphans.is_empty() {
        return Ok(());
    }
    let headers = [
        "category",
        "address",
        "bytes",
        "device",
        "why",
        "communicator",
        "site",
        "seq",
    ];
    let mut t = table(&headers, &[2, 3, 7]);
    for o in &r.orphans {
        t.add_row(vec![
            o.category.name().to_string(),
            format!("{:#x}", o.address),
            bytes(o.bytes),
            crate::render::units::device(o.device),
            orphan_why(r, o),
            o.origin
                .communicator
                .map_or("-".to_string(), |c| format!("{c:#x}")),
            r.place_of(&o.origin),
            o.origin.seq.to_string(),
        ]);
    }
    let title = format!(
        "Orphans: live, but their owner is gone ({} of {})",
        r.orphans.len(),
        r.orphans_total
    );
    emit(out, &title, &t)
}

fn failures(out: &mut impl Write, r: &Report<'_>) -> io::Result<()> {
    let f = &r.failures;
    let shutdown: u64 = f.at_shutdown.iter().map(|a| a.count).sum();
    let apart = if shutdown == 0 {
        String::new()
    } else {
        let apis: Vec<String> = f
            .at_shutdown
            .iter()
            .map(|a| format!("{} {}", a.count, a.api))
            .collect();
        let s = if shutdown == 1 { "" } else { "s" };
        format!(
            " ({shutdown} call{s} refused while the driver shut down at exit, not counted: {})",
            apis.join(", ")
        )
    };
    if f.total == 0 {
        return writeln!(out, "\nFailures: none{apart}");
    }
    if !apart.is_empty() {
        writeln!(
            out,
            "\n{}",
            apart
                .trim_start()
                .trim_start_matches('(')
                .trim_end_matches(')')
        )?;
    }
    let headers = [
        "api",
        "code",
        "out of memory",
        "request",
        "device",
        "live on device then",
        "seq",
        "site",
    ];
    let mut t = table(&headers, &[1, 3, 4, 5, 6]);
    // A program that retries after running out of memory fails hundreds of times: the first
    // --top are listed (the Out of memory sections above explain the first and last ones).
    for x in f.list.iter().take(r.top) {
        t.add_row(vec![
            x.api.name().to_string(),
            x.result.to_string(),
            if x.out_of_memory { "yes" } else { "no" }.to_string(),
            bytes(x.request_bytes),
            crate::render::units::device(x.device),
            bytes(x.live_device_bytes),
            x.seq.to_string(),
            r.place_of(&x.origin),
        ]);
    }
    // Out-of-memory failures are listed first, where there are any; counted in all (the
    // failures kept are the first and the latest), as FINDINGS counts them.
    let title = match r.analysis.ooms.total.max(f.out_of_memory as u64) {
        0 => format!("Failures: {} (none out of memory)", f.total),
        n => format!(
            "Failures: {} ({n} out of memory), out-of-memory first",
            f.total
        ),
    };
    emit(out, &title, &t)?;
    let unlisted = f.list.len().saturating_sub(r.top);
    if unlisted > 0 {
        writeln!(out, "  {unlisted} more kept (--top or --json lists them)")?;
    }
    if f.omitted > 0 {
        writeln!(
            out,
            "  {} more failures were counted but not kept",
            f.omitted
        )?;
    }
    Ok(())
}

fn anomalies(out: &mut impl Write, r: &Report<'_>) -> io::Result<()> {
    let a = &r.anomalies;
    if a.uncertain > 0 {
        writeln!(
            out,
            "\nAnomalies that lost events could explain (not counted): {}",
            a.uncertain
        )?;
    }
    if a.total == 0 {
        return writeln!(out, "\nAnomalies: none");
    }
    let mut t = table(&["kind", "count"], &[1]);
    for k in &a.by_kind {
        t.add_row(vec![k.kind.name().to_string(), k.count.to_string()]);
    }
    emit(out, &format!("Anomalies: {}", a.total), &t)?;
    let mut t = table(
        &["kind", "seq", "api", "thread", "address", "related seq"],
        &[1, 3, 5],
    );
    for x in a.list.iter().take(r.top) {
        t.add_row(vec![
            x.kind.name().to_string(),
            x.seq.to_string(),
            x.api.name().to_string(),
            x.thread.to_string(),
            format!("{:#x}", x.address),
            x.related_seq.map_or("-".to_string(), |s| s.to_string()),
        ]);
    }
    let shown = a.list.len().min(r.top);
    emit(
        out,
        &format!("Anomalies in detail ({shown} of {})", a.total),
        &t,
    )
}

fn tracer_notes(out: &mut impl Write, r: &Report<'_>) -> io::Result<()> {
    if r.lookups.total > 0 {
        let mut t = table(&["symbol", "via", "cuda version", "why untraced"], &[2]);
        for l in r.lookups.list {
            t.add_row(vec![
                l.symbol.clone(),
                l.via.clone(),
                l.cuda_version.to_string(),
                l.reason.clone(),
            ]);
        }
        let title = format!(
            "Unwrapped lookups: {} handed out untraced (calls through them are not in the trace)",
            counted(r.lookups.total, "driver entry point")
        );
        emit(out, &title, &t)?;
    }
    if r.warnings.total > 0 {
        writeln!(out, "\nTracer warnings: {}", r.warnings.total)?;
        for w in r.warnings.list {
            writeln!(out, "  - {w}")?;
        }
    }
    Ok(())
}
