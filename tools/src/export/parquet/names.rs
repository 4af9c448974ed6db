//! The words the tables put beside ids: each call site's label (from [`vramtrace_collector::symbols::site_label`], the
//! one labeller of every output) and each owner module's file name, worked out once per site and
//! module as they appear while the trace is read.

use std::collections::HashMap;

use vramtrace_collector::analysis::site_name;
use vramtrace_collector::live::{LiveState, SiteId};
use vramtrace_collector::symbols::{Attribution, Symbolizer};

use vramtrace_collector::symbols::site_label;

/// Labels of sites and names of modules, by id.
pub struct Names {
    symbols: Symbolizer,
    /// By site id (dense: the replay numbers sites as it meets them).
    sites: Vec<Option<String>>,
    /// By module id (as the trace numbers them), with the last one asked for in front.
    modules: HashMap<u32, Option<String>>,
    last_module: Option<(u32, Option<String>)>,
}

impl Drop for Names {
    fn drop(&mut self) {
        // The next trace read on this thread reads no module's debug information again.
        crate::load::keep_symbolizer(std::mem::take(&mut self.symbols));
    }
}

impl Names {
    pub fn new() -> Self {
        Names {
            symbols: crate::load::thread_symbolizer(),
            sites: Vec::new(),
            modules: HashMap::new(),
            last_module: None,
        }
    }

    /// The label of call site `id` of `state`: its program's Python line, else the native
    /// function that asked, else its `module+offset`.
    pub fn site(&mut self, state: &LiveState, id: SiteId) -> &str {
        let i = id as usize;
        if i >= self.sites.len() {
            self.sites.resize(i + 1, None);
        }
        if self.sites[i].is_none() {
            let name = site_name(state, id);
            let mut naming = Attribution::of_state(state, &mut self.symbols);
            self.sites[i] = Some(site_label(&mut naming, &name).unwrap_or(name.site));
        }
        self.sites[i].as_deref().unwrap_or_default()
    }

    /// The file name of owner module `id` (`None` when the trace does not name it).
    pub fn module(&mut self, state: &LiveState, id: Option<u32>) -> Option<&str> {
        let id = id?;
        if self
            .last_module
            .as_ref()
            .is_none_or(|(last, _)| *last != id)
        {
            let name = self
                .modules
                .entry(id)
                .or_insert_with(|| state.owners().module_name(id).map(str::to_string));
            self.last_module = Some((id, name.clone()));
        }
        self.last_module
            .as_ref()
            .and_then(|(_, name)| name.as_deref())
    }

    /// The symbolizer, for the tables that show whole stacks.
    pub fn symbols(&mut self) -> &mut Symbolizer {
        &mut self.symbols
    }
}
