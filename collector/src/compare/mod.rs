//! Comparing traces call site by call site: two runs of a program (last week's and today's, the
//! one before a dependency upgrade and the one after), or one rank of a job against the others.
//!
//! Addresses cannot be compared: ASLR moves every library between runs and a rebuild moves every
//! function. So, as heaptrack's `--diff` does, a call site is named by symbols before it is
//! compared ([`identity`]): the program's Python line where its calls have one, and the
//! function, file and line of each native frame, with `module+offset` only where nothing names
//! a frame. A trace becomes a [`Profile`] — what each site holds at the end and at the peak, how
//! fast it grows, what it allocated and what failed there, built from the collector's own
//! per-site answers ([`crate::analysis::Analysis`]) and a [`CallTally`] taken while reading;
//! growth is judged by the analysis' own judgement ([`crate::analysis::Growth::judge`]), so a
//! growth is the same growth in a report and in a comparison. [`matching`] pairs the sites of
//! two profiles, also across edits that moved Python lines ([`sources`]), and says when it
//! guessed; [`diff`] ranks what changed, one [`row`] per site or line of either view (numbers
//! from one record per view, [`metrics`]), and [`verdict`] decides whether it is a regression.
//! [`ranks`] compares many traces of one job (one per rank or process) with their median.

pub(crate) mod diff;
pub(crate) mod identity;
mod lines;
pub(crate) mod matching;
pub(crate) mod median;
pub(crate) mod metrics;
pub(crate) mod profile;
pub(crate) mod ranks;
pub(crate) mod row;
pub(crate) mod sources;
pub(crate) mod tally;
pub(crate) mod tensors;
pub(crate) mod verdict;

pub use diff::{Diff, PlaceDiff, SiteDiff};
pub use diff::{SourceChange, StepAlignment, StepRow, TopDifference, TotalsDiff};
pub use identity::native_identity;
pub use identity::PythonLine;
pub use lines::unit_converter;
pub use matching::{FilePair, LineMapping, PairedBy};
pub use matching::{MatchHow, Matching};
pub use metrics::SiteMetrics;
pub use metrics::{Count, Rate};
pub use profile::{growth_unit, main_script};
pub use profile::{GrowthUnit, Profile, RunTotals};
pub use ranks::{rank_rows, RankCause, RankInput, RankRow};
pub use ranks::{FAILURES_FLOOR, GROWTH_FLOOR, MEMORY_FLOOR, ODD_DISTANCE};
pub use row::SiteStatus;
pub use sources::LineChangeKind;
pub use sources::SourceSearch;
pub use tally::CallTally;
pub use tensors::TensorProfile;
pub use tensors::{TensorLine, TensorLineDiff, TensorRun};
pub use verdict::Check;
pub use verdict::{view_name, DRIVER_VIEW_NAME};
pub use verdict::{NewGrowth, Thresholds, Verdict};
