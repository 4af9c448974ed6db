//! One row of a comparison, for any view: a call site of the driver's view or a Python line of
//! PyTorch's tensors, in A and in B, what happened to it, how the two were paired, and B's
//! numbers minus A's. The views differ only in their record of numbers ([`Measures`]) and in
//! what else names a row (`place`: a site's module, Python lines and stack; nothing for a line).

use std::cmp::Reverse;

use serde::Serialize;

use super::matching::{MatchHow, SitePair};
use super::metrics::Measures;

/// What happened to a site's (or line's) memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SiteStatus {
    /// Only B has it.
    New,
    /// Only A has it.
    Gone,
    /// Both have it, and B holds more at the end.
    Grew,
    /// Both have it, and B holds less at the end.
    Shrank,
    /// The same memory at the end; other numbers changed.
    Changed,
}

impl SiteStatus {
    /// The status of a row whose runs hold `a` and `b` (`None`: the run lacks it).
    pub(crate) fn of(a: Option<u64>, b: Option<u64>) -> Self {
        match (a, b) {
            (None, _) => SiteStatus::New,
            (_, None) => SiteStatus::Gone,
            (Some(x), Some(y)) if y > x => SiteStatus::Grew,
            (Some(x), Some(y)) if y < x => SiteStatus::Shrank,
            _ => SiteStatus::Changed,
        }
    }
}

/// One row that changed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row<M: Measures, P> {
    /// The row as B names it (as A names it when B lacks it).
    pub label: String,
    /// A's name for it when it differs (a moved Python line).
    pub a_label: Option<String>,
    pub status: SiteStatus,
    /// How A's and B's rows were paired, and whether that was a guess.
    #[serde(rename = "match")]
    pub how: MatchHow,
    pub guessed: bool,
    /// Its numbers in A and in B (`None` where a run lacks it).
    pub a: Option<M>,
    pub b: Option<M>,
    pub change: M::Change,
    /// What else names it, in this view.
    #[serde(flatten)]
    pub place: P,
}

impl<M: Measures, P> Row<M, P> {
    /// The row of a pair of `a` and `b` (labelled `a_label`, `b_label`), named by `place`.
    pub(crate) fn of(
        (a, a_label): (Option<&M>, Option<String>),
        (b, b_label): (Option<&M>, Option<String>),
        pair: &SitePair,
        place: P,
    ) -> Self {
        let label = b_label.clone().or(a_label.clone()).unwrap_or_default();
        Row {
            a_label: a_label.filter(|l| b_label.is_some() && *l != label),
            label,
            status: SiteStatus::of(a.map(M::held), b.map(M::held)),
            how: pair.how,
            guessed: pair.guessed,
            place,
            change: M::change(a, b),
            a: a.cloned(),
            b: b.cloned(),
        }
    }

    /// A steady growth B has where A has none: B's sure growth there (0 otherwise).
    pub fn new_growth(&self) -> f64 {
        let b = self.b.as_ref().map_or(0.0, M::confident_growth);
        let a = self.a.as_ref().map_or(0.0, M::growth);
        if a == 0.0 {
            b
        } else {
            0.0
        }
    }
}

/// Sorts rows most changed first (then by label).
pub(crate) fn most_changed_first<M: Measures, P>(rows: &mut [Row<M, P>]) {
    rows.sort_by(changed_order);
}

/// The order of rows most changed first (then by label).
pub(crate) fn changed_order<M: Measures, P>(x: &Row<M, P>, y: &Row<M, P>) -> std::cmp::Ordering {
    Reverse(M::magnitude(&x.change))
        .cmp(&Reverse(M::magnitude(&y.change)))
        .then_with(|| x.label.cmp(&y.label))
}
