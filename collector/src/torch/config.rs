//! The allocator configuration a PyTorch process reported when it initialised CUDA (payload
//! `torch.allocator`, JSON written by `tools/python/vramtrace_hooks.py`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::snapshot::SnapshotError;

/// The variables torch reads its allocator settings from, in the order it reads them: the first
/// one set wins (`PYTORCH_CUDA_ALLOC_CONF` is the older name, still read when the newer one is
/// not set).
pub(crate) const ALLOC_CONF_VARIABLES: [&str; 2] =
    ["PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"];

/// PyTorch's memory history recorder as the bootstrap set it up.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RecorderSettings {
    /// `on`, `off`, `not available with this backend`, or `failed: …`.
    pub state: String,
    /// Entries in its ring.
    pub max_entries: u64,
    /// Which actions keep a stack (`alloc`: allocations only).
    pub context: String,
    /// Which frames a stack holds (`python`).
    pub stacks: String,
}

/// The allocator configuration of a PyTorch process.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AllocatorConfig {
    /// `torch.__version__`.
    pub torch_version: String,
    /// `torch.version.cuda`.
    pub cuda_version: String,
    /// `torch.cuda.memory.get_allocator_backend()`: `native` (the caching allocator) or
    /// `cudaMallocAsync`; `None` when torch could not say.
    pub backend: Option<String>,
    /// The allocator settings in effect, from the variable torch reads
    /// ([`ALLOC_CONF_VARIABLES`]); `None` when neither is set (the defaults).
    pub alloc_conf: Option<String>,
    /// The variable `alloc_conf` came from.
    pub alloc_conf_variable: Option<String>,
    pub recorder: RecorderSettings,
}

#[derive(Deserialize)]
struct Raw {
    #[serde(default)]
    torch_version: String,
    #[serde(default)]
    cuda_version: String,
    #[serde(default)]
    backend: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, Option<String>>,
    #[serde(default)]
    recorder: RecorderSettings,
}

impl AllocatorConfig {
    /// Reads the JSON payload; unknown keys are ignored, missing ones are empty.
    pub fn parse(data: &[u8]) -> Result<AllocatorConfig, SnapshotError> {
        let raw: Raw = serde_json::from_slice(data).map_err(SnapshotError::Json)?;
        let (variable, value) = ALLOC_CONF_VARIABLES
            .iter()
            .find_map(|&name| {
                raw.env
                    .get(name)
                    .cloned()
                    .flatten()
                    .map(|v| (name.to_string(), v))
            })
            .unzip();
        Ok(AllocatorConfig {
            torch_version: raw.torch_version,
            cuda_version: raw.cuda_version,
            backend: raw.backend,
            alloc_conf: value,
            alloc_conf_variable: variable,
            recorder: raw.recorder,
        })
    }

    /// One line for a report header: the backend and the settings in effect.
    pub fn describe(&self) -> String {
        let backend = match self.backend.as_deref() {
            Some("native") => "caching allocator (native)".to_string(),
            Some("cudaMallocAsync") => {
                "cudaMallocAsync (every tensor is a driver allocation)".into()
            }
            Some(other) => other.to_string(),
            None => "backend unknown".to_string(),
        };
        let settings = match (&self.alloc_conf_variable, &self.alloc_conf) {
            (Some(name), Some(value)) => format!("{name}={value}"),
            _ => "no PYTORCH_ALLOC_CONF or PYTORCH_CUDA_ALLOC_CONF (defaults)".to_string(),
        };
        format!("PyTorch {} {backend}, {settings}", self.torch_version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_torch_reads_first_wins() {
        let c = AllocatorConfig::parse(
            br#"{"torch_version":"2.11.0","backend":"native","env":{"PYTORCH_ALLOC_CONF":null,
            "PYTORCH_CUDA_ALLOC_CONF":"expandable_segments:True"},"recorder":{"state":"on",
            "max_entries":100000,"context":"alloc","stacks":"python"},"later":1}"#,
        )
        .unwrap();
        assert_eq!(c.backend.as_deref(), Some("native"));
        assert_eq!(c.alloc_conf.as_deref(), Some("expandable_segments:True"));
        assert_eq!(
            c.alloc_conf_variable.as_deref(),
            Some("PYTORCH_CUDA_ALLOC_CONF")
        );
        assert_eq!(c.recorder.max_entries, 100_000);
        assert_eq!(
            c.describe(),
            "PyTorch 2.11.0 caching allocator (native), \
             PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
        );
        let both = AllocatorConfig::parse(
            br#"{"env":{"PYTORCH_ALLOC_CONF":"backend:cudaMallocAsync",
            "PYTORCH_CUDA_ALLOC_CONF":"expandable_segments:True"}}"#,
        )
        .unwrap();
        assert_eq!(both.alloc_conf.as_deref(), Some("backend:cudaMallocAsync"));
        assert_eq!(both.backend, None);
        assert!(AllocatorConfig::parse(b"{").is_err());
    }
}
