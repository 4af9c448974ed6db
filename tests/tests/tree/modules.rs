//! One module style: a module with submodules is a folder with a `mod.rs`, never a `name.rs`
//! beside a `name/` folder, so a reader finds every module's root file the same way.

use std::path::Path;

/// The crates whose `src/` is checked.
const CRATES: &[&str] = &["preload", "collector", "tools", "tests"];

#[test]
fn modules_with_submodules_are_folders_with_mod_rs() {
    let root = super::repository_root();
    let mut both = Vec::new();
    for krate in CRATES {
        beside_folders(&root.join(krate).join("src"), &root, &mut both);
    }
    assert!(
        both.is_empty(),
        "move each of these into its folder as mod.rs:\n{}",
        both.join("\n")
    );
}

/// Collects every `name.rs` under `dir` that has a `name/` folder beside it, as paths from `root`.
fn beside_folders(dir: &Path, root: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.with_extension("rs").is_file() {
                let file = path.with_extension("rs");
                out.push(file.strip_prefix(root).unwrap().display().to_string());
            }
            beside_folders(&path, root, out);
        }
    }
}
