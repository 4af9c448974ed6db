//! Payloads the traced program handed to the tracer (`vramtrace_attach`), put back together from
//! their `Attachment` pieces.
//!
//! The tracer writes a payload in pieces in order, so a piece that does not continue its payload
//! means the trace lost part of it (a cut file ends mid-payload; a broken writer skipped a
//! record): such a payload is dropped and counted, never half-read. Only the last few payloads of
//! each kind are kept, so memory stays bounded however often a program attaches.

use std::collections::BTreeMap;

use crate::format::Attachment;

/// The kind of the payload the Python hooks attach once PyTorch has made its allocator: its
/// settings (`crate::torch`). Its presence says the hooks mark the program's steps.
pub const KIND_TORCH_ALLOCATOR: &str = "torch.allocator";

/// Payloads of one kind kept; older ones are counted and dropped.
pub(crate) const KEPT_PER_KIND: usize = 8;

/// One whole payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attached {
    pub kind: String,
    /// Its number in the trace (from 1).
    pub id: u32,
    /// `CLOCK_MONOTONIC` nanoseconds when the tracer received it.
    pub time_ns: u64,
    /// The last event sequence number handed out when it was received.
    pub after_seq: u64,
    pub data: Vec<u8>,
}

/// `data` as the `Attachment` records that carry it: pieces of at most
/// [`Attachment::PIECE_BYTES`], in order (one empty piece for an empty payload).
pub fn pieces<'a>(
    kind: &'a str,
    id: u32,
    time_ns: u64,
    after_seq: u64,
    data: &'a [u8],
) -> impl Iterator<Item = Attachment> + 'a {
    let count = data.len().div_ceil(Attachment::PIECE_BYTES).max(1);
    (0..count).map(move |i| {
        let start = i * Attachment::PIECE_BYTES;
        let end = data.len().min(start + Attachment::PIECE_BYTES);
        Attachment {
            kind: kind.to_string(),
            id,
            offset: start as u64,
            total: data.len() as u64,
            time_ns,
            after_seq,
            data: data[start..end].to_vec(),
        }
    })
}

/// A payload whose pieces are still arriving.
#[derive(Debug)]
struct Partial {
    total: u64,
    payload: Attached,
}

/// The payloads of a trace, by kind, oldest first.
#[derive(Debug, Default)]
pub struct Attachments {
    partial: BTreeMap<u32, Partial>,
    complete: BTreeMap<String, Vec<Attached>>,
    /// Payloads dropped because a piece was missing or out of order.
    broken: u64,
    /// Payloads dropped because later ones of the same kind replaced them.
    dropped: u64,
}

impl Attachments {
    /// Takes one piece, in file order.
    pub fn add(&mut self, piece: &Attachment) {
        let continues = match self.partial.get(&piece.id) {
            Some(p) => {
                p.payload.data.len() as u64 == piece.offset
                    && p.total == piece.total
                    && p.payload.kind == piece.kind
            }
            None => piece.offset == 0,
        };
        let fits = piece.offset.saturating_add(piece.data.len() as u64) <= piece.total;
        if !continues || !fits {
            // A gap: neither the payload begun nor this piece can be trusted, unless the piece
            // starts a payload afresh.
            if self.partial.remove(&piece.id).is_some() {
                self.broken += 1;
            }
            if piece.offset != 0 || !fits {
                self.broken += 1;
                return;
            }
        }
        let partial = self.partial.entry(piece.id).or_insert_with(|| Partial {
            total: piece.total,
            payload: Attached {
                kind: piece.kind.clone(),
                id: piece.id,
                time_ns: piece.time_ns,
                after_seq: piece.after_seq,
                data: Vec::with_capacity(piece.total.min(1 << 30) as usize),
            },
        });
        partial.payload.data.extend_from_slice(&piece.data);
        if partial.payload.data.len() as u64 == partial.total {
            if let Some(done) = self.partial.remove(&piece.id) {
                self.keep(done.payload);
            }
        }
    }

    fn keep(&mut self, payload: Attached) {
        let list = self.complete.entry(payload.kind.clone()).or_default();
        list.push(payload);
        if list.len() > KEPT_PER_KIND {
            list.remove(0);
            self.dropped += 1;
        }
    }

    /// The whole payloads of `kind`, oldest first.
    pub fn of_kind(&self, kind: &str) -> &[Attached] {
        self.complete.get(kind).map_or(&[], Vec::as_slice)
    }

    /// Every whole payload kept, by kind.
    pub fn iter(&self) -> impl Iterator<Item = &Attached> {
        self.complete.values().flatten()
    }

    /// Payloads dropped because a piece was missing, plus those still incomplete (the trace
    /// ended inside them).
    pub fn broken(&self) -> u64 {
        self.broken + self.partial.len() as u64
    }

    /// Payloads dropped because later ones of their kind replaced them.
    pub fn replaced(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(id: u32, offset: u64, total: u64, data: &[u8]) -> Attachment {
        Attachment {
            kind: "k".into(),
            id,
            offset,
            total,
            time_ns: 7,
            after_seq: 3,
            data: data.to_vec(),
        }
    }

    #[test]
    fn pieces_in_order_make_the_payload() {
        let mut a = Attachments::default();
        a.add(&piece(1, 0, 5, b"ab"));
        assert!(a.of_kind("k").is_empty());
        a.add(&piece(1, 2, 5, b"cde"));
        let got = a.of_kind("k");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].data, b"abcde");
        assert_eq!((got[0].id, got[0].time_ns, got[0].after_seq), (1, 7, 3));
        // An empty payload is one empty piece.
        a.add(&piece(2, 0, 0, b""));
        assert_eq!(a.of_kind("k").len(), 2);
        assert_eq!(a.broken(), 0);
    }

    #[test]
    fn a_missing_piece_drops_the_payload() {
        let mut a = Attachments::default();
        a.add(&piece(1, 0, 6, b"ab"));
        a.add(&piece(1, 4, 6, b"ef"));
        assert!(a.of_kind("k").is_empty());
        // The payload begun, and the stray piece.
        assert_eq!(a.broken(), 2);
        // A payload cut off by the end of the trace counts too.
        a.add(&piece(2, 0, 6, b"ab"));
        assert_eq!(a.broken(), 3);
    }

    #[test]
    fn only_the_last_payloads_of_a_kind_are_kept() {
        let mut a = Attachments::default();
        for id in 1..=KEPT_PER_KIND as u32 + 3 {
            a.add(&piece(id, 0, 1, &[id as u8]));
        }
        let kept = a.of_kind("k");
        assert_eq!(kept.len(), KEPT_PER_KIND);
        assert_eq!(kept[0].id, 4);
        assert_eq!(a.replaced(), 3);
    }
}
