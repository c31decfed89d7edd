//! Which stack: the one enum every front end (CLI, experiments, torture) names stacks by.

/// Which stack: the one name every front end (CLI, experiments, torture) uses for it. An unknown
/// name is an error that lists the valid ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StackKind {
    /// The page-mapping FTL (the papers' sFTL / PFTL), block-level.
    Ftl,
    /// DFTL: page mapping with a bounded cache of translation pages, block-level.
    Dftl,
    /// The object store, block-level: the workload's byte space is cut into objects
    /// (`object_bytes`). Also accepted as `ossd`, its former name.
    #[serde(alias = "ossd")]
    Osd,
    /// OFS, the object file system on the object store (file-level).
    Ofs,
    /// The ext4-like block file system (no journal) on the page-mapping FTL (file-level).
    Blockfs,
    /// p-OFTL (POFTL-14) with its thin file layer (file-level).
    Poftl,
    /// LittleFS, a real flash file system (the `littlefs2` crate), straight on the NAND device:
    /// erase block = LittleFS block, page = read and program size (file-level).
    Littlefs,
}

impl StackKind {
    /// Every stack, in the order help texts list them.
    pub const ALL: [StackKind; 7] = [
        StackKind::Ftl,
        StackKind::Dftl,
        StackKind::Osd,
        StackKind::Ofs,
        StackKind::Blockfs,
        StackKind::Poftl,
        StackKind::Littlefs,
    ];
    /// The stacks a block-level run (`ossd run`) drives.
    pub const BLOCK_LEVEL: [StackKind; 3] = [StackKind::Ftl, StackKind::Dftl, StackKind::Osd];

    /// The name in configs and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            StackKind::Ftl => "ftl",
            StackKind::Dftl => "dftl",
            StackKind::Osd => "osd",
            StackKind::Ofs => "ofs",
            StackKind::Blockfs => "blockfs",
            StackKind::Poftl => "poftl",
            StackKind::Littlefs => "littlefs",
        }
    }
}

impl std::fmt::Display for StackKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for StackKind {
    type Err = UnknownStack;
    fn from_str(s: &str) -> Result<Self, UnknownStack> {
        if s == "ossd" {
            return Ok(StackKind::Osd);
        }
        StackKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownStack { name: s.into() })
    }
}

/// A stack name [`StackKind`]'s `FromStr` does not know; the message lists the stacks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown stack '{name}'; the stacks are {}", StackKind::ALL.map(StackKind::name).join(", "))]
pub struct UnknownStack {
    /// The name given.
    pub name: String,
}
