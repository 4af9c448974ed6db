//! What `vramtrace run` gives Python programs (`docs/pytorch.md`): the bootstrap directory
//! (`tools/python/`, built into this program) first on `PYTHONPATH`, so PyTorch programs mark
//! their steps from optimizer steps and hand over PyTorch's allocator view; and, for
//! `--per-tensor`, PyTorch's `cudaMallocAsync` backend, under which every tensor is one driver
//! allocation the tracer sees.

use std::ffi::OsString;
use std::path::Path;

use anyhow::{Context, Result};

/// The start-up hook `site` imports, and the hooks it installs.
const FILES: [(&str, &str); 2] = [
    (
        "sitecustomize.py",
        include_str!("../../python/sitecustomize.py"),
    ),
    (
        "vramtrace_hooks.py",
        include_str!("../../python/vramtrace_hooks.py"),
    ),
];

/// The variables PyTorch reads its allocator settings from: the newer first (torch 2.9 and
/// later read it, and the older one only when it is not set), then the older (read by every
/// torch before 2.9).
const ALLOC_CONF: &str = "PYTORCH_ALLOC_CONF";
const CUDA_ALLOC_CONF: &str = "PYTORCH_CUDA_ALLOC_CONF";

/// The bootstrap written to a private temporary directory, removed when this is dropped (after
/// the program has exited).
pub struct Bootstrap {
    dir: tempfile::TempDir,
}

impl Bootstrap {
    /// Writes the bootstrap files.
    pub fn write() -> Result<Bootstrap> {
        let dir = tempfile::Builder::new()
            .prefix("vramtrace-python-")
            .tempdir()
            .context("creating a directory for the Python hooks")?;
        for (name, text) in FILES {
            let path = dir.path().join(name);
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(Bootstrap { dir })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// `PYTHONPATH` with `dir` first, keeping what was there.
pub fn python_path(dir: &Path, existing: Option<OsString>) -> OsString {
    let mut value = OsString::from(dir);
    if let Some(existing) = existing.filter(|v| !v.is_empty()) {
        value.push(":");
        value.push(existing);
    }
    value
}

/// The allocator settings for `--per-tensor`: both variables, each holding what the torch that
/// reads it would have read (the variable itself, else the other one), with `backend` set to
/// `cudaMallocAsync` and every other setting kept. A torch that reads either variable then gets
/// the backend, and its other settings unchanged. `get` reads the current environment.
pub fn per_tensor_env(get: impl Fn(&str) -> Option<String>) -> [(&'static str, String); 2] {
    let newer = get(ALLOC_CONF).or_else(|| get(CUDA_ALLOC_CONF));
    let older = get(CUDA_ALLOC_CONF).or_else(|| get(ALLOC_CONF));
    [
        (ALLOC_CONF, with_async_backend(newer.as_deref())),
        (CUDA_ALLOC_CONF, with_async_backend(older.as_deref())),
    ]
}

/// `settings` (`key:value` pairs separated by commas, a value possibly a bracketed list with
/// commas inside: `roundup_power2_divisions:[256:1,512:2]`) with any `backend` pair replaced by
/// `backend:cudaMallocAsync` at the end.
pub fn with_async_backend(settings: Option<&str>) -> String {
    let mut pairs: Vec<&str> = top_level_pairs(settings.unwrap_or(""))
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .filter(|p| p.split(':').next().map(str::trim) != Some("backend"))
        .collect();
    pairs.push("backend:cudaMallocAsync");
    pairs.join(",")
}

/// The comma-separated parts of `s` outside brackets.
fn top_level_pairs(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backend_joins_the_settings_already_there() {
        assert_eq!(with_async_backend(None), "backend:cudaMallocAsync");
        assert_eq!(with_async_backend(Some("")), "backend:cudaMallocAsync");
        assert_eq!(
            with_async_backend(Some("expandable_segments:True")),
            "expandable_segments:True,backend:cudaMallocAsync"
        );
        assert_eq!(
            with_async_backend(Some(
                " backend : native ,max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2]"
            )),
            "max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2],backend:cudaMallocAsync"
        );
    }

    #[test]
    fn each_variable_keeps_what_its_torch_would_read() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            per_tensor_env(env(&[])),
            [
                (ALLOC_CONF, "backend:cudaMallocAsync".to_string()),
                (CUDA_ALLOC_CONF, "backend:cudaMallocAsync".to_string()),
            ]
        );
        assert_eq!(
            per_tensor_env(env(&[(CUDA_ALLOC_CONF, "expandable_segments:True")])),
            [
                (
                    ALLOC_CONF,
                    "expandable_segments:True,backend:cudaMallocAsync".to_string()
                ),
                (
                    CUDA_ALLOC_CONF,
                    "expandable_segments:True,backend:cudaMallocAsync".to_string()
                ),
            ]
        );
        assert_eq!(
            per_tensor_env(env(&[
                (ALLOC_CONF, "max_split_size_mb:64"),
                (CUDA_ALLOC_CONF, "garbage_collection_threshold:0.6")
            ])),
            [
                (
                    ALLOC_CONF,
                    "max_split_size_mb:64,backend:cudaMallocAsync".to_string()
                ),
                (
                    CUDA_ALLOC_CONF,
                    "garbage_collection_threshold:0.6,backend:cudaMallocAsync".to_string()
                ),
            ]
        );
    }

    #[test]
    fn the_bootstrap_lands_first_on_the_path() {
        let b = Bootstrap::write().unwrap();
        for (name, text) in FILES {
            assert_eq!(std::fs::read_to_string(b.path().join(name)).unwrap(), text);
        }
        let value = python_path(b.path(), Some("/a:/b".into()));
        assert_eq!(
            value,
            OsString::from(format!("{}:/a:/b", b.path().display()))
        );
        assert_eq!(python_path(b.path(), Some("".into())), b.path().as_os_str());
        let dir = b.path().to_path_buf();
        drop(b);
        assert!(!dir.exists(), "removed with the run");
    }
}
