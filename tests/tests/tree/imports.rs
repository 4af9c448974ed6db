//! No import loops between folders: reads every `use` line and every `crate::`/`super::`/`self::`
//! path in each crate's `src/`, turns them into a graph between folders and fails on any loop
//! (a strongly connected component of more than one folder) that the allow-list below does not
//! name exactly.
//!
//! A node is a folder of `src/` (`capture/stack/` for `capture/stack/mod.rs` and the files beside
//! it) or a top-level file (`profile.rs`), so `cli ↔ replay` is a loop even though both are files.
//! The crate root file (`lib.rs`, `main.rs`) is a node of its own: it declares every module, but
//! a `mod` line is not an import. Paths are resolved by name to the module file they name (the
//! longest prefix that is a module); an item a module re-exports (`pub use`) points at the file
//! its `pub use` names, so a path through a facade leads where the item is written. Macro
//! bodies count where the macro is written (`$crate::` paths).
//!
//! Why a scanner of our own instead of cargo-modules: it needs nothing installed, runs with the
//! test suite on every machine, and the syntax it reads (use trees, paths, `mod` lines) is small.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

/// Loops allowed to remain, one per entry: crate, then the folders of the loop in sorted order
/// (`"tools: cli.rs report"`), each with a comment saying why it stays. The list only shrinks: a
/// loop that is gone must be removed from it (the test fails until it is), and a new loop is
/// removed from the code, not added here.
const ALLOWED_LOOPS: &[&str] = &[];

/// The crates whose `src/` is checked.
const CRATES: &[&str] = &["preload", "collector", "tools", "tests"];

#[test]
fn no_import_loops_between_folders() {
    let root = super::repository_root();
    let mut found = BTreeSet::new();
    let mut report = String::new();
    for krate in CRATES {
        let graph = Graph::of_crate(&root.join(krate).join("src"));
        for component in graph.loops() {
            let name = format!("{krate}: {}", component.join(" "));
            writeln!(report, "{name}").unwrap();
            for line in graph.edges_within(&component) {
                writeln!(report, "    {line}").unwrap();
            }
            found.insert(name);
        }
    }
    let allowed: BTreeSet<String> = ALLOWED_LOOPS.iter().map(|s| s.to_string()).collect();
    let new: Vec<_> = found.difference(&allowed).collect();
    let gone: Vec<_> = allowed.difference(&found).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "import loops between folders differ from the allow-list in tests/tests/tree/imports.rs\n\
         new loops (remove them from the code): {new:?}\n\
         allowed loops that are gone (remove them from ALLOWED_LOOPS): {gone:?}\n\
         every loop found, with the imports that make it:\n{report}"
    );
}

/// Nor between the files of one folder: inside each folder, its files and sub-folders (each one
/// node) import one way only, so a file can be read knowing only those it names. A folder's
/// `mod.rs` declares the others and is left out: a file that names its own folder's facade, or
/// is named by it, is not a loop.
#[test]
fn no_import_loops_between_files_of_a_folder() {
    let root = super::repository_root();
    let mut report = String::new();
    for krate in CRATES {
        let graph = Graph::of_crate(&root.join(krate).join("src"));
        for component in graph.sibling_loops() {
            writeln!(report, "{krate}: {}", component.join(" ")).unwrap();
        }
    }
    assert!(
        report.is_empty(),
        "files of one folder that import each other (move what both need below them):\n{report}"
    );
}

/// The scanner itself, on a crate written for it: a loop through `super::`, a use tree, a child
/// module named without `crate::`, a `$crate::` path in a macro, and a test module's
/// `use super::*` (which stays inside its file).
#[test]
fn the_scanner_finds_a_planted_loop() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let write = |path: &str, text: &str| {
        let p = src.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write("lib.rs", "mod a;\nmod b;\nmod c;\nmod d;\nmod e;\nmod i;\n");
    write("a/mod.rs", "mod inner;\npub use inner::X;\n");
    // `a/inner.rs` reaches `b` through a use tree with a comment and a string in the way.
    write(
        "a/inner.rs",
        "use crate::{/* crate::d */ b::{self, Y}};\npub struct X;\nconst S: &str = \"crate::c\";\n",
    );
    write("b.rs", "pub struct Y;\nfn f() { let _ = crate::a::X; }\n");
    write(
        "c.rs",
        "macro_rules! m { () => { $crate::d::Z } }\n#[cfg(test)]\nmod tests { use super::*; }\n",
    );
    write("d.rs", "pub struct Z;\n");
    // Inside folder `e/`, two files naming each other, and one naming only the facade (the
    // item it hands on is `f.rs`'s: no loop).
    write("e/mod.rs", "mod f;\nmod g;\nmod h;\npub use f::F;\n");
    write("e/f.rs", "use super::g::G;\npub struct F;\n");
    write("e/g.rs", "pub struct G;\nfn f() { let _ = super::f::F; }\n");
    write("e/h.rs", "fn h() { let _ = super::F; }\n");
    // Inside folder `i/`, two files naming each other's items through the facade only.
    write(
        "i/mod.rs",
        "mod j;\nmod k;\npub(crate) use j::J;\npub use k::K;\n",
    );
    write("i/j.rs", "use super::K;\npub struct J;\n");
    write("i/k.rs", "pub struct K;\nfn k() { let _ = super::J; }\n");
    let graph = Graph::of_crate(src);
    assert_eq!(
        graph.sibling_loops(),
        vec![
            vec!["a", "b.rs", "a/inner.rs:1 → b.rs", "b.rs:2 → a/inner.rs"],
            vec!["e/f.rs", "e/g.rs", "e/f.rs:1 → e/g.rs", "e/g.rs:2 → e/f.rs"],
            vec!["i/j.rs", "i/k.rs", "i/j.rs:1 → i/k.rs", "i/k.rs:2 → i/j.rs"],
        ]
    );
    assert_eq!(
        graph.loops(),
        vec![vec!["a".to_string(), "b.rs".to_string()]]
    );
    let edges = graph.edges_within(&["a".to_string(), "b.rs".to_string()]);
    assert_eq!(
        edges,
        vec![
            "a/inner.rs:1 → b.rs".to_string(),
            "b.rs:2 → a/inner.rs".to_string()
        ]
    );
    assert!(graph.edges.contains_key(&("c.rs".into(), "d.rs".into())));
}

/// A module: its path from the crate root and the file it is written in.
struct Module {
    file: String,
}

/// The imports of one crate, between files and between folders.
struct Graph {
    /// Module path (`capture::stack`) → where it is written.
    modules: BTreeMap<Vec<String>, Module>,
    /// (from file, to file) → the first line of `from` that imports `to`.
    edges: BTreeMap<(String, String), usize>,
    /// (module path, item name) → the file a module's `pub use` of that item names: a path
    /// through a facade leads to the file that defines the item, so two files of a folder that
    /// name each other's items through their `mod.rs` are a loop too.
    reexports: BTreeMap<(Vec<String>, String), String>,
}

impl Graph {
    fn of_crate(src: &Path) -> Graph {
        let root_file = if src.join("lib.rs").exists() {
            "lib.rs"
        } else {
            "main.rs"
        };
        let mut graph = Graph {
            modules: BTreeMap::new(),
            edges: BTreeMap::new(),
            reexports: BTreeMap::new(),
        };
        // Pass 1: every module and the file it lives in, following `mod` lines from the root.
        let mut parsed = Vec::new();
        let mut pending = vec![(Vec::<String>::new(), root_file.to_string())];
        while let Some((path, file)) = pending.pop() {
            let text = std::fs::read_to_string(src.join(&file))
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", src.join(&file).display()));
            let tokens = lex(&text);
            graph
                .modules
                .insert(path.clone(), Module { file: file.clone() });
            for declared in declarations(&tokens) {
                let mut child = path.clone();
                child.extend(declared.inline_path.iter().cloned());
                child.push(declared.name.clone());
                match declared.kind {
                    Declared::Inline => {
                        graph.modules.insert(child, Module { file: file.clone() });
                    }
                    Declared::File(ref explicit) => {
                        let child_file = child_file(src, &file, &declared, explicit.as_deref());
                        pending.push((child, child_file));
                    }
                }
            }
            parsed.push((path, file, tokens));
        }
        // Pass 2: what each module hands on, resolved as far as the other modules' re-exports
        // go (a chain of facades takes as many rounds as it is long).
        let parsed: Vec<_> = (parsed.into_iter())
            .map(|(path, file, tokens)| (path, file, references(&tokens)))
            .collect();
        for _ in 0..4 {
            for (path, _, references) in &parsed {
                for reference in references.iter().filter(|r| r.reexport) {
                    let mut scope = path.clone();
                    scope.extend(reference.inline_path.iter().cloned());
                    let name = reference.segments.last().cloned().unwrap_or_default();
                    if let Some(target) = graph.resolve(&scope, &reference.segments) {
                        graph.reexports.insert((scope, name), target);
                    }
                }
            }
        }
        // Pass 3: every path that names something of this crate, resolved to a module file.
        for (path, file, references) in &parsed {
            for reference in references {
                let mut scope = path.clone();
                scope.extend(reference.inline_path.iter().cloned());
                if let Some(target) = graph.resolve(&scope, &reference.segments) {
                    if &target != file {
                        graph
                            .edges
                            .entry((file.clone(), target))
                            .or_insert(reference.line);
                    }
                }
            }
        }
        graph
    }

    /// The file that `segments`, written inside module `scope`, names; None for another crate.
    fn resolve(&self, scope: &[String], segments: &[String]) -> Option<String> {
        let mut absolute: Vec<String> = scope.to_vec();
        let mut rest = segments;
        match rest.first().map(String::as_str) {
            Some("crate" | "$crate") => {
                absolute.clear();
                rest = &rest[1..];
            }
            Some("self") => rest = &rest[1..],
            Some("super") => {
                while rest.first().map(String::as_str) == Some("super") {
                    absolute.pop()?;
                    rest = &rest[1..];
                }
            }
            Some(first) => {
                // A bare path starts at a child module of the scope (or of one of the enclosing
                // inline modules' file module); anything else is another crate or a local item.
                let mut child = absolute.clone();
                child.push(first.to_string());
                if !self.modules.contains_key(&child) {
                    return None;
                }
            }
            None => return None,
        }
        absolute.extend(rest.iter().cloned());
        let mut item = None;
        while !self.modules.contains_key(&absolute) {
            item = absolute.pop();
        }
        let handed_on = item.and_then(|name| self.reexports.get(&(absolute.clone(), name)));
        Some(handed_on.unwrap_or(&self.modules[&absolute].file).clone())
    }

    /// The node a file belongs to: its folder, or itself for a top-level file without a folder.
    fn node(&self, file: &str) -> String {
        let path = Path::new(file);
        let folder_of = |p: &Path| p.parent().map(|d| d.to_string_lossy().into_owned());
        let stem = path.file_stem().unwrap().to_string_lossy();
        let parent = folder_of(path).unwrap_or_default();
        if stem == "mod" {
            return parent;
        }
        // `x.rs` beside a folder `x/` is that folder's module file.
        let own_folder = path.with_extension("");
        if self
            .modules
            .values()
            .any(|m| Path::new(&m.file).starts_with(&own_folder))
        {
            return own_folder.to_string_lossy().into_owned();
        }
        if parent.is_empty() {
            return file.to_string();
        }
        parent
    }

    /// Edges between nodes (folders), each with one import that makes it.
    fn node_edges(&self) -> BTreeMap<(String, String), String> {
        let mut out = BTreeMap::new();
        for ((from, to), line) in &self.edges {
            let (a, b) = (self.node(from), self.node(to));
            if a != b {
                out.entry((a, b))
                    .or_insert_with(|| format!("{from}:{line} → {to}"));
            }
        }
        out
    }

    /// A file as the path of the unit it is among its siblings: a folder's `mod.rs` (and `x.rs`
    /// beside a folder `x/`) is the folder; the crate root is the empty path.
    fn unit(&self, file: &str) -> Vec<String> {
        let path = Path::new(file);
        let stem = path.file_stem().unwrap().to_string_lossy();
        let own_folder = path.with_extension("");
        let unit = if stem == "mod" {
            path.parent().unwrap_or(Path::new("")).to_path_buf()
        } else if file == "lib.rs" || file == "main.rs" {
            Default::default()
        } else if (self.modules.values()).any(|m| Path::new(&m.file).starts_with(&own_folder)) {
            own_folder
        } else {
            path.to_path_buf()
        };
        unit.to_string_lossy()
            .split('/')
            .filter(|c| !c.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// Edges between the files and sub-folders of one folder (`folder/name`), each with one
    /// import that makes it; an edge to or from a folder's own facade is none.
    fn sibling_edges(&self) -> BTreeMap<(String, String), String> {
        let mut out = BTreeMap::new();
        for ((from, to), line) in &self.edges {
            let (a, b) = (self.unit(from), self.unit(to));
            let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
            if common == a.len() || common == b.len() {
                continue;
            }
            let folder = a[..common].join("/");
            let name = |n: &str| format!("{folder}/{n}").trim_start_matches('/').to_string();
            out.entry((name(&a[common]), name(&b[common])))
                .or_insert_with(|| format!("{from}:{line} → {to}"));
        }
        out
    }

    /// Loops between the files of a folder, each with the imports that make it.
    fn sibling_loops(&self) -> Vec<Vec<String>> {
        let edges = self.sibling_edges();
        components(&edges)
            .into_iter()
            .map(|c| {
                let how = (edges.iter())
                    .filter(|((a, b), _)| c.contains(a) && c.contains(b))
                    .map(|(_, how)| how.clone());
                c.iter().cloned().chain(how).collect()
            })
            .collect()
    }

    /// Strongly connected components of more than one node, each sorted (Tarjan's algorithm).
    fn loops(&self) -> Vec<Vec<String>> {
        components(&self.node_edges())
    }
    /// The imports (`file:line → file`) that join the nodes of one loop.
    fn edges_within(&self, component: &[String]) -> Vec<String> {
        self.node_edges()
            .into_iter()
            .filter(|((a, b), _)| component.contains(a) && component.contains(b))
            .map(|(_, how)| how)
            .collect()
    }
}

/// Strongly connected components of more than one node of `edges`, each sorted (Tarjan's
/// algorithm).
fn components<V>(edges: &BTreeMap<(String, String), V>) -> Vec<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges.keys() {
        next.entry(a).or_default().push(b);
        next.entry(b).or_default();
    }
    let mut tarjan = Tarjan {
        next: &next,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        counter: 0,
        components: Vec::new(),
    };
    for node in next.keys() {
        if !tarjan.index.contains_key(node) {
            tarjan.visit(node);
        }
    }
    let mut loops: Vec<Vec<String>> = tarjan
        .components
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| {
            let mut c: Vec<String> = c.into_iter().map(str::to_string).collect();
            c.sort();
            c
        })
        .collect();
    loops.sort();
    loops
}

struct Tarjan<'a> {
    next: &'a BTreeMap<&'a str, Vec<&'a str>>,
    index: BTreeMap<&'a str, usize>,
    low: BTreeMap<&'a str, usize>,
    stack: Vec<&'a str>,
    on_stack: BTreeSet<&'a str>,
    counter: usize,
    components: Vec<Vec<&'a str>>,
}

impl<'a> Tarjan<'a> {
    fn visit(&mut self, node: &'a str) {
        self.index.insert(node, self.counter);
        self.low.insert(node, self.counter);
        self.counter += 1;
        self.stack.push(node);
        self.on_stack.insert(node);
        for &succ in &self.next[node] {
            if !self.index.contains_key(succ) {
                self.visit(succ);
                let low = self.low[node].min(self.low[succ]);
                self.low.insert(node, low);
            } else if self.on_stack.contains(succ) {
                let low = self.low[node].min(self.index[succ]);
                self.low.insert(node, low);
            }
        }
        if self.low[node] == self.index[node] {
            let mut component = Vec::new();
            loop {
                let top = self.stack.pop().unwrap();
                self.on_stack.remove(top);
                component.push(top);
                if top == node {
                    break;
                }
            }
            self.components.push(component);
        }
    }
}

/// Where a file module declared with `mod name;` is written.
fn child_file(
    src: &Path,
    parent_file: &str,
    declared: &Declaration,
    explicit: Option<&str>,
) -> String {
    let parent = Path::new(parent_file);
    let stem = parent.file_stem().unwrap().to_string_lossy();
    let base = if matches!(&*stem, "mod" | "lib" | "main") {
        parent.parent().unwrap().to_path_buf()
    } else {
        parent.with_extension("")
    };
    let mut dir = base;
    for inline in &declared.inline_path {
        dir.push(inline);
    }
    if let Some(explicit) = explicit {
        // `#[path]` is relative to the directory of the declaring file (for `mod.rs`-like
        // files) — the only form this repository uses.
        let dir = parent.parent().unwrap_or(Path::new(""));
        return dir.join(explicit).to_string_lossy().into_owned();
    }
    let flat = dir.join(format!("{}.rs", declared.name));
    if src.join(&flat).exists() {
        return flat.to_string_lossy().into_owned();
    }
    dir.join(&declared.name)
        .join("mod.rs")
        .to_string_lossy()
        .into_owned()
}

/// A token of Rust source, with comments and the insides of literals left out.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    /// An identifier or keyword, `$crate` and macro variables included.
    Ident(String),
    /// A string literal's text (only `#[path = "..."]` reads it).
    Str(String),
    /// `::`
    PathSep,
    Punct(char),
}

/// Rust source as tokens with their line numbers.
fn lex(text: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 1;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if chars[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if let Some((len, hashes)) = raw_string_start(&chars[i..]) {
            // r"..", r#".."#, br"..": ends at a quote followed by as many hashes.
            let start_line = line;
            i += len;
            let begin = i;
            while i < chars.len() {
                if chars[i] == '"'
                    && chars[i + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&h| h == '#')
                        .count()
                        == hashes
                {
                    break;
                }
                if chars[i] == '\n' {
                    line += 1;
                }
                i += 1;
            }
            out.push((Token::Str(chars[begin..i].iter().collect()), start_line));
            i += 1 + hashes;
        } else if c == '"' || (c == 'b' && next == Some('"')) || (c == 'c' && next == Some('"')) {
            let start_line = line;
            i += if c == '"' { 1 } else { 2 };
            let begin = i;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if chars.get(i) == Some(&'\n') {
                    line += 1;
                }
                i += 1;
            }
            out.push((Token::Str(chars[begin..i].iter().collect()), start_line));
            i += 1;
        } else if c == '\'' || (c == 'b' && next == Some('\'')) {
            // A char literal ('a', '\n', '\u{1F600}', b'x') or a lifetime ('a, 'static).
            let start = if c == 'b' { i + 1 } else { i };
            if chars.get(start + 1) == Some(&'\\') {
                // Past the backslash and the escaped character, up to the closing quote.
                let mut j = start + 3;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
            } else if chars.get(start + 2) == Some(&'\'') {
                i = start + 3;
            } else {
                // A lifetime: skip the quote, the name lexes as an identifier.
                i = start + 1;
            }
        } else if c == ':' && next == Some(':') {
            out.push((Token::PathSep, line));
            i += 2;
        } else if c.is_alphanumeric() || c == '_' || (c == '$' && next.is_some_and(is_ident_char)) {
            let begin = i;
            i += 1;
            while i < chars.len() && is_ident_char(chars[i]) {
                i += 1;
            }
            let word: String = chars[begin..i].iter().collect();
            let word = word.strip_prefix("r#").map(str::to_string).unwrap_or(word);
            out.push((Token::Ident(word), line));
        } else {
            out.push((Token::Punct(c), line));
            i += 1;
        }
    }
    out
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The length of a raw string's opening (`r#"`, `br"`, ...) and its number of hashes.
fn raw_string_start(chars: &[char]) -> Option<(usize, usize)> {
    let mut i = 0;
    if chars.first() == Some(&'b') || chars.first() == Some(&'c') {
        i += 1;
    }
    if chars.get(i) != Some(&'r') {
        return None;
    }
    i += 1;
    let mut hashes = 0;
    while chars.get(i) == Some(&'#') {
        hashes += 1;
        i += 1;
    }
    (chars.get(i) == Some(&'"')).then_some((i + 1, hashes))
}

enum Declared {
    /// `mod name { ... }`
    Inline,
    /// `mod name;`, with the `#[path]` attribute's value if it has one.
    File(Option<String>),
}

/// A `mod` line, with the inline modules around it.
struct Declaration {
    inline_path: Vec<String>,
    name: String,
    kind: Declared,
}

/// Walks the tokens keeping track of the inline modules (`mod tests { ... }`) the cursor is in.
struct Scopes {
    /// (name, brace depth inside the module)
    open: Vec<(String, usize)>,
    depth: usize,
}

impl Scopes {
    fn new() -> Scopes {
        Scopes {
            open: Vec::new(),
            depth: 0,
        }
    }

    /// Feeds the token at `i`; returns a declaration when one starts here.
    fn step(&mut self, tokens: &[(Token, usize)], i: usize) -> Option<Declaration> {
        match &tokens[i].0 {
            Token::Punct('{') => self.depth += 1,
            Token::Punct('}') => {
                if self.open.last().is_some_and(|(_, d)| *d == self.depth) {
                    self.open.pop();
                }
                self.depth = self.depth.saturating_sub(1);
            }
            Token::Ident(word) if word == "mod" => {
                let Some((Token::Ident(name), _)) = tokens.get(i + 1) else {
                    return None;
                };
                let inline_path = self.path();
                match tokens.get(i + 2).map(|t| &t.0) {
                    Some(Token::Punct('{')) => {
                        self.open.push((name.clone(), self.depth + 1));
                        return Some(Declaration {
                            inline_path,
                            name: name.clone(),
                            kind: Declared::Inline,
                        });
                    }
                    Some(Token::Punct(';')) => {
                        return Some(Declaration {
                            inline_path,
                            name: name.clone(),
                            kind: Declared::File(path_attribute(tokens, i)),
                        });
                    }
                    _ => {}
                }
            }
            _ => {}
        }
        None
    }

    fn path(&self) -> Vec<String> {
        self.open.iter().map(|(name, _)| name.clone()).collect()
    }
}

/// The value of a `#[path = "..."]` attribute among those just before token `at`.
fn path_attribute(tokens: &[(Token, usize)], at: usize) -> Option<String> {
    let mut i = at;
    // Step back over `pub`, `pub(crate)` and attributes (`# [ ... ]`).
    while i > 0 {
        i -= 1;
        match &tokens[i].0 {
            Token::Ident(w) if w == "pub" || w == "crate" || w == "super" => {}
            Token::Punct('(') | Token::Punct(')') => {}
            Token::Punct(']') => {
                let close = i;
                while i > 0 && tokens[i].0 != Token::Punct('#') {
                    i -= 1;
                }
                let attribute = &tokens[i..=close];
                if let [_, _, (Token::Ident(p), _), (Token::Punct('='), _), (Token::Str(v), _), ..] =
                    attribute
                {
                    if p == "path" {
                        return Some(v.clone());
                    }
                }
            }
            _ => return None,
        }
    }
    None
}

fn declarations(tokens: &[(Token, usize)]) -> Vec<Declaration> {
    let mut scopes = Scopes::new();
    (0..tokens.len())
        .filter_map(|i| scopes.step(tokens, i))
        .collect()
}

/// A path written in the source: its segments, the line and the inline modules around it.
struct Reference {
    segments: Vec<String>,
    line: usize,
    inline_path: Vec<String>,
    /// A leaf of a `pub use` (any visibility): the module hands the item on.
    reexport: bool,
}

/// Every path a file writes: each leaf of each `use` tree, and every other path of two or more
/// segments (`crate::a::b()`, `super::x`, `stack::walk()`); `resolve` decides which are ours.
fn references(tokens: &[(Token, usize)]) -> Vec<Reference> {
    let mut scopes = Scopes::new();
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        scopes.step(tokens, i);
        let line = tokens[i].1;
        match &tokens[i].0 {
            Token::Ident(word) if word == "use" => {
                let end = (i..tokens.len())
                    .find(|&j| tokens[j].0 == Token::Punct(';'))
                    .unwrap_or(tokens.len());
                // `pub use`, `pub(crate) use`, `pub(super) use`.
                let pub_ = Token::Ident("pub".into());
                let reexport = (tokens[..i].iter().rev().take(4)).any(|t| t.0 == pub_)
                    && (tokens[i - 1].0 == pub_ || tokens[i - 1].0 == Token::Punct(')'));
                for segments in use_tree(&tokens[i + 1..end]) {
                    out.push(Reference {
                        segments,
                        line,
                        inline_path: scopes.path(),
                        reexport,
                    });
                }
                for j in i + 1..end {
                    scopes.step(tokens, j);
                }
                i = end;
                continue;
            }
            Token::Ident(first)
                if tokens.get(i + 1).map(|t| &t.0) == Some(&Token::PathSep)
                    && (i == 0 || tokens[i - 1].0 != Token::PathSep) =>
            {
                let mut segments = vec![first.clone()];
                let mut j = i + 1;
                while tokens.get(j).map(|t| &t.0) == Some(&Token::PathSep) {
                    match tokens.get(j + 1).map(|t| &t.0) {
                        Some(Token::Ident(s)) => segments.push(s.clone()),
                        _ => break,
                    }
                    j += 2;
                }
                // `pub(in crate::x)` is a visibility, not an import.
                let visibility = i >= 2
                    && tokens[i - 1].0 == Token::Ident("in".into())
                    && tokens[i - 2].0 == Token::Punct('(');
                if !visibility {
                    out.push(Reference {
                        segments,
                        line,
                        inline_path: scopes.path(),
                        reexport: false,
                    });
                }
                for k in i + 1..j.min(tokens.len()) {
                    scopes.step(tokens, k);
                }
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The leaves of a use tree (`a::{b, c::{self, D}}` → `a::b`, `a::c`, `a::c::D`); `as` renames
/// and globs end a path where they stand.
fn use_tree(tokens: &[(Token, usize)]) -> Vec<Vec<String>> {
    fn walk(
        tokens: &[(Token, usize)],
        i: &mut usize,
        prefix: &[String],
        out: &mut Vec<Vec<String>>,
    ) {
        let mut path = prefix.to_vec();
        while *i < tokens.len() {
            match &tokens[*i].0 {
                Token::Ident(w) if w == "as" => {
                    *i += 2;
                }
                Token::Ident(w) if w == "self" && !path.is_empty() => *i += 1,
                Token::Ident(w) => {
                    path.push(w.clone());
                    *i += 1;
                }
                Token::PathSep | Token::Punct('*') => *i += 1,
                Token::Punct('{') => {
                    *i += 1;
                    loop {
                        walk(tokens, i, &path, out);
                        match tokens.get(*i).map(|t| &t.0) {
                            Some(Token::Punct(',')) => *i += 1,
                            Some(Token::Punct('}')) => {
                                *i += 1;
                                break;
                            }
                            _ => break,
                        }
                    }
                    return;
                }
                Token::Punct(',') | Token::Punct('}') => break,
                _ => *i += 1,
            }
        }
        if !path.is_empty() {
            out.push(path);
        }
    }
    let mut out = Vec::new();
    let mut i = 0;
    // `pub use` / `pub(crate) use`: the tokens before `use` were already consumed.
    while i < tokens.len() {
        walk(tokens, &mut i, &[], &mut out);
        if i < tokens.len() {
            i += 1;
        }
    }
    out
}
