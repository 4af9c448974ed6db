//! The numbers a comparison compares, in one place: a record of counts and rates per call site
//! (and per run: [`SiteMetrics`]) or per Python line of PyTorch's tensors
//! ([`TensorMetrics`](super::tensors::TensorMetrics)), each field listed once. From that one list
//! [`record!`] makes the record, its sum, its median over many runs, B's numbers minus A's, and
//! for a run's totals A's, B's and their difference side by side.

use serde::Serialize;

/// The record of numbers a view compares per row.
pub trait Measures: Clone + PartialEq + Serialize {
    /// B's numbers minus A's.
    type Change: Copy + Default + PartialEq + std::fmt::Debug + Serialize;

    /// B's numbers minus A's, a missing side counting as zeros.
    fn change(a: Option<&Self>, b: Option<&Self>) -> Self::Change;
    /// Bytes held at the end (what the status compares).
    fn held(&self) -> u64;
    /// Steady growth per unit, and the part of it judged sure.
    fn growth(&self) -> f64;
    fn confident_growth(&self) -> f64;
    /// How much a change is, for ranking (largest first, compared in order).
    fn magnitude(c: &Self::Change) -> Vec<u64>;
    /// Of a change: live bytes at the end, and the growth per unit judged sure (a rate the
    /// report would not call steady growth is none to say).
    fn live_change(c: &Self::Change) -> i64;
    fn growth_change(c: &Self::Change) -> f64;
}

/// A count in A and in B.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Count {
    pub a: u64,
    pub b: u64,
    pub change: i64,
}

impl Count {
    pub(crate) fn of(a: u64, b: u64) -> Self {
        Count {
            a,
            b,
            change: signed(b) - signed(a),
        }
    }
}

/// A count as a signed number (saturating).
pub(crate) fn signed(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A rate in A and in B.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Rate {
    pub a: f64,
    pub b: f64,
    pub change: f64,
}

impl Rate {
    pub(crate) fn of(a: f64, b: f64) -> Self {
        Rate {
            a,
            b,
            change: b - a,
        }
    }
}

/// The median of integers (the mean of the two middle ones, rounded down, for an even count);
/// 0 for none.
pub(crate) fn median_u64(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    match v.len() {
        0 => 0,
        n if n % 2 == 1 => v[n / 2],
        n => ((u128::from(v[n / 2 - 1]) + u128::from(v[n / 2])) / 2) as u64,
    }
}

/// The median of reals (the mean of the two middle ones for an even count); 0 for none.
pub(crate) fn median_f64(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// A record of counts (`u64`) and rates (`f64`), its change record (B minus A: counts signed)
/// and, when named, its side-by-side record (each count as a [`Count`]), with `add`, `median`,
/// `change` and `side_by_side`.
macro_rules! record {
    (
        $(#[$meta:meta])*
        pub struct $name:ident $fields:tt
        $(#[$change_meta:meta])*
        pub struct $change:ident;
        $(
            $(#[$sides_meta:meta])*
            pub struct $sides:ident;
        )?
    ) => {
        record!(@record [$(#[$meta])*] $name [$(#[$change_meta])*] $change $fields);
        $( record!(@sides [$(#[$sides_meta])*] $name $sides $fields); )?
    };
    (@record [$(#[$meta:meta])*] $name:ident [$(#[$change_meta:meta])*] $change:ident {
        $( $(#[$cdoc:meta])* $count:ident, )* ; $( $(#[$rdoc:meta])* $rate:ident, )*
    }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
        pub struct $name {
            $( $(#[$cdoc])* pub $count: u64, )*
            $( $(#[$rdoc])* pub $rate: f64, )*
        }

        $(#[$change_meta])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
        pub struct $change {
            $( pub $count: i64, )*
            $( pub $rate: f64, )*
        }

        impl $name {
            /// Adds another record's numbers.
            pub fn add(&mut self, o: &Self) {
                $( self.$count += o.$count; )*
                $( self.$rate += o.$rate; )*
            }

            /// The median of every number over `all`.
            pub fn median(all: &[Self]) -> Self {
                $name {
                    $( $count: $crate::compare::metrics::median_u64(
                        all.iter().map(|m| m.$count).collect(),
                    ), )*
                    $( $rate: $crate::compare::metrics::median_f64(
                        all.iter().map(|m| m.$rate).collect(),
                    ), )*
                }
            }

            /// `b`'s numbers minus `a`'s.
            pub fn change(a: &Self, b: &Self) -> $change {
                use $crate::compare::metrics::signed;
                $change {
                    $( $count: signed(b.$count) - signed(a.$count), )*
                    $( $rate: b.$rate - a.$rate, )*
                }
            }
        }
    };
    (@sides [$(#[$sides_meta:meta])*] $name:ident $sides:ident {
        $( $(#[$cdoc:meta])* $count:ident, )* ; $( $(#[$rdoc:meta])* $rate:ident, )*
    }) => {
        $(#[$sides_meta])*
        #[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
        pub struct $sides {
            $( pub $count: $crate::compare::metrics::Count, )*
        }

        impl $name {
            /// A's and B's counts side by side.
            pub(crate) fn side_by_side(a: &Self, b: &Self) -> $sides {
                $sides {
                    $( $count: $crate::compare::metrics::Count::of(a.$count, b.$count), )*
                }
            }
        }
    };
}

pub(crate) use record;

record! {
    /// The numbers compared per call site, and of a run in all (its totals).
    pub struct SiteMetrics {
        /// Objects and device bytes live at the end.
        live_count,
        live_bytes,
        /// Pinned and registered host bytes live at the end.
        host_bytes,
        /// Device bytes it held when its device peaked (added over devices).
        peak_bytes,
        /// Allocations made over the whole run, and the bytes they asked for.
        allocations,
        allocated_bytes,
        /// Live objects whose owner is gone, and their device bytes.
        orphans,
        orphan_bytes,
        /// Failed calls, and out-of-memory failures among them.
        failures,
        out_of_memory,
        ;
        /// Steady growth in bytes per [`GrowthUnit`](super::GrowthUnit) (0 when it does not grow
        /// steadily).
        growth,
        /// Of `growth`, what was judged sure ([`Growth::confident`](crate::analysis::Growth)):
        /// what a new growth must have to be a regression on its own.
        confident_growth,
    }
    /// B's numbers minus A's (a site missing from a run counts as zeros there).
    pub struct MetricsChange;
    /// A's and B's counts side by side.
    pub struct MetricsSides;
}

impl Measures for SiteMetrics {
    type Change = MetricsChange;

    fn change(a: Option<&Self>, b: Option<&Self>) -> MetricsChange {
        let zero = SiteMetrics::default();
        SiteMetrics::change(a.unwrap_or(&zero), b.unwrap_or(&zero))
    }

    /// Device and host bytes live at the end.
    fn held(&self) -> u64 {
        self.live_bytes + self.host_bytes
    }

    fn growth(&self) -> f64 {
        self.growth
    }

    fn confident_growth(&self) -> f64 {
        self.confident_growth
    }

    /// Live memory first, then the peak, growth, allocations, orphans and failures.
    fn magnitude(c: &MetricsChange) -> Vec<u64> {
        vec![
            (c.live_bytes + c.host_bytes).unsigned_abs(),
            c.peak_bytes.unsigned_abs(),
            c.growth.abs().round() as u64,
            c.allocated_bytes.unsigned_abs(),
            c.allocations.unsigned_abs(),
            c.orphan_bytes.unsigned_abs(),
            c.failures.unsigned_abs(),
        ]
    }

    /// Device and host bytes.
    fn live_change(c: &MetricsChange) -> i64 {
        c.live_bytes + c.host_bytes
    }

    fn growth_change(c: &MetricsChange) -> f64 {
        c.confident_growth
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_take_the_middle_value() {
        assert_eq!(median_u64(vec![5, 1, 3]), 3);
        assert_eq!(median_u64(vec![4, 1, 3, 2]), 2);
        assert_eq!(median_u64(vec![]), 0);
        assert_eq!(median_u64(vec![u64::MAX, u64::MAX]), u64::MAX);
        assert_eq!(median_f64(vec![1.0, 4.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn one_field_list_makes_sums_medians_and_changes() {
        let m = |live: u64, growth: f64| SiteMetrics {
            live_bytes: live,
            allocations: 1,
            growth,
            ..SiteMetrics::default()
        };
        let mut sum = m(3, 1.0);
        sum.add(&m(4, 2.0));
        assert_eq!((sum.live_bytes, sum.allocations, sum.growth), (7, 2, 3.0));
        let median = SiteMetrics::median(&[m(1, 0.0), m(9, 4.0), m(5, 1.0)]);
        assert_eq!((median.live_bytes, median.growth), (5, 1.0));
        let c = SiteMetrics::change(&m(9, 1.0), &m(5, 4.0));
        assert_eq!((c.live_bytes, c.allocations, c.growth), (-4, 0, 3.0));
        let s = SiteMetrics::side_by_side(&m(9, 1.0), &m(5, 4.0));
        assert_eq!(
            s.live_bytes,
            Count {
                a: 9,
                b: 5,
                change: -4
            }
        );
    }
}
