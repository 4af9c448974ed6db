//! Orphans in words: objects whose owner is gone (a destroyed communicator's buffers, a freed
//! reservation's mappings), counted by kind, with the memory they hold or, for views of a buffer
//! counted elsewhere, what they register or map.

use std::io::{self, Write};

use vramtrace_collector::analysis::{Analysis, Orphan, OrphanKind, Orphans};
use vramtrace_collector::live::Category;

use crate::render::tables::{emit, table};
use crate::render::units::bytes;

/// What one kind of orphan is, in words: (noun, why it is an orphan).
fn orphan_words(kind: OrphanKind, members: &[&Orphan]) -> (&'static str, &'static str) {
    let view = || {
        if members.iter().all(|o| o.category == Category::Window) {
            "window"
        } else if members.iter().all(|o| o.category == Category::Registration) {
            "registration"
        } else {
            "registration or window"
        }
    };
    match kind {
        OrphanKind::CommunicatorDestroyed => ("buffer", "of a destroyed communicator"),
        OrphanKind::CommunicatorAborted => ("buffer", "of an aborted communicator"),
        OrphanKind::ContextGone => ("allocation", "of a destroyed context"),
        OrphanKind::PoolDestroyed => ("allocation", "from a destroyed pool"),
        OrphanKind::UnmappedHandle => ("physical handle", "that no mapping uses"),
        OrphanKind::MappingWithoutReservation => ("mapping", "into a freed reservation"),
        OrphanKind::RegistrationBufferGone => (view(), "whose buffer is gone"),
        OrphanKind::RegistrationCommunicatorGone => (view(), "whose communicator is gone"),
    }
}

/// The orphans in one line that agrees with the tables below it: how many, the device memory
/// they hold, then each kind with its bytes. Registrations, windows and mappings hold no device
/// memory of their own (they are views of a buffer counted elsewhere), so their bytes are named
/// for what they are: registered or mapped.
pub(crate) fn orphans_line(o: &Orphans) -> String {
    if o.objects.is_empty() {
        return "none".to_string();
    }
    let kinds: Vec<String> = o
        .by_kind
        .iter()
        .map(|k| {
            let members: Vec<&Orphan> = o.objects.iter().filter(|x| x.kind == k.kind).collect();
            let (noun, why) = orphan_words(k.kind, &members);
            format!(
                "{} {why} ({})",
                counted(k.count, noun),
                orphan_size(k.bytes, &members)
            )
        })
        .collect();
    format!(
        "{}, holding {} of device memory: {}",
        counted(o.objects.len() as u64, "orphan"),
        bytes(o.total.bytes),
        kinds.join("; ")
    )
}

/// What orphans of one kind amount to: the device memory they hold, or for views of a buffer
/// counted elsewhere (registrations, windows, mappings), holding none of their own, what they
/// register or map: `4.0 MiB registered`.
pub(crate) fn orphan_size(held: u64, members: &[&Orphan]) -> String {
    if held > 0 {
        return bytes(held);
    }
    let viewed: u64 = members.iter().map(|x| x.bytes).sum();
    let what = match members.first().map(|x| x.category) {
        Some(Category::Mapping) => "mapped",
        Some(Category::Registration | Category::Window) => "registered",
        _ => "",
    };
    format!("{} {what}", bytes(viewed)).trim_end().to_string()
}

/// `1 buffer`, `2 buffers`.
pub(super) fn counted(count: u64, noun: &str) -> String {
    let s = if count == 1 { "" } else { "s" };
    format!("{count} {noun}{s}")
}

pub(super) fn orphan_kinds(out: &mut impl Write, a: &Analysis) -> io::Result<()> {
    if a.orphans.by_kind.is_empty() {
        return Ok(());
    }
    let mut t = table(&["orphan kind", "objects", "device bytes"], &[1, 2]);
    for k in &a.orphans.by_kind {
        t.add_row(vec![
            k.kind.name().to_string(),
            k.count.to_string(),
            bytes(k.bytes),
        ]);
    }
    emit(out, "Orphans by kind", &t)
}
