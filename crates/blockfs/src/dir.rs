//! Directories: linear directory blocks on disk, a hash index in memory.
//!
//! A directory block: magic `b"DB"`, count u16, owner inode u32, CRC-32C u32 (over the used
//! bytes with this field zero), a zero u32, then entries packed one after another: inode u32,
//! kind u8 (1 file, 2 directory), name length u8, the name. Entries are unordered; a removal
//! repacks its block. Directory blocks are never given back while the directory lives (ext4
//! does not shrink directories either).
//!
//! In memory each directory keeps its entries per block and a name -> (inode, block) hash, so a
//! lookup costs no block reads once mounted (the role of ext4's htree and the dentry cache).

use rustc_hash::FxHashMap;
use vfs::le;
use vfs::FileKind;

use crate::error::DecodeError;

const HEADER: usize = 16;
const ENTRY_HEADER: usize = 6;
const MAGIC: &[u8; 2] = b"DB";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub ino: u32,
    pub kind: FileKind,
}

impl Entry {
    fn bytes(&self) -> usize {
        ENTRY_HEADER + self.name.len()
    }
}

/// A directory's contents in memory.
#[derive(Clone, Debug, Default)]
pub struct Dir {
    /// Entries of each directory block, by logical block.
    pub blocks: Vec<Vec<Entry>>,
    /// Bytes each block's entries take (header included).
    pub used: Vec<usize>,
    /// name -> (inode, logical block).
    pub index: FxHashMap<String, (u32, u32)>,
}

impl Dir {
    pub fn get(&self, name: &str) -> Option<u32> {
        self.index.get(name).map(|&(ino, _)| ino)
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// A block with room for an entry named `name`, if any.
    pub fn block_with_room(&self, name: &str, block_bytes: usize) -> Option<u32> {
        let need = ENTRY_HEADER + name.len();
        self.used
            .iter()
            .position(|&u| u + need <= block_bytes)
            .map(|b| b as u32)
    }

    /// Appends an empty directory block.
    pub fn add_block(&mut self) -> u32 {
        self.blocks.push(Vec::new());
        self.used.push(HEADER);
        (self.blocks.len() - 1) as u32
    }

    /// Adds an entry to block `b` (which has room).
    pub fn add(&mut self, b: u32, e: Entry) {
        self.used[b as usize] += e.bytes();
        self.index.insert(e.name.clone(), (e.ino, b));
        self.blocks[b as usize].push(e);
    }

    /// Removes entry `name`; returns its block.
    pub fn remove(&mut self, name: &str) -> Option<u32> {
        let (_, b) = self.index.remove(name)?;
        let list = &mut self.blocks[b as usize];
        let k = list.iter().position(|e| e.name == name)?;
        let e = list.swap_remove(k);
        self.used[b as usize] -= e.bytes();
        Some(b)
    }

    /// Entries sorted by name.
    pub fn sorted(&self) -> Vec<(String, u32)> {
        let mut v: Vec<(String, u32)> = self
            .index
            .iter()
            .map(|(n, &(i, _))| (n.clone(), i))
            .collect();
        v.sort_unstable();
        v
    }

    /// Block `b` as written to disk, for directory inode `owner`.
    pub fn encode_block(&self, b: u32, owner: u32, out: &mut [u8]) {
        out.fill(0);
        let list = &self.blocks[b as usize];
        out[0..2].copy_from_slice(MAGIC);
        out[2..4].copy_from_slice(&(list.len() as u16).to_le_bytes());
        out[4..8].copy_from_slice(&owner.to_le_bytes());
        let mut o = HEADER;
        for e in list {
            out[o..o + 4].copy_from_slice(&e.ino.to_le_bytes());
            out[o + 4] = match e.kind {
                FileKind::File => 1,
                FileKind::Dir => 2,
                FileKind::Symlink | FileKind::Special(_) => {
                    unreachable!("blockfs makes no symbolic links or special files")
                }
            };
            out[o + 5] = e.name.len() as u8;
            out[o + 6..o + 6 + e.name.len()].copy_from_slice(e.name.as_bytes());
            o += e.bytes();
        }
        let crc = crc32c::crc32c(&out[..o]);
        out[8..12].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Decodes a directory block that should belong to directory `owner`.
pub fn decode_block(owner: u32, b: &[u8]) -> Result<Vec<Entry>, DecodeError> {
    if b.len() < HEADER || &b[0..2] != MAGIC {
        return Err(DecodeError::NotDirBlock);
    }
    let count = le::u16_at(b, 2)? as usize;
    let found_owner = le::u32_at(b, 4)?;
    let mut entries = Vec::with_capacity(count);
    let mut o = HEADER;
    for _ in 0..count {
        if o + ENTRY_HEADER > b.len() {
            return Err(DecodeError::EntriesPastBlock);
        }
        let ino = le::u32_at(b, o)?;
        let kind = match b[o + 4] {
            1 => FileKind::File,
            2 => FileKind::Dir,
            kind => return Err(DecodeError::EntryKind { kind }),
        };
        let n = b[o + 5] as usize;
        if o + ENTRY_HEADER + n > b.len() {
            return Err(DecodeError::EntriesPastBlock);
        }
        let name = std::str::from_utf8(&b[o + 6..o + 6 + n])
            .map_err(|_| DecodeError::NameNotUtf8)?
            .to_string();
        entries.push(Entry { name, ino, kind });
        o += ENTRY_HEADER + n;
    }
    let mut copy = b[..o].to_vec();
    copy[8..12].fill(0);
    if crc32c::crc32c(&copy) != le::u32_at(b, 8)? {
        return Err(DecodeError::Checksum);
    }
    if found_owner != owner {
        return Err(DecodeError::Owner { owner: found_owner });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_block_round_trips() {
        let mut d = Dir::default();
        let b = d.add_block();
        for (i, n) in ["a", "bb", "ccc"].iter().enumerate() {
            d.add(
                b,
                Entry {
                    name: n.to_string(),
                    ino: 10 + i as u32,
                    kind: FileKind::File,
                },
            );
        }
        d.remove("bb");
        let mut out = vec![0u8; 1024];
        d.encode_block(b, 7, &mut out);
        let back = decode_block(7, &out).unwrap();
        assert_eq!(back, d.blocks[0]);
        assert!(decode_block(8, &out).is_err());
        out[20] ^= 0x40;
        assert!(decode_block(7, &out).is_err());
        assert_eq!(d.sorted(), vec![("a".into(), 10), ("ccc".into(), 12)]);
    }
}
