//! Pairing the call sites of two profiles A and B.
//!
//! Python files are paired first (same path; else the same trailing path components or file
//! name; else the two main scripts), and the lines of each pair mapped from B to A: by a line
//! diff of the two sources when both can be read, else by the offset from the start of the
//! function (`co_firstlineno`), which follows a function moved whole. Then sites are paired:
//!
//! 1. **exact**: the same identity once B's Python line, and the lines of its path, are read as
//!    A's lines (a line that only moved because lines were inserted above it is the same line);
//! 2. **native stack**: unpaired sites with the same native frames, when exactly one on each
//!    side has them (their Python lines disagree: an edited line, or calls that came from one
//!    line in one run and several in the other);
//! 3. **Python line**: unpaired sites with the same (mapped) Python line, when exactly one on
//!    each side has it (the native frames differ: another build of a library);
//! 4. **function**: unpaired sites in the same Python function with the same native frames,
//!    when exactly one on each side is (a line of a function that did not move whole, such as
//!    the module's own code, when the sources are not there to match it by its text);
//! 5. **similar stack**: unpaired sites with the same Python line (or none) whose native stacks
//!    share the most innermost frames, when no other pairing shares as many (stacks that differ
//!    only far from the allocation: the interpreter's frames under a deeper Python call path,
//!    cut at the stack depth at another frame); without a Python line, only sites whose frames
//!    near the allocation name them alike (two functions calling one allocator wrapper are two
//!    sites).
//!
//! Every pairing but an exact one with unmoved lines is a guess, and says so.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use super::identity::{FrameId, PythonLine, SiteIdentity};
use super::profile::{CodeFacts, Profile};
use super::sources::{LineChangeKind, LineMap, Source, SourceSearch};

/// Why two Python files were taken for versions of one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PairedBy {
    SamePath,
    /// The same file name and trailing directories (a checkout elsewhere).
    SameSuffix,
    SameName,
    /// Both are their program's main script, under different names (a guess, not taken when
    /// their sources, read, share less than half of B's code lines: two programs).
    MainScript,
}

/// How a file's lines in B are read as lines of A.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LineMapping {
    /// A line diff of both sources.
    SourceText,
    /// The offset from the start of the enclosing function (the sources were not readable).
    FunctionStart,
}

/// Two versions of one Python file.
#[derive(Clone, Debug, Serialize)]
pub struct FilePair {
    /// The file as A and as B recorded it.
    pub a: String,
    pub b: String,
    pub paired_by: PairedBy,
    pub lines: LineMapping,
    /// Where the sources were read, when they were.
    pub a_source: Option<String>,
    pub b_source: Option<String>,
    /// Code lines added in B (changed lines count as added), and removed from A.
    pub added: usize,
    pub removed: usize,
    #[serde(skip)]
    pub map: Option<LineMap>,
    #[serde(skip)]
    pub sources: Option<(Source, Source)>,
}

/// How two sites were paired.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MatchHow {
    /// The same names, and the same line numbers.
    Exact,
    /// The same names once B's Python line was mapped by the line diff of the sources.
    SourceText,
    /// The same names once B's Python line was mapped by its offset in its function.
    FunctionStart,
    /// The same native frames; the Python lines differ.
    NativeStack,
    /// The same Python line; the native frames differ.
    PythonLine,
    /// The same Python function and native frames; the lines differ.
    SameFunction,
    /// The same Python line (or none), and the longest run of the same innermost native frames.
    SimilarStack,
    /// Per-tensor view only: the same Python function, holding the very same tensors (count
    /// and bytes) at the end; the lines differ (`compare::tensors`).
    SameTensors,
    /// No partner.
    OnlyInA,
    OnlyInB,
}

impl MatchHow {
    /// The name in JSON and tables.
    pub const fn name(self) -> &'static str {
        match self {
            MatchHow::Exact => "exact",
            MatchHow::SourceText => "source-text",
            MatchHow::FunctionStart => "function-start",
            MatchHow::NativeStack => "native-stack",
            MatchHow::PythonLine => "python-line",
            MatchHow::SameFunction => "same-function",
            MatchHow::SimilarStack => "similar-stack",
            MatchHow::SameTensors => "same-tensors",
            MatchHow::OnlyInA => "only-in-a",
            MatchHow::OnlyInB => "only-in-b",
        }
    }

    /// Whether the pairing is a guess: anything but the same names at the same lines.
    pub const fn guessed(self) -> bool {
        matches!(
            self,
            MatchHow::SourceText
                | MatchHow::FunctionStart
                | MatchHow::NativeStack
                | MatchHow::PythonLine
                | MatchHow::SameFunction
                | MatchHow::SimilarStack
                | MatchHow::SameTensors
        )
    }
}

/// One site of A and/or B (indexes into each profile's `sites`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SitePair {
    pub a: Option<usize>,
    pub b: Option<usize>,
    pub how: MatchHow,
    /// A guess: the pairing's own, or the files' (two main scripts of different names).
    pub guessed: bool,
}

/// The pairing of two profiles' files and sites.
#[derive(Clone, Debug)]
pub struct Matching {
    pub files: Vec<FilePair>,
    pub pairs: Vec<SitePair>,
}

impl Matching {
    /// Pairs the sites of `a` and `b`; sources are looked for with `sources`.
    pub fn of(a: &Profile, b: &Profile, sources: &SourceSearch) -> Self {
        let files = pair_files(a, b, sources);
        let mapper = LineMapper {
            a,
            b,
            files: &files,
        };
        let mut pairs = Vec::new();
        let mut a_free: Vec<bool> = vec![true; a.sites.len()];
        let mut b_free: Vec<bool> = vec![true; b.sites.len()];
        // B's identities in A's terms, when its Python line exists in A.
        let mapped: Vec<Option<InA>> = (b.sites.iter())
            .map(|s| mapper.identity_in_a(&s.identity))
            .collect();
        // A path tells sites apart only on a line reached on several paths: elsewhere an
        // edited calling line would part sites that are one. Its lines in files the other run
        // does not have (a launcher one run had: `python -m`, a wrapper script) are passed over.
        let several = lines_on_several_paths(a, b, &mapped);
        let exact = |id: &SiteIdentity| SiteIdentity {
            path: match &id.python {
                Some(line) if several.contains(line) => (id.path.iter())
                    .filter(|l| files.iter().any(|f| f.a == l.file))
                    .cloned()
                    .collect(),
                _ => Vec::new(),
            },
            ..id.clone()
        };
        let index: HashMap<SiteIdentity, usize> = (a.sites.iter().enumerate())
            .map(|(i, s)| (exact(&s.identity), i))
            .collect();
        for (j, m) in mapped.iter().enumerate() {
            let Some((identity, how, file_guess, whole)) = m else {
                continue;
            };
            let on_path = identity
                .python
                .as_ref()
                .is_some_and(|l| several.contains(l));
            if on_path && !whole {
                continue;
            }
            if let Some(&i) = index.get(&exact(identity)).filter(|&&i| a_free[i]) {
                a_free[i] = false;
                b_free[j] = false;
                pairs.push(SitePair {
                    a: Some(i),
                    b: Some(j),
                    how: *how,
                    guessed: how.guessed() || *file_guess,
                });
            }
        }
        // Unique partners by native frames, then by Python line.
        let by_native = |s: &SiteIdentity| Some(s.native.clone()).filter(|n| !n.is_empty());
        pair_unique(
            &mut pairs,
            (&mut a_free, &mut b_free),
            |i| by_native(&a.sites[i].identity),
            |j| by_native(&b.sites[j].identity),
            MatchHow::NativeStack,
        );
        pair_unique(
            &mut pairs,
            (&mut a_free, &mut b_free),
            |i| a.sites[i].identity.python.clone(),
            |j| mapped[j].as_ref().and_then(|m| m.0.python.clone()),
            MatchHow::PythonLine,
        );
        let function_a = |i: usize| {
            let s = &a.sites[i].identity;
            (s.python.as_ref()).map(|p| (p.file.clone(), p.function.clone(), s.native.clone()))
        };
        let function_b = |j: usize| {
            let s = &b.sites[j].identity;
            let p = s.python.as_ref()?;
            let file = &files.iter().find(|f| f.b == p.file)?.a;
            Some((file.clone(), p.function.clone(), s.native.clone()))
        };
        pair_unique(
            &mut pairs,
            (&mut a_free, &mut b_free),
            function_a,
            function_b,
            MatchHow::SameFunction,
        );
        pair_similar(
            &mut pairs,
            (&mut a_free, &mut b_free),
            |i| (&a.sites[i].identity, a.sites[i].label.as_str()),
            |j| Some((&mapped[j].as_ref()?.0, b.sites[j].label.as_str())),
        );
        pairs.extend((0..a.sites.len()).filter(|&i| a_free[i]).map(|i| SitePair {
            a: Some(i),
            b: None,
            how: MatchHow::OnlyInA,
            guessed: false,
        }));
        pairs.extend((0..b.sites.len()).filter(|&j| b_free[j]).map(|j| SitePair {
            a: None,
            b: Some(j),
            how: MatchHow::OnlyInB,
            guessed: false,
        }));
        Matching { files, pairs }
    }

    /// The sites of A and of B (indexes) whose paths to drop so that both runs say each line
    /// alike: a line one run says as one place, its paths dropped (it grows on every path:
    /// `profile.rs`), and the other as one place per path (where it does not) is compared as
    /// one place, not as a new one beside others gone. A run's places of the line on paths the
    /// other run still names apart (a path that does not grow there) keep them.
    pub fn whole_lines(
        a: &Profile,
        b: &Profile,
        sources: &SourceSearch,
    ) -> (BTreeSet<usize>, BTreeSet<usize>) {
        /// How one run says a line: as one place (no path), and its places on a path.
        #[derive(Default)]
        struct Said {
            whole: bool,
            on_paths: Vec<(usize, Vec<PythonLine>)>,
        }
        impl Said {
            fn note(&mut self, i: usize, own_path: &[PythonLine], path: Vec<PythonLine>) {
                if own_path.is_empty() {
                    self.whole = true;
                } else {
                    self.on_paths.push((i, path));
                }
            }
            /// This run's places on a path that `other` says as one place and no longer apart.
            /// Only places on two paths or more (in files both runs have) are joined: places
            /// whose paths differ only in a launcher's lines are one place already.
            fn to_join(&self, other: &Said) -> Vec<usize> {
                if !other.whole || self.whole {
                    return Vec::new();
                }
                let apart: BTreeSet<&[PythonLine]> =
                    other.on_paths.iter().map(|p| &p.1[..]).collect();
                let join: Vec<&(usize, Vec<PythonLine>)> = (self.on_paths.iter())
                    .filter(|(_, path)| !apart.contains(&path[..]))
                    .collect();
                let paths: BTreeSet<&[PythonLine]> = join.iter().map(|p| &p.1[..]).collect();
                if paths.len() < 2 {
                    return Vec::new();
                }
                join.into_iter().map(|(i, _)| *i).collect()
            }
        }
        let files = pair_files(a, b, sources);
        let mapper = LineMapper {
            a,
            b,
            files: &files,
        };
        // Each Python line and its native frames, in A's terms, and the lines of a path in
        // files both runs have.
        let mut said: BTreeMap<(PythonLine, Vec<FrameId>), [Said; 2]> = BTreeMap::new();
        for (i, s) in a.sites.iter().enumerate() {
            let Some(line) = &s.identity.python else {
                continue;
            };
            let path = (s.identity.path.iter())
                .filter(|l| files.iter().any(|f| f.a == l.file))
                .cloned()
                .collect();
            let key = (line.clone(), s.identity.native.clone());
            said.entry(key).or_default()[0].note(i, &s.identity.path, path);
        }
        for (j, s) in b.sites.iter().enumerate() {
            let Some((
                SiteIdentity {
                    python: Some(line),
                    path,
                    native,
                },
                ..,
            )) = mapper
                .identity_in_a(&s.identity)
                .filter(|_| s.identity.python.is_some())
            else {
                continue;
            };
            said.entry((line, native)).or_default()[1].note(j, &s.identity.path, path);
        }
        let (mut in_a, mut in_b) = (BTreeSet::new(), BTreeSet::new());
        for [x, y] in said.values() {
            in_a.extend(x.to_join(y));
            in_b.extend(y.to_join(x));
        }
        (in_a, in_b)
    }

    /// The file pair B's file `b_file` belongs to.
    pub(crate) fn file_of_b(&self, b_file: &str) -> Option<&FilePair> {
        self.files.iter().find(|f| f.b == b_file)
    }
}

/// What the reader of both runs' reports must know of the lines whose places in one run were
/// made one to be compared with the other's one place ([`Matching::whole_lines`]): that run's
/// report says them one per path. `what`: the view's places; each run's profile with the
/// indexes of its joined places.
pub(crate) fn joined_notes(
    what: &str,
    a: (&Profile, &BTreeSet<usize>),
    b: (&Profile, &BTreeSet<usize>),
) -> Vec<String> {
    let mut notes = Vec::new();
    for ((run, other), (profile, whole)) in [(("A", "B"), a), (("B", "A"), b)] {
        let mut count: BTreeMap<&PythonLine, usize> = BTreeMap::new();
        for line in whole
            .iter()
            .filter_map(|&i| profile.sites[i].identity.python.as_ref())
        {
            *count.entry(line).or_default() += 1;
        }
        notes.extend(count.into_iter().map(|(line, n)| {
            format!(
                "run {run}'s {n} {what} at {line}, one per path, compared as one: run {other} \
                 says the line as one place (it grows on every path)"
            )
        }));
    }
    notes
}

/// The Python lines (in A's terms) that A or B reaches on several paths.
fn lines_on_several_paths(
    a: &Profile,
    b: &Profile,
    mapped: &[Option<InA>],
) -> BTreeSet<PythonLine> {
    // The lines one run reaches on several paths, of its lines (in A's terms) and paths.
    fn on_several<'a>(
        lines: impl Iterator<Item = (&'a PythonLine, &'a [PythonLine])>,
    ) -> Vec<PythonLine> {
        let mut paths: BTreeMap<&PythonLine, BTreeSet<&[PythonLine]>> = BTreeMap::new();
        for (line, path) in lines {
            paths.entry(line).or_default().insert(path);
        }
        (paths.into_iter())
            .filter(|(_, p)| p.len() > 1)
            .map(|(l, _)| l.clone())
            .collect()
    }
    let in_a =
        (a.sites.iter()).filter_map(|s| Some((s.identity.python.as_ref()?, &s.identity.path[..])));
    let in_b = (b.sites.iter().zip(mapped)).filter_map(|(s, m)| {
        s.identity.python.as_ref()?;
        Some((m.as_ref()?.0.python.as_ref()?, &s.identity.path[..]))
    });
    on_several(in_a)
        .into_iter()
        .chain(on_several(in_b))
        .collect()
}

/// Pairs the still unpaired sites whose keys (`key_a`, `key_b`) are equal and unique on each
/// side.
fn pair_unique<K: Ord>(
    pairs: &mut Vec<SitePair>,
    (a_free, b_free): (&mut [bool], &mut [bool]),
    key_a: impl Fn(usize) -> Option<K>,
    key_b: impl Fn(usize) -> Option<K>,
    how: MatchHow,
) {
    let mut groups: BTreeMap<K, (Vec<usize>, Vec<usize>)> = BTreeMap::new();
    for i in (0..a_free.len()).filter(|&i| a_free[i]) {
        if let Some(k) = key_a(i) {
            groups.entry(k).or_default().0.push(i);
        }
    }
    for j in (0..b_free.len()).filter(|&j| b_free[j]) {
        if let Some(k) = key_b(j) {
            groups.entry(k).or_default().1.push(j);
        }
    }
    for (a, b) in groups.into_values() {
        if let ([i], [j]) = (&a[..], &b[..]) {
            a_free[*i] = false;
            b_free[*j] = false;
            pairs.push(SitePair {
                a: Some(*i),
                b: Some(*j),
                how,
                guessed: true,
            });
        }
    }
}

/// Pairs the still unpaired sites with the same Python line (or none) by the number of
/// innermost native frames their stacks share: longest first, and only where neither site has
/// another candidate sharing as many.
fn pair_similar<'a>(
    pairs: &mut Vec<SitePair>,
    (a_free, b_free): (&mut [bool], &mut [bool]),
    a: impl Fn(usize) -> (&'a SiteIdentity, &'a str),
    b: impl Fn(usize) -> Option<(&'a SiteIdentity, &'a str)>,
) {
    let mut candidates: BTreeMap<usize, Vec<(usize, usize)>> = BTreeMap::new();
    for i in (0..a_free.len()).filter(|&i| a_free[i]) {
        for j in (0..b_free.len()).filter(|&j| b_free[j]) {
            let ((x, x_label), Some((y, y_label))) = (a(i), b(j)) else {
                continue;
            };
            if x.python != y.python {
                continue;
            }
            // Without a Python line, the native frames near the allocation are what name a site
            // (`keep at shapes.c:91 → fw_alloc`): two functions of the program that call one
            // allocator wrapper share its frame and are two sites. Stacks that differ only far
            // from the allocation name the site alike.
            if x.python.is_none() && x_label != y_label {
                continue;
            }
            let shared = (x.native.iter().zip(&y.native))
                .take_while(|(p, q)| p == q)
                .count();
            if shared > 0 {
                candidates.entry(shared).or_default().push((i, j));
            }
        }
    }
    for (_, group) in candidates.into_iter().rev() {
        let open: Vec<(usize, usize)> = (group.iter())
            .filter(|&&(i, j)| a_free[i] && b_free[j])
            .copied()
            .collect();
        for &(i, j) in &open {
            let rivals = open.iter().filter(|&&(x, y)| x == i || y == j).count();
            if rivals == 1 {
                a_free[i] = false;
                b_free[j] = false;
                pairs.push(SitePair {
                    a: Some(i),
                    b: Some(j),
                    how: MatchHow::SimilarStack,
                    guessed: true,
                });
            }
        }
    }
}

/// Every Python file a profile names.
fn files_of(p: &Profile) -> BTreeSet<&str> {
    let codes = p.codes.iter().map(|c| c.file.as_str());
    let lines = (p.sites.iter())
        .flat_map(|s| s.python_lines.iter())
        .map(|l| l.file.as_str());
    codes.chain(lines).collect()
}

/// How many trailing path components two paths share.
fn common_suffix(a: &str, b: &str) -> usize {
    a.rsplit('/')
        .zip(b.rsplit('/'))
        .take_while(|(x, y)| x == y && !x.is_empty())
        .count()
}

fn pair_files(a: &Profile, b: &Profile, sources: &SourceSearch) -> Vec<FilePair> {
    let a_files = files_of(a);
    let mut unpaired_a: BTreeSet<&str> = a_files.clone();
    let mut found: Vec<(&str, &str, PairedBy)> = Vec::new();
    let b_files = files_of(b);
    let mut unpaired_b = Vec::new();
    for &bf in &b_files {
        if unpaired_a.remove(bf) {
            found.push((bf, bf, PairedBy::SamePath));
        } else {
            unpaired_b.push(bf);
        }
    }
    let mut rest = Vec::new();
    for bf in unpaired_b {
        // The A file sharing the most trailing components, when it is the only one.
        let mut best: Vec<(&str, usize)> = (unpaired_a.iter())
            .map(|&af| (af, common_suffix(af, bf)))
            .filter(|&(_, n)| n >= 1)
            .collect();
        best.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
        match best[..] {
            [(af, n), ..] if best.get(1).is_none_or(|&(_, m)| m < n) => {
                unpaired_a.remove(af);
                let by = if n >= 2 {
                    PairedBy::SameSuffix
                } else {
                    PairedBy::SameName
                };
                found.push((af, bf, by));
            }
            _ => rest.push(bf),
        }
    }
    if let (Some(am), Some(bm)) = (a.main_script.as_deref(), b.main_script.as_deref()) {
        if rest.contains(&bm) && unpaired_a.contains(am) {
            found.push((am, bm, PairedBy::MainScript));
        }
    }
    found
        .into_iter()
        .filter_map(|(af, bf, paired_by)| {
            let read = fitting(sources, a, af).zip(fitting(sources, b, bf));
            let map = read.as_ref().map(|(x, y)| LineMap::between(x, y));
            let (added, removed) = match (&map, &read) {
                (Some(m), Some((sa, sb))) => code_changes(m, sa, sb),
                _ => (0, 0),
            };
            // Two main scripts whose sources share less than half of B's code are two
            // programs, not two versions of one: their lines are not paired, and B's lines are
            // no "added" lines to suspect.
            if paired_by == PairedBy::MainScript {
                if let Some((_, sb)) = &read {
                    let code = (1..=sb.lines.len() as u32)
                        .filter(|&n| sb.is_code(n))
                        .count();
                    if 2 * (code - added.min(code)) < code {
                        return None;
                    }
                }
            }
            Some(FilePair {
                a: af.to_string(),
                b: bf.to_string(),
                paired_by,
                lines: if map.is_some() {
                    LineMapping::SourceText
                } else {
                    LineMapping::FunctionStart
                },
                a_source: read.as_ref().map(|(x, _)| x.path.display().to_string()),
                b_source: read.as_ref().map(|(_, y)| y.path.display().to_string()),
                added,
                removed,
                map,
                sources: read,
            })
        })
        .collect()
}

/// B's site identity in A's terms, how its line was mapped, whether its file pairing was a
/// guess, and whether every line of its path has a counterpart in A (else the identity's path
/// is partial, and pairs nothing exactly).
type InA = (SiteIdentity, MatchHow, bool, bool);

/// Reads B's Python lines as A's.
struct LineMapper<'a> {
    a: &'a Profile,
    b: &'a Profile,
    files: &'a [FilePair],
}

impl LineMapper<'_> {
    /// B's `identity` in A's terms ([`InA`]); `None` when its Python line has no counterpart
    /// in A.
    fn identity_in_a(&self, identity: &SiteIdentity) -> Option<InA> {
        let Some(line) = &identity.python else {
            return Some((identity.clone(), MatchHow::Exact, false, true));
        };
        let (mapped, how, guess) = self.line_in_a(line)?;
        // The path's lines are read as A's too (those of files A does not have are passed
        // over); one with no counterpart (a calling line edited) leaves the site to the
        // pairings by line alone.
        let path: Vec<Option<PythonLine>> = (identity.path.iter())
            .filter(|l| self.files.iter().any(|f| f.b == l.file))
            .map(|l| self.line_in_a(l).map(|(l, _, _)| l))
            .collect();
        let whole = path.iter().all(Option::is_some);
        Some((
            SiteIdentity {
                python: Some(mapped),
                path: path.into_iter().flatten().collect(),
                native: identity.native.clone(),
            },
            how,
            guess,
            whole,
        ))
    }

    fn line_in_a(&self, line: &PythonLine) -> Option<(PythonLine, MatchHow, bool)> {
        let pair = self.files.iter().find(|f| f.b == line.file)?;
        let a_line = match &pair.map {
            Some(map) => map.to_a(line.line)?,
            None => {
                let b_start = enclosing(&self.b.codes, &line.file, &line.function, line.line)?;
                let a_start = nearest(&self.a.codes, &pair.a, &line.function, b_start)?;
                (i64::from(line.line) - i64::from(b_start) + i64::from(a_start))
                    .try_into()
                    .ok()?
            }
        };
        let how = match (a_line == line.line, pair.lines) {
            (true, _) => MatchHow::Exact,
            (false, LineMapping::SourceText) => MatchHow::SourceText,
            (false, LineMapping::FunctionStart) => MatchHow::FunctionStart,
        };
        Some((
            PythonLine {
                file: pair.a.clone(),
                function: line.function.clone(),
                line: a_line,
            },
            how,
            pair.paired_by == PairedBy::MainScript,
        ))
    }
}

/// The first line of the code object `function` of `file` that encloses `line` (the latest
/// start at or before it).
fn enclosing(codes: &[CodeFacts], file: &str, function: &str, line: u32) -> Option<u32> {
    (codes.iter())
        .filter(|c| c.file == file && c.function == function && c.first_line <= line)
        .map(|c| c.first_line)
        .max()
}

/// The first line of the code object `function` of `file` starting nearest `start`.
fn nearest(codes: &[CodeFacts], file: &str, function: &str, start: u32) -> Option<u32> {
    (codes.iter())
        .filter(|c| c.file == file && c.function == function)
        .map(|c| c.first_line)
        .min_by_key(|&s| s.abs_diff(start))
}

/// The source of `file` as `run` executed it: the first candidate whose functions start where
/// the run's code objects say they do, and whose lines the run was seen executing are code (a
/// file edited since the run, or another run's version, would misplace every line).
fn fitting(sources: &SourceSearch, run: &Profile, file: &str) -> Option<Source> {
    sources.read_fitting(file, |source| {
        let codes = run.codes.iter().filter(|c| c.file == file);
        let defined = codes
            .clone()
            .all(|c| source.defines(&c.function, c.first_line));
        let executed = codes
            .filter_map(|c| run.executed.get(&(c.file.clone(), c.function.clone())))
            .flatten()
            .all(|&line| source.is_code(line));
        defined && executed
    })
}

/// Code lines (not blank, not comments) added in B and removed from A.
fn code_changes(map: &LineMap, a: &Source, b: &Source) -> (usize, usize) {
    let count = |kind: LineChangeKind, source: &Source| {
        (map.changes.iter())
            .filter(|c| c.kind == kind && source.is_code(c.line))
            .count()
    };
    (
        count(LineChangeKind::Added, b),
        count(LineChangeKind::Removed, a),
    )
}
