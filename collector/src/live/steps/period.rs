//! The period of a training loop, from the stream of what it allocates and frees.
//!
//! Each token of the stream is one kind of memory event (an allocation or a free of a given size
//! at a given site, or an NVTX range pushed); a loop repeats the same tokens every step. The step
//! is the period of the whole pattern, not of its busiest part:
//!
//! - A candidate step is bounded by the occurrences of one *anchor* token. Candidates are tried
//!   from the most steps to the fewest, and the first that holds is the step.
//! - A candidate holds when most of the recurring kinds (an allocation and its free vote as one)
//!   occur the same number of times in every step of their active range (at least 75% of those
//!   steps, so a periodic evaluation that adds tokens to one step in ten does not break it),
//!   and those kinds make at least half of its memory calls (allocations and frees).
//! - When no candidate holds, the first whose kinds in step make three quarters of its memory
//!   calls is the step: one kind every iteration beside a few that come now and then together
//!   (CuPy's arrays, and its pool's pinned buffers in some iterations) is the loop, not the few.
//! - An inner loop (the same buffer allocated and freed 40 times a step, or once per layer of a
//!   12-layer model) fails that test: cut at its tokens, the rest of the step lands in one inner
//!   iteration out of 40, so most kinds occur in few of its "steps". The outer step is tried next.
//! - A token of the warm-up alone, or of the teardown, cannot be the anchor: its occurrences
//!   must enclose at least half of the recurring tokens, or half of the stream's time. (Either
//!   alone fails real runs: a default caching allocator makes most of its calls while it warms
//!   up, and starting CUDA and the framework can take longer than a short training loop.)
//! - A candidate is judged on the middle of the run (2^17 tokens, or 8 of its steps if longer),
//!   so finding the period costs little however long the stream.
//! - A teardown is a loop too (destroying twenty communicators one by one, say), and it can be
//!   slow: steps that free more than twice what they allocate are a teardown, not training.
//!
//! The finder is pure: it sees dense token ids and their times, nothing of the trace, so it is
//! tested on token strings.

use rustc_hash::FxHashMap;

/// Occurrences of an anchor needed for steps (and the fewest samples a growth verdict takes).
pub(crate) const MIN_STEPS: usize = 4;
/// Candidate step counts tried, most steps first.
const MAX_CANDIDATES: usize = 24;
/// Anchors tried per candidate step count, most regular first.
const ANCHORS_PER_CANDIDATE: usize = 2;
/// Share of the recurring tokens, or of the stream's time, an anchor's occurrences must enclose.
const MIN_COVER: f64 = 0.5;
/// Share of the steps of its active range in which a kind must occur its usual number of times
/// to count as part of the step.
const IN_STEP_SHARE: f64 = 0.75;
/// Steps a kind must be active in to vote (fewer say nothing about the period).
const MIN_ACTIVE_STEPS: u32 = 3;
/// The share of the memory calls of a candidate's steps (allocations and frees, not ranges)
/// that kinds in step must make for a step that most kinds are not in.
const MEMORY_IN_STEP: f64 = 0.75;
/// Tokens a candidate is judged on...
const VOTE_TOKENS: usize = 1 << 17;
/// ...and at least this many complete steps.
const VOTE_STEPS: usize = 8;

/// The step found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Period {
    /// The token whose occurrences begin each step.
    pub(crate) anchor: u32,
    /// Its occurrences: steps begun.
    pub(crate) steps: usize,
    /// Kinds active in at least [`MIN_ACTIVE_STEPS`] complete steps.
    pub(crate) kinds: usize,
    /// Those of them that occur their usual number of times in the steps they are active in.
    pub(crate) in_step: usize,
}

/// Per token: occurrences and the regularity of the gaps between them (in tokens).
#[derive(Clone, Copy, Debug, Default)]
struct Recurrence {
    count: usize,
    first: usize,
    last: usize,
    gap_squares: f64,
}

impl Recurrence {
    /// Standard deviation of the gaps over their mean (0: perfectly regular).
    fn variation(&self) -> f64 {
        let gaps = (self.count - 1) as f64;
        let mean = (self.last - self.first) as f64 / gaps;
        let variance = (self.gap_squares / gaps - mean * mean).max(0.0);
        variance.sqrt() / mean.max(f64::MIN_POSITIVE)
    }
}

/// What the finder knows of a token id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TokenInfo {
    /// The kind it votes as (an allocation and its free share one).
    pub(crate) kind: u32,
    /// Bytes it makes live (positive), frees (negative), or 0 (a range).
    pub(crate) bytes: i64,
}

/// The step of a stream of `tokens` (dense ids below `info.len()`) at `times`. `None` when
/// nothing recurs across the stream.
pub(crate) fn find(tokens: &[u32], times: &[u64], info: &[TokenInfo]) -> Option<Period> {
    let n_ids = info.len();
    let mut rec = vec![Recurrence::default(); n_ids];
    for (i, &t) in tokens.iter().enumerate() {
        let r = &mut rec[t as usize];
        if r.count > 0 {
            let gap = (i - r.last) as f64;
            r.gap_squares += gap * gap;
        } else {
            r.first = i;
        }
        r.count += 1;
        r.last = i;
    }
    // Recurring tokens before each position, to count those an anchor encloses.
    let mut before = Vec::with_capacity(tokens.len() + 1);
    before.push(0usize);
    for &t in tokens {
        let recurring = usize::from(rec[t as usize].count >= MIN_STEPS);
        before.push(before[before.len() - 1] + recurring);
    }
    let recurring = *before.last()?;
    // Events come in sequence order; their times, read on several threads, need not rise with it.
    let span = times.last()?.saturating_sub(*times.first()?);
    let encloses = |r: &Recurrence| {
        let inside = before[r.last + 1] - before[r.first];
        let lasts = times[r.last].saturating_sub(times[r.first]);
        inside as f64 >= recurring as f64 * MIN_COVER || lasts as f64 >= span as f64 * MIN_COVER
    };
    let mut by_count: FxHashMap<usize, Vec<u32>> = FxHashMap::default();
    for (id, r) in rec.iter().enumerate() {
        if r.count >= MIN_STEPS && encloses(r) {
            by_count.entry(r.count).or_default().push(id as u32);
        }
    }
    let mut counts: Vec<usize> = by_count.keys().copied().collect();
    counts.sort_unstable_by(|a, b| b.cmp(a));
    counts.truncate(MAX_CANDIDATES);
    // The anchors to try, most steps first, and where each occurs.
    let mut candidates: Vec<(usize, u32)> = Vec::new();
    for count in counts {
        let mut anchors = by_count.remove(&count).unwrap_or_default();
        anchors.sort_by(|&a, &b| {
            let (ra, rb) = (&rec[a as usize], &rec[b as usize]);
            ra.variation()
                .total_cmp(&rb.variation())
                .then(ra.first.cmp(&rb.first))
        });
        let tried = anchors.into_iter().take(ANCHORS_PER_CANDIDATE);
        candidates.extend(tried.map(|a| (count, a)));
    }
    let mut at: FxHashMap<u32, Vec<usize>> =
        candidates.iter().map(|&(_, a)| (a, Vec::new())).collect();
    for (i, t) in tokens.iter().enumerate() {
        if let Some(positions) = at.get_mut(t) {
            positions.push(i);
        }
    }
    let mut scratch = Scratch::new(info);
    let mut votes = Vec::with_capacity(candidates.len());
    for (count, anchor) in candidates {
        let v = scratch.vote(&tokens[vote_window(&at[&anchor])], anchor);
        if v.voters == 0 || v.freed > 2 * v.allocated {
            continue;
        }
        let period = Period {
            anchor,
            steps: count,
            kinds: v.voters,
            in_step: v.in_step,
        };
        let most_memory = v.memory_in_step as f64 > v.memory as f64 * MEMORY_IN_STEP;
        if v.in_step * 2 > v.voters && v.memory_in_step * 2 >= v.memory {
            return Some(period);
        }
        votes.push((period, most_memory));
    }
    // Second, a step that most of the memory calls keep, though most kinds do not: one kind
    // every iteration beside a few that come now and then (CuPy's arrays, and its pool's
    // pinned buffers in some iterations).
    votes.into_iter().find(|v| v.1).map(|v| v.0)
}

/// The tokens a candidate is judged on, given its anchor's positions: complete steps from the
/// middle of the run (past the warm-up), as many as make [`VOTE_TOKENS`] tokens and at least
/// [`VOTE_STEPS`] (all, in a shorter run). A window of tokens rather than of steps, so that an
/// inner loop's short steps are judged on as many of the outer loop's as anyone else's.
fn vote_window(positions: &[usize]) -> std::ops::Range<usize> {
    let n = positions.len();
    let (mut first, mut last) = (n / 2, n / 2);
    while (first > 0 || last + 1 < n)
        && (positions[last] - positions[first] < VOTE_TOKENS || last - first < VOTE_STEPS)
    {
        first = first.saturating_sub(1);
        last = (last + 1).min(n - 1);
    }
    positions[first]..positions[last]
}

/// What the complete steps of one candidate show.
struct Vote {
    /// Kinds active in at least [`MIN_ACTIVE_STEPS`] complete steps.
    voters: usize,
    /// Those of them that occur their usual number of times in at least [`IN_STEP_SHARE`] of
    /// the steps between their first and last.
    in_step: usize,
    /// Bytes the steps allocate and free.
    allocated: u64,
    freed: u64,
    /// Memory calls (allocations and frees) of the voters, and of those in step.
    memory: u64,
    memory_in_step: u64,
}

/// Per-kind tallies reused across candidates.
struct Scratch<'a> {
    info: &'a [TokenInfo],
    /// Per kind: the step it was last seen in, and its count there.
    current: Vec<(u32, u32)>,
    /// Per kind: first and last step it occurred in.
    active: Vec<(u32, u32)>,
    /// Per kind: (occurrences in a step, steps with that many), for the steps it occurred in.
    histogram: Vec<Vec<(u32, u32)>>,
    /// Per kind: whether its tokens make or free memory (not a range).
    memory: Vec<bool>,
}

const NEVER: u32 = u32::MAX;

impl<'a> Scratch<'a> {
    fn new(info: &'a [TokenInfo]) -> Self {
        let n = info.iter().map(|t| t.kind as usize + 1).max().unwrap_or(0);
        let mut memory = vec![false; n];
        for t in info.iter().filter(|t| t.bytes != 0) {
            memory[t.kind as usize] = true;
        }
        Scratch {
            info,
            current: vec![(NEVER, 0); n],
            active: vec![(NEVER, 0); n],
            histogram: vec![Vec::new(); n],
            memory,
        }
    }

    /// Cuts `steps` (the tokens from the first occurrence of `anchor` up to its last: the
    /// complete steps) at every occurrence of the anchor, and tallies them.
    fn vote(&mut self, steps: &[u32], anchor: u32) -> Vote {
        for c in &mut self.current {
            *c = (NEVER, 0);
        }
        for a in &mut self.active {
            *a = (NEVER, 0);
        }
        for h in &mut self.histogram {
            h.clear();
        }
        let flush = |hist: &mut Vec<(u32, u32)>, count: u32| match hist
            .iter_mut()
            .find(|(c, _)| *c == count)
        {
            Some(entry) => entry.1 += 1,
            None => hist.push((count, 1)),
        };
        let (mut allocated, mut freed) = (0u64, 0u64);
        let mut step = 0u32;
        for (i, &t) in steps.iter().enumerate() {
            if t == anchor && i > 0 {
                step += 1;
            }
            let info = self.info[t as usize];
            if info.bytes >= 0 {
                allocated += info.bytes as u64;
            } else {
                freed += info.bytes.unsigned_abs();
            }
            let k = info.kind as usize;
            let cur = &mut self.current[k];
            if cur.0 == step {
                cur.1 += 1;
                continue;
            }
            if cur.0 != NEVER {
                flush(&mut self.histogram[k], cur.1);
            }
            *cur = (step, 1);
            let a = &mut self.active[k];
            if a.0 == NEVER {
                a.0 = step;
            }
            a.1 = step;
        }
        let (mut voters, mut in_step) = (0, 0);
        let (mut memory, mut memory_in_step) = (0u64, 0u64);
        for k in 0..self.current.len() {
            let (s, count) = self.current[k];
            if s == NEVER {
                continue;
            }
            flush(&mut self.histogram[k], count);
            let (first, last) = self.active[k];
            let active = last - first + 1;
            if active < MIN_ACTIVE_STEPS {
                continue;
            }
            voters += 1;
            let usual = self.histogram[k].iter().map(|&(_, steps)| steps).max();
            let calls: u64 = (self.histogram[k].iter())
                .map(|&(count, steps)| u64::from(count) * u64::from(steps))
                .sum();
            let calls = if self.memory[k] { calls } else { 0 };
            memory += calls;
            if usual.is_some_and(|steps| f64::from(steps) >= f64::from(active) * IN_STEP_SHARE) {
                in_step += 1;
                memory_in_step += calls;
            }
        }
        Vote {
            voters,
            in_step,
            allocated,
            freed,
            memory,
            memory_in_step,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The anchor and steps found in the letters of `s`, one token each, one time unit apart.
    fn run(s: &str, pairs: bool) -> Option<(char, usize)> {
        let mut ids: Vec<char> = Vec::new();
        let tokens: Vec<u32> = s
            .chars()
            .filter(|c| !c.is_whitespace())
            .map(|c| match ids.iter().position(|&x| x == c) {
                Some(i) => i as u32,
                None => {
                    ids.push(c);
                    (ids.len() - 1) as u32
                }
            })
            .collect();
        // With `pairs`, a lowercase free votes as its uppercase allocation when there is one.
        // Uppercase letters allocate a byte, lowercase ones free one.
        let info: Vec<TokenInfo> = (0..ids.len())
            .map(|i| {
                let upper = ids[i].to_ascii_uppercase();
                let paired = ids.iter().position(|&x| x == upper).filter(|_| pairs);
                TokenInfo {
                    kind: paired.unwrap_or(i) as u32,
                    bytes: if ids[i].is_ascii_uppercase() { 1 } else { -1 },
                }
            })
            .collect();
        let times: Vec<u64> = (0..tokens.len() as u64).collect();
        find(&tokens, &times, &info).map(|p| (ids[p.anchor as usize], p.steps))
    }

    #[test]
    fn a_plain_loop_steps_once_per_iteration() {
        let s = "W ".to_string() + &"AaBbH".repeat(20);
        assert_eq!(run(&s, true), Some(('A', 20)));
    }

    #[test]
    fn an_inner_loop_is_not_the_step() {
        // 40 pairs of one buffer, then the step's own allocations.
        let step = "Ii".repeat(40) + "AaBbCcH";
        let s = "WX".to_string() + &step.repeat(10);
        assert_eq!(run(&s, true).map(|p| p.1), Some(10));
        // Once per layer of a model: forward per layer, backward per layer, then the head.
        let step = "Ee".to_string() + &"FGf".repeat(12) + "Ll" + &"BgCb".repeat(12) + "Oo";
        assert_eq!(run(&step.repeat(8), true).map(|p| p.1), Some(8));
    }

    #[test]
    fn one_kind_every_iteration_beside_a_few_now_and_then_is_the_step() {
        // A CuPy loop under `vramtrace run` on an H100: a 4 MiB array every iteration (I), and in
        // a few of them CuPy's pool takes 512 B pinned buffers at three call sites (J, K, L),
        // together. Most kinds are out of step with I, but most memory calls are I; cut at L,
        // the three are in step and I, every call but 13, is not.
        let s = "AABCDCEFGH".to_string()
            + &"I".repeat(20)
            + "JK"
            + &"I".repeat(61)
            + "LIJKLIJKLIIIIIJKL"
            + &"I".repeat(12);
        assert_eq!(run(&s, false), Some(('I', 100)));
    }

    #[test]
    fn a_periodic_evaluation_keeps_the_training_step() {
        let train = "AaBbCcDH";
        let eval = "Vv".repeat(3);
        let mut s = String::from("W");
        for step in 1..=30 {
            s += train;
            if step % 10 == 0 {
                s += &eval;
            }
        }
        assert_eq!(run(&s, true), Some(('A', 30)));
    }

    #[test]
    fn warm_up_and_teardown_tokens_are_not_anchors() {
        // The warm-up allocates a segment 30 times; then a leak and a temporary every step;
        // the segments are freed at exit.
        let s = "S".repeat(30) + &"LAa".repeat(50) + &"s".repeat(30);
        assert_eq!(run(&s, true), Some(('L', 50)));
        // Steps that hold too few of the recurring tokens are not the loop.
        let s = "S".repeat(60) + &"L".repeat(20) + &"s".repeat(60);
        assert_eq!(run(&s, true), None);
    }

    #[test]
    fn a_teardown_loop_is_not_the_step() {
        // Twenty steps keep two buffers each (L and M); the teardown frees the forty of them,
        // slowly, one kind of free (l): more occurrences than steps.
        let mut tokens = Vec::new();
        let mut times = Vec::new();
        for step in 0..20u64 {
            tokens.extend([0, 1, 2, 2]);
            times.extend((0..4).map(|i| step * 4 + i));
        }
        tokens.extend([3; 40]);
        times.extend((0..40).map(|i| 1000 + 100 * i));
        let info =
            [(0, 1), (0, -1), (1, 1), (1, -1)].map(|(kind, bytes)| TokenInfo { kind, bytes });
        let p = find(&tokens, &times, &info).unwrap();
        assert_eq!((p.anchor, p.steps), (0, 20));
    }

    #[test]
    fn nothing_recurs_nothing_found() {
        assert_eq!(run("ABCDEFG", false), None);
        assert_eq!(run("AAA", false), None);
    }

    #[test]
    fn times_that_do_not_rise_with_the_sequence_are_no_fault() {
        // Events from several threads: sequence order, times a little out of order (the last
        // event earlier than the first); the same steps are found as with rising times.
        let tokens: Vec<u32> = (0..40).map(|i| i % 2).collect();
        let info = vec![
            TokenInfo { kind: 0, bytes: 1 },
            TokenInfo { kind: 1, bytes: -1 },
        ];
        let mut times: Vec<u64> = (0..40).map(|i| 100 + i).collect();
        times[39] = 50;
        times[20] = 10;
        assert_eq!(find(&tokens, &times, &info).map(|p| p.steps), Some(20));
    }
}
