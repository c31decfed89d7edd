//! The scheduled files laid end to end: the flat byte space the device-side controller
//! addresses ([`controller::Request`] is a byte range of one flat space), so a request names
//! one file's object and an offset in it.

use crate::error::HostError;
use crate::file::ScheduledFile;

/// A file's place in the flat space.
#[derive(Clone, Copy, Debug)]
pub struct Span {
    /// First flat byte of the file.
    pub start: u64,
    /// The file's bytes in the flat space.
    pub bytes: u64,
    /// The file.
    pub file: ScheduledFile,
}

/// The files laid end to end, in the order they were added.
#[derive(Clone, Debug, Default)]
pub struct Files {
    spans: Vec<Span>,
}

impl Files {
    /// Adds `file` of `bytes` after the last one.
    pub fn push(&mut self, file: ScheduledFile, bytes: u64) {
        let start = self.total();
        self.spans.push(Span { start, bytes, file });
    }

    /// The files, in order.
    pub fn spans(&self) -> &[Span] {
        &self.spans
    }

    /// Bytes of the flat space.
    pub fn total(&self) -> u64 {
        self.spans.last().map_or(0, |s| s.start + s.bytes)
    }

    /// The file holding flat byte `offset`, and the offset within it.
    pub fn locate(&self, offset: u64) -> Option<(&Span, u64)> {
        let i = self.spans.partition_point(|s| s.start + s.bytes <= offset);
        self.spans.get(i).map(|s| (s, offset - s.start))
    }

    /// The (file, offset in it, length) pieces of a flat byte range.
    pub fn pieces(&self, offset: u64, len: u64) -> Result<Vec<(Span, u64, u64)>, HostError> {
        let beyond = HostError::Range {
            offset,
            len,
            why: "beyond the files",
        };
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.total())
            .ok_or(beyond)?;
        let mut out = Vec::new();
        let mut at = offset;
        while at < end {
            let Some((s, off)) = self.locate(at) else {
                return Err(HostError::Range {
                    offset,
                    len,
                    why: "beyond the files",
                });
            };
            let n = (s.bytes - off).min(end - at);
            out.push((*s, off, n));
            at += n;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ofs::Ofs;
    use vfs::FileSystem;

    /// Two files of 1 MiB on a small OFS, laid end to end.
    fn files() -> Files {
        // The one builder's object store, with the FML sized for the device.
        let spec = stacks::StackSpec::new(stacks::StackKind::Ofs);
        let store = spec.object_store(flash::preset("tiny").unwrap()).unwrap();
        let mut ofs = Ofs::format(store, spec.ofs).unwrap();
        let mut files = Files::default();
        for name in ["a", "b"] {
            let ino = ofs.create(vfs::ROOT, name).unwrap();
            files.push(ScheduledFile::open(&mut ofs, ino).unwrap(), 1 << 20);
        }
        files
    }

    #[test]
    fn files_locate_and_split_ranges() {
        let f = files();
        assert_eq!(f.total(), 2 << 20);
        let (s, off) = f.locate((1 << 20) + 5).unwrap();
        assert_eq!((s.file.ino, off), (f.spans()[1].file.ino, 5));
        let p = f.pieces((1 << 20) - 512, 1024).unwrap();
        assert_eq!(
            p.iter().map(|(_, o, n)| (*o, *n)).collect::<Vec<_>>(),
            vec![((1 << 20) - 512, 512), (0, 512)]
        );
        assert!(f.pieces(2 << 20, 1).is_err());
        assert!(f.locate(2 << 20).is_none());
    }
}
