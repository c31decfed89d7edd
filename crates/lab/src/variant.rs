//! One stack configuration of an experiment, as its TOML file names it.

use serde::{Deserialize, Serialize};

/// One stack configuration of an experiment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    /// Its name in tables and plots ("OFS", "OFS-ONE", "ext4-like").
    pub label: String,
    /// The stack: file-level workloads run on `ofs`, `blockfs`, `poftl` or `littlefs`;
    /// scheduled ones (synthetic, video, file-writes) on `ftl`, `dftl`, `osd` or `ofs`.
    pub stack: stacks::StackKind,
    /// Settings as `ossd run --set` takes them (`placement`, `osd.*`, `ftl.*`, `fml.*`,
    /// `fs.*`), as strings.
    #[serde(default)]
    pub set: std::collections::BTreeMap<String, String>,
    /// A device preset for this variant instead of the experiment's (BLOCKMGMT-09 Table 2 sets
    /// devices side by side).
    #[serde(default)]
    pub device: Option<String>,
    /// Workload parameters this variant changes (any field but `kind`), e.g. BLOCKMGMT-09
    /// Table 2's `{ write_percent = 0.0, sequential_probability = 1.0 }`.
    #[serde(default)]
    pub workload: Option<toml::Table>,
}
