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

pub mod diff;
pub mod identity;
mod lines;
pub mod matching;
pub mod median;
pub mod metrics;
pub mod profile;
pub mod ranks;
pub mod row;
pub mod sources;
pub mod tally;
pub mod tensors;
pub mod verdict;

pub use diff::{Diff, SiteDiff};
pub use identity::{FrameId, PythonLine, SiteIdentity};
pub use matching::{MatchHow, Matching};
pub use metrics::SiteMetrics;
pub use profile::{GrowthUnit, Profile, RunTotals, SiteProfile, StepFacts};
pub use ranks::{rank_rows, RankCause, RankInput, RankRow};
pub use row::SiteStatus;
pub use sources::SourceSearch;
pub use tally::{CallCounts, CallTally};
pub use tensors::{TensorDiff, TensorProfile};
pub use verdict::{NewGrowth, Thresholds, Verdict};
