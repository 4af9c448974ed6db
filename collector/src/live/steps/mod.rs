//! Where steps come from: the program's step marks, or, in a trace without marks, the period
//! of its allocation pattern.
//!
//! Marks win: the first `vramtrace_mark_step` (called by the program, by the Python bootstrap's
//! optimizer hook, or by an NVTX range named in `VRAMTRACE_STEP_RANGE`) turns detection off.
//! So does the first iteration mark (`vramtrace_mark_iteration`, the Python bootstrap's mark of
//! each outermost model call in a program without an optimizer): iterations are the steps of a
//! loop that marks none, until a step mark comes; a trace with both is read with step marks
//! alone ([`StepSource::StepMarks`]).
//! Without them, the detector follows the stream of tokens a loop repeats every step: each
//! allocation and free (by site and size; a free counts under its allocation's site) and each
//! NVTX range pushed. [`period::find`] takes the period of the whole pattern from that stream;
//! the occurrences of its anchor token are the step boundaries. A replay with
//! [`StepSource::Pattern`] begins a step before each boundary the pattern lists and, past the
//! last, before each event that is the anchor again: steps found in the first part of a trace
//! carry on through the rest of it, so a reader can apply them as it goes.
//!
//! Memory is bounded: the first [`MAX_TOKENS`] tokens are kept (20 bytes each, with their
//! sequence numbers and times) and at most [`MAX_KINDS`] distinct kinds followed. When the
//! buffer is full the period is decided on what it holds, and from then on only the anchor's
//! occurrences are recorded.

mod period;

use period::TokenInfo;

use std::hash::Hasher;
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHasher};
use serde::Serialize;

use crate::ids::SiteId;

/// Tokens kept for finding the period.
pub(crate) const MAX_TOKENS: usize = 1 << 20;
/// Distinct token kinds followed; tokens of kinds beyond are not kept.
pub(crate) const MAX_KINDS: usize = 1 << 16;

/// What marks a step boundary.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum StepSource {
    /// `vramtrace_mark_step` events, and before the first of them the framework's iteration
    /// marks (`vramtrace_mark_iteration`: a loop without an optimizer); the default.
    #[default]
    Marks,
    /// `vramtrace_mark_step` events only: a trace that has them and iteration marks before
    /// them (a model called before its optimizer was made) is read again with these.
    StepMarks,
    /// The boundaries a replay found in the allocation pattern ([`StepPattern`]): a step begins
    /// just before each of the events they name, and past the last, before each occurrence of
    /// the pattern's anchor.
    Pattern(Arc<StepPattern>),
}

/// The event that begins each step of a pattern.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Anchor {
    /// `alloc`, `free` (of an allocation made at `site`) or `range` (an NVTX range pushed).
    pub event: &'static str,
    /// The call site of the allocation (allocations and frees).
    #[serde(skip)]
    pub site: Option<SiteId>,
    /// Bytes of the allocation.
    pub bytes: u64,
    /// The range's name.
    pub range: Option<String>,
}

/// The step of a trace without step marks: the period of its allocation pattern.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepPattern {
    /// Steps found: occurrences of the anchor.
    pub steps: u64,
    pub anchor: Anchor,
    /// Kinds of allocation (and NVTX ranges) recurring over at least three steps, and those of
    /// them that occur the same number of times in nearly every step: the evidence for the
    /// period.
    pub kinds: u64,
    pub in_step: u64,
    /// Tokens the period was found in (at most [`MAX_TOKENS`]), of all tokens seen.
    pub tokens_examined: u64,
    pub tokens: u64,
    /// Sequence numbers of the first and last boundary.
    pub first_seq: u64,
    pub last_seq: u64,
    /// The sequence number of the event before which each step begins, in trace order.
    #[serde(skip)]
    pub boundaries: Arc<[u64]>,
    /// The anchor as the replay recognises it in events.
    #[serde(skip)]
    pub(crate) key: Option<TokenKey>,
    /// Times of the first and the last occurrence of the anchor the period was found in.
    #[serde(skip)]
    pub times_ns: (u64, u64),
}

impl StepPattern {
    /// The step source that replays with this pattern.
    pub fn source(&self) -> StepSource {
        StepSource::Pattern(Arc::new(self.clone()))
    }
}

/// What a token is: an allocation or free at a site of a size, or a range by name hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct TokenKey {
    pub(crate) site: SiteId,
    pub(crate) event: TokenEvent,
    /// Bytes, or the hash of the range's name.
    pub(crate) bytes: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum TokenEvent {
    Alloc,
    Free,
    Range,
}

impl TokenKey {
    /// An object of `bytes` made at `site` became live (`live`) or went away.
    pub(crate) fn object(site: SiteId, bytes: u64, live: bool) -> Self {
        let event = if live {
            TokenEvent::Alloc
        } else {
            TokenEvent::Free
        };
        TokenKey { site, event, bytes }
    }

    /// An NVTX range pushed, by the hash of its name.
    pub(crate) fn range(name: &str) -> Self {
        let mut h = FxHasher::default();
        h.write(name.as_bytes());
        TokenKey {
            site: SiteId::MAX,
            event: TokenEvent::Range,
            bytes: h.finish(),
        }
    }

    /// The kind a token votes as: a free as its allocation.
    fn kind(self) -> TokenKey {
        TokenKey {
            event: match self.event {
                TokenEvent::Free => TokenEvent::Alloc,
                e => e,
            },
            ..self
        }
    }
}

/// The period decided when the buffer filled, and the anchor's occurrences since.
#[derive(Debug)]
struct Decided {
    pattern: StepPattern,
    key: TokenKey,
    boundaries: Vec<u64>,
    /// Time of the anchor's latest occurrence.
    last_ns: u64,
}

/// Follows the token stream while the trace has shown no step mark.
#[derive(Debug, Default)]
pub(crate) struct StepDetector {
    ids: FxHashMap<TokenKey, u32>,
    keys: Vec<TokenKey>,
    /// Names of the ranges seen, by token id.
    ranges: FxHashMap<u32, String>,
    tokens: Vec<u32>,
    seqs: Vec<u64>,
    times: Vec<u64>,
    seen: u64,
    decided: Option<Decided>,
    /// Set when a mark arrives (the program marks its steps), when steps come from a pattern
    /// already, or when a full buffer showed no period: nothing more to follow.
    off: bool,
}

impl StepDetector {
    /// Whether tokens are still followed (no mark arrived, and a full buffer showed a period).
    #[inline]
    pub(crate) fn is_on(&self) -> bool {
        !self.off
    }

    /// Tokens noted so far.
    pub(crate) fn seen(&self) -> u64 {
        self.seen
    }

    /// Notes a token.
    #[inline]
    pub(crate) fn observe(&mut self, key: TokenKey, seq: u64, time_ns: u64) {
        if self.off {
            return;
        }
        self.note(key, seq, time_ns, None);
    }

    /// Notes an NVTX range pushed.
    pub(crate) fn observe_range(&mut self, name: &str, seq: u64, time_ns: u64) {
        if self.off {
            return;
        }
        self.note(TokenKey::range(name), seq, time_ns, Some(name));
    }

    #[inline(never)]
    fn note(&mut self, key: TokenKey, seq: u64, time_ns: u64, range: Option<&str>) {
        self.seen += 1;
        if let Some(d) = &mut self.decided {
            if key == d.key {
                d.boundaries.push(seq);
                d.last_ns = time_ns;
            }
            return;
        }
        let next = self.keys.len() as u32;
        let id = match self.ids.get(&key) {
            Some(&id) => id,
            None if self.keys.len() < MAX_KINDS => {
                self.ids.insert(key, next);
                self.keys.push(key);
                if let Some(name) = range {
                    self.ranges.insert(next, name.to_string());
                }
                next
            }
            None => return,
        };
        self.tokens.push(id);
        self.seqs.push(seq);
        self.times.push(time_ns);
        if self.tokens.len() >= MAX_TOKENS {
            self.decide();
        }
    }

    /// The buffer is full: the period is decided on it.
    #[cold]
    fn decide(&mut self) {
        match self.pattern_in_buffer() {
            Some((pattern, key)) => {
                let boundaries = pattern.boundaries.to_vec();
                let last_ns = pattern.times_ns.1;
                self.decided = Some(Decided {
                    pattern,
                    key,
                    boundaries,
                    last_ns,
                });
            }
            None => self.off = true,
        }
        self.tokens = Vec::new();
        self.seqs = Vec::new();
        self.times = Vec::new();
    }

    /// A step mark arrived, or steps come from elsewhere: detection is not needed.
    pub(crate) fn turn_off(&mut self) {
        *self = StepDetector {
            off: true,
            ..StepDetector::default()
        };
    }

    /// The period of the pattern, if the trace has no marks and one repeats.
    pub(crate) fn detect(&self) -> Option<StepPattern> {
        if let Some(d) = &self.decided {
            let mut pattern = d.pattern.clone();
            pattern.boundaries = d.boundaries.clone().into();
            pattern.steps = d.boundaries.len() as u64;
            pattern.last_seq = d.boundaries.last().copied().unwrap_or(0);
            pattern.times_ns.1 = d.last_ns;
            pattern.tokens = self.seen;
            return Some(pattern);
        }
        if self.off {
            return None;
        }
        self.pattern_in_buffer().map(|(p, _)| p)
    }

    fn pattern_in_buffer(&self) -> Option<(StepPattern, TokenKey)> {
        let info: Vec<TokenInfo> = self
            .keys
            .iter()
            .enumerate()
            .map(|(id, k)| TokenInfo {
                kind: self.ids.get(&k.kind()).copied().unwrap_or(id as u32),
                bytes: match k.event {
                    TokenEvent::Alloc => k.bytes as i64,
                    TokenEvent::Free => -(k.bytes as i64),
                    TokenEvent::Range => 0,
                },
            })
            .collect();
        let p = period::find(&self.tokens, &self.times, &info)?;
        let key = self.keys[p.anchor as usize];
        let anchors = || {
            (self.tokens.iter().enumerate())
                .filter(|(_, &t)| t == p.anchor)
                .map(|(i, _)| i)
        };
        let boundaries: Arc<[u64]> = anchors().map(|i| self.seqs[i]).collect();
        let time = |i: Option<usize>| i.map_or(0, |i| self.times[i]);
        let times_ns = (time(anchors().next()), time(anchors().next_back()));
        let (event, site, range) = match key.event {
            TokenEvent::Alloc => ("alloc", Some(key.site), None),
            TokenEvent::Free => ("free", Some(key.site), None),
            TokenEvent::Range => ("range", None, self.ranges.get(&p.anchor).cloned()),
        };
        let pattern = StepPattern {
            steps: boundaries.len() as u64,
            anchor: Anchor {
                event,
                site,
                bytes: if range.is_some() { 0 } else { key.bytes },
                range,
            },
            kinds: p.kinds as u64,
            in_step: p.in_step as u64,
            tokens_examined: self.tokens.len() as u64,
            tokens: self.seen,
            first_seq: boundaries.first().copied().unwrap_or(0),
            last_seq: boundaries.last().copied().unwrap_or(0),
            boundaries,
            key: Some(key),
            times_ns,
        };
        Some((pattern, key))
    }
}
