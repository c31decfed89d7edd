//! Reading and writing units: every whole-unit read checked against the payload checksum in its OOB
//! record, the index's view of the flash, and error mapping.

use super::*;

/// The index's view of the flash.
pub(super) struct NodeFlash<'a, F: Flash> {
    pub(super) fml: &'a mut Fml<F>,
    pub(super) placer: &'a mut Placer,
    pub(super) gc: &'a mut GcLog,
    pub(super) stats: &'a mut OsdStats,
    pub(super) released: &'a mut Vec<u32>,
    pub(super) at: Nanos,
    pub(super) done: Nanos,
}

impl<F: Flash> NodeIo for NodeFlash<'_, F> {
    fn read_node(&mut self, addr: NodeAddr, buf: &mut [u8]) -> Result<(), IndexError> {
        self.stats.index_nodes_read += 1;
        match read_checked(self.fml, self.at, addr, buf, INDEX_RECORD_BYTES) {
            Ok((t, Content::Bytes, Record::Index { .. })) => {
                self.done = self.done.max(t);
                Ok(())
            }
            Ok((_, c, r)) => Err(IndexError::Corrupted {
                addr,
                what: format!("unit holds a {} ({c:?}), not an index node", r.kind_name()),
            }),
            Err(BadUnit::Uncorrectable(_)) => Err(IndexError::Uncorrectable { addr }),
            Err(BadUnit::Corrupted(what)) => Err(IndexError::Corrupted { addr, what }),
            Err(BadUnit::Device(e)) => Err(IndexError::Device(e)),
        }
    }

    fn write_node(
        &mut self,
        buf: &[u8],
        level: u8,
        first_key: &IndexKey,
    ) -> Result<NodeAddr, IndexError> {
        let stream = self.placer.choose(&Hint {
            kind: PageKind::Index,
            oid: Oid::default(),
            object_bytes: 0,
            write_count: 0,
            priority: 0,
        });
        let rec = Record::Index {
            level,
            first_key: *first_key,
            seq: self.gc.take_seq(),
        };
        let mut oob = [0u8; RECORD_MAX_BYTES];
        let n = rec.encode(payload_crc(Payload::Bytes(buf)), &mut oob);
        let (v, t) = self
            .fml
            .write(self.at, stream, Payload::Bytes(buf), &oob[..n])?;
        self.done = self.done.max(t);
        self.stats.index_nodes_written += 1;
        Ok(v.0)
    }

    fn free_node(&mut self, addr: NodeAddr) {
        // The durable checkpoint may still reference it: released after the next one.
        self.released.push(addr);
    }
}

pub(super) fn fml_err(e: FmlError) -> OsdError {
    OsdError::Device(e)
}

pub(super) fn index_err(e: IndexError) -> OsdError {
    match e {
        IndexError::Corrupted { addr, what } => OsdError::Corrupted {
            what: format!("index node ({what})"),
            location: format!("unit {addr}"),
        },
        IndexError::Uncorrectable { addr } => OsdError::Uncorrectable {
            what: "index node".into(),
            location: format!("unit {addr}"),
        },
        IndexError::Device(e) => OsdError::Device(e),
        IndexError::Io(m) => OsdError::Internal(m),
    }
}

/// Why a checked read of a unit failed.
#[derive(Debug)]
pub(super) enum BadUnit {
    /// The device failed (a power cut, ...): nothing is known about the unit.
    Device(FmlError),
    /// The flash could not read the unit (ECC failure, torn program), or its payload does not
    /// match the checksum in its OOB record: its contents are lost.
    Uncorrectable(String),
    /// The unit reads erased, or its OOB record is missing, damaged or foreign.
    Corrupted(String),
}

impl BadUnit {
    /// The store's error for a unit described by `what` at write unit `v`.
    pub(super) fn into_osd(self, what: impl std::fmt::Display, v: u32) -> OsdError {
        match self {
            BadUnit::Device(e) => OsdError::Device(e),
            BadUnit::Uncorrectable(why) => OsdError::Uncorrectable {
                what: format!("{what} ({why})"),
                location: format!("unit {v}"),
            },
            BadUnit::Corrupted(why) => OsdError::Corrupted {
                what: format!("{what} ({why})"),
                location: format!("unit {v}"),
            },
        }
    }
}

/// Reads unit `v` whole (`data` one write unit) with the first `oob_len` bytes of its OOB area
/// (the record length of the kind the caller expects: the device time of the read depends on
/// it), and checks the payload against the checksum in the record (docs/FORMAT.md, section 3).
/// Every read of a whole unit goes through here, so no byte reaches a caller unchecked.
pub(super) fn read_checked<F: Flash>(
    fml: &mut Fml<F>,
    at: Nanos,
    v: u32,
    data: &mut [u8],
    oob_len: usize,
) -> Result<(Nanos, Content, Record), BadUnit> {
    let mut oob = [0u8; RECORD_MAX_BYTES];
    let oob = &mut oob[..oob_len];
    let (t, content) = match fml.read(at, Vpa(v), data, oob) {
        Ok(x) => x,
        Err(FmlError::Flash(e @ FlashError::Uncorrectable { .. })) => {
            return Err(BadUnit::Uncorrectable(e.to_string()))
        }
        Err(e) => return Err(BadUnit::Device(e)),
    };
    if content == Content::Erased {
        return Err(BadUnit::Corrupted(
            "reads erased: its program never reached flash".into(),
        ));
    }
    let sealed = match Record::decode_sealed(oob) {
        Ok(Some(s)) => s,
        Ok(None) => return Err(BadUnit::Corrupted("no OOB record".into())),
        Err(e) => return Err(BadUnit::Corrupted(format!("OOB record: {e}"))),
    };
    if content_crc(content, data) != Some(sealed.payload_crc) {
        return Err(BadUnit::Uncorrectable(format!(
            "{} payload checksum mismatch",
            sealed.record.kind_name()
        )));
    }
    Ok((t, content, sealed.record))
}
