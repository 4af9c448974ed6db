//! Comparing real traces (GPU run 1, trace format 4, in `tests/fixtures/gpu/`): the healthy GPT
//! training program against `gpt_leaky.py`, the same program with 3 lines inserted above its
//! loop and a leaking line added in it. Every Python line the runs share is matched to its line
//! in the other version, found by the text of both sources; without them, by native stacks.
//! Sites are named as the report names them: a call made on a thread without Python (the
//! caching allocator's, from autograd) counts under the line inferred for it, so the leaky run
//! has lines of its own where the leak made the allocator ask for more.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use vramtrace_collector::analysis::{analyze, GrowthConfig};
use vramtrace_collector::compare::{CallTally, MatchHow, Matching, Profile, SourceSearch};
use vramtrace_collector::format::TraceReader;
use vramtrace_collector::live::{LiveState, StepSource};
use vramtrace_collector::symbols::{SymbolSearch, Symbolizer};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/gpu")
}

/// The profile of a fixture trace, read as the tools read it: once, and again with the steps of
/// its allocation pattern when it has one (`gpt_leaky`'s leak adds a 128 MiB segment every 8
/// steps, a pattern of its own).
fn profile(name: &str) -> Profile {
    let read = |source: StepSource| {
        let mut reader = TraceReader::open(fixtures().join(name)).unwrap();
        let mut state = LiveState::with_step_source(source);
        let mut tally = CallTally::new();
        state.replay_visiting(
            &mut reader,
            |_, e| {
                tally.note(e);
                true
            },
            |_| {},
        );
        (state, tally)
    };
    let (mut state, mut tally) = read(StepSource::Marks);
    if let Some(pattern) = state.step_pattern().filter(|_| state.marks() == 0) {
        (state, tally) = read(pattern.source());
    }
    let analysis = analyze(&state, &GrowthConfig::default());
    let mut symbols = Symbolizer::new(SymbolSearch::only(Vec::new()));
    Profile::build(&state, &analysis, &tally, &mut symbols)
}

/// The line of `healthy_gpt.py` that line `b` of `gpt_leaky.py` is: 3 lines replaced the one
/// `# DIFF-LEAK-SETUP` line 45, so every line below 47 moved down by 2.
fn healthy_line(b: u32) -> u32 {
    if b > 47 {
        b - 2
    } else {
        b
    }
}

#[test]
fn every_python_line_is_matched_across_the_inserted_lines() {
    let (a, b) = (
        profile("healthy_gpt-traced.vtrace"),
        profile("gpt_leaky-traced.vtrace"),
    );
    assert_eq!(a.main_script_name(), Some("healthy_gpt.py"));
    assert_eq!(b.main_script_name(), Some("gpt_leaky.py"));
    let m = Matching::of(&a, &b, &SourceSearch::new(vec![fixtures()]));
    assert!(
        m.pairs.iter().all(|p| p.a.is_none() || p.b.is_some()),
        "every site of A paired"
    );
    // Only in B: the new segments the kept tensors made the allocator ask for, from autograd's
    // thread, at the lines inferred for them (the report names the growth at line 63 too).
    let mut only_b: Vec<(u32, bool)> = (m.pairs.iter().filter(|p| p.a.is_none()))
        .map(|p| {
            let s = &b.sites[p.b.unwrap()];
            (s.identity.python.as_ref().unwrap().line, s.python_inferred)
        })
        .collect();
    only_b.sort();
    assert_eq!(only_b, [(56, true), (63, true)]);
    assert_eq!(m.pairs.len(), a.sites.len() + 2);
    assert_eq!(b.sites.len(), a.sites.len() + 2);
    let mut lines = BTreeSet::new();
    for p in m.pairs.iter().filter(|p| p.a.is_some()) {
        let (sa, sb) = (&a.sites[p.a.unwrap()], &b.sites[p.b.unwrap()]);
        match (&sa.identity.python, &sb.identity.python) {
            (Some(x), Some(y)) => {
                assert_eq!(x.function, y.function);
                assert_eq!(x.line, healthy_line(y.line), "{x} against {y}");
                let how = if x.line == y.line {
                    MatchHow::Exact
                } else {
                    MatchHow::SourceText
                };
                assert_eq!(p.how, how, "{x} against {y}");
                // The files are the two main scripts, paired by a guess.
                assert!(p.guessed);
                lines.insert((y.function.clone(), y.line));
            }
            (None, None) => assert_eq!(sa.identity.native, sb.identity.native),
            other => panic!("a Python line on one side only: {other:?}"),
        }
    }
    let lines: Vec<(&str, u32)> = lines.iter().map(|(f, l)| (f.as_str(), *l)).collect();
    assert_eq!(
        lines,
        [
            ("<module>", 40),
            ("<module>", 53),
            ("<module>", 56),
            ("<module>", 63),
            ("GPT.forward", 30),
            ("GPT.forward", 31),
            ("GPT.forward", 32)
        ]
    );
}

#[test]
fn without_the_sources_the_moved_lines_pair_by_native_stack() {
    let (a, b) = (
        profile("healthy_gpt-traced.vtrace"),
        profile("gpt_leaky-traced.vtrace"),
    );
    let nowhere = SourceSearch::new(vec![PathBuf::from("/nonexistent")]);
    let m = Matching::of(&a, &b, &nowhere);
    // Unpaired: inferred lines only, where one native stack has several lines in B (53, 56 and
    // 63) and nothing says which of them A's line 51 is.
    let mut unpaired: Vec<(Option<u32>, Option<u32>)> = (m.pairs.iter())
        .filter(|p| p.a.is_none() || p.b.is_none())
        .map(|p| {
            let line = |run: &Profile, i: Option<usize>| {
                i.map(|i| {
                    assert!(run.sites[i].python_inferred);
                    run.sites[i].identity.python.as_ref().unwrap().line
                })
            };
            (line(&a, p.a), line(&b, p.b))
        })
        .collect();
    unpaired.sort();
    assert_eq!(
        unpaired,
        [
            (None, Some(53)),
            (None, Some(56)),
            (None, Some(63)),
            (Some(51), None)
        ]
    );
    for p in m.pairs.iter().filter(|p| p.a.is_some() && p.b.is_some()) {
        let (sa, sb) = (&a.sites[p.a.unwrap()], &b.sites[p.b.unwrap()]);
        if let (Some(x), Some(y)) = (&sa.identity.python, &sb.identity.python) {
            assert_eq!(x.line, healthy_line(y.line), "{x} against {y}");
            // GPT.forward did not move; `<module>` starts at line 1 in both, so its moved
            // lines are only found by their native stacks.
            let how = if x.line == y.line {
                MatchHow::Exact
            } else {
                MatchHow::NativeStack
            };
            assert_eq!(p.how, how, "{x} against {y}");
        }
    }
}

/// The `-marks` runs started the program through a wrapper that marks steps and runs the script
/// by `runpy` (`python stepmark.py healthy_gpt.py`): the main script is the one the wrapper ran,
/// the innermost module-level frame of the program's own, not the wrapper further out.
#[test]
fn a_script_run_by_a_wrapper_is_the_main_script() {
    assert_eq!(
        profile("healthy_gpt-marks.vtrace").main_script_name(),
        Some("healthy_gpt.py")
    );
    assert_eq!(
        profile("leak_slow-marks.vtrace").main_script_name(),
        Some("leak_slow.py")
    );
}
