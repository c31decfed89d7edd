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
    /// Index nodes are written with a copy beside them ([`OsdConfig::metadata_copies`]).
    pub(super) copies: bool,
    pub(super) at: Nanos,
    pub(super) done: Nanos,
}

impl<F: Flash> NodeIo for NodeFlash<'_, F> {
    fn read_node(&mut self, addr: NodeAddr, buf: &mut [u8]) -> Result<(), IndexError> {
        self.stats.index_nodes_read += 1;
        match read_meta_checked(
            self.fml,
            self.stats,
            (self.at, addr),
            buf,
            INDEX_RECORD_BYTES,
            |r, _| matches!(r, Record::Index { .. }),
        ) {
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
        let (v, t) = program_meta(
            self.fml,
            self.stats,
            self.copies,
            (self.at, stream),
            buf,
            &oob[..n],
        )?;
        self.done = self.done.max(t);
        self.stats.index_nodes_written += 1;
        Ok(v.0)
    }

    fn free_node(&mut self, addr: NodeAddr) {
        // The durable checkpoint may still reference it: released after the next one.
        self.released.push(addr);
    }
}

/// Programs a metadata unit (`page`, record `oob`), followed by its copy in the next unit of
/// the same block when the store keeps two copies of its metadata (docs/FORMAT.md, "Metadata
/// copies"; [`OsdConfig::metadata_copies`]).
pub(super) fn program_meta<F: Flash>(
    fml: &mut Fml<F>,
    stats: &mut OsdStats,
    copies: bool,
    (at, stream): (Nanos, StreamId),
    page: &[u8],
    oob: &[u8],
) -> Result<(Vpa, Nanos), FmlError> {
    let units = if copies { 2 } else { 1 };
    let r = write_meta_stream(fml, stream, units, |fml, stream| {
        if !copies {
            return fml.write(at, stream, Payload::Bytes(page), oob);
        }
        fml.write_with_copy(at, stream, Payload::Bytes(page), oob, |v, out| {
            let mut b = [0u8; RECORD_MAX_BYTES];
            let n = Record::encode_copy(oob, v.0, &mut b);
            out[..n].copy_from_slice(&b[..n]);
            n
        })
    })?;
    if copies {
        stats.metadata_copies_written += 1;
    }
    Ok(r)
}

/// Runs `write` (a metadata unit, or `units` 2 with its copy) into the stream [`meta_stream`]
/// picks, and again into a new pick when it fails for want of a block. A program at the picked
/// block's write pointer can close that block (the page was taken by a misdirected program, or
/// the program failed) and its retry then wants a new block, which may be the last free one;
/// another stream's update block may still have room (`ossd torture --stack osd --faults all
/// --fill 80 --seconds 60 --seed 51 --reliability 1`, seed 15416769939115973377: "recovery
/// failed: no space"). Every retry follows a block closed by the attempt before, so the
/// attempts end.
pub(super) fn write_meta_stream<F: Flash, T>(
    fml: &mut Fml<F>,
    stream: StreamId,
    units: u32,
    mut write: impl FnMut(&mut Fml<F>, StreamId) -> Result<T, FmlError>,
) -> Result<T, FmlError> {
    let mut pick = meta_stream(fml, stream, units);
    // At most one attempt per stream.
    let mut attempts = fml.gc_stream().0;
    loop {
        let written = write(fml, pick);
        attempts = attempts.saturating_sub(1);
        if !matches!(written, Err(FmlError::NoSpace { .. })) || attempts == 0 {
            return written;
        }
        let next = meta_stream(fml, stream, units);
        if next == pick {
            return written;
        }
        pick = next;
    }
}

/// The stream a metadata unit (and its copy: `units` 2) goes to: its own, unless its update
/// block lacks room for them and a new one would take the last free block, which only GC may
/// take, while another stream's update block has room; then that one. Streams share blocks
/// only when the device is that full. Before, the checkpoint that ends recovery (a reboot
/// leaves no update block open, so each metadata stream wants a fresh one) could fail for want
/// of blocks while other streams' blocks had room (`ossd torture --stack osd --faults all
/// --fill 80 --seconds 60 --seed 51 --reliability 1`, seed 5822568649782927991: "recovery
/// failed: no space").
pub(super) fn meta_stream<F: Flash>(fml: &Fml<F>, stream: StreamId, units: u32) -> StreamId {
    let per_block = fml.layout().units_per_superblock;
    let room = |s: StreamId| {
        fml.next_unit(s)
            .is_some_and(|v| per_block - fml.layout().offset_of(v) >= units)
    };
    if fml.free_blocks() > 1 || room(stream) {
        return stream;
    }
    (0..fml.gc_stream().0)
        .map(StreamId)
        .find(|&s| room(s))
        .unwrap_or(stream)
}

/// [`read_checked`] for a metadata unit of the kind `expect` accepts: if unit `v` cannot be
/// read, reads erased (its program went astray), fails its checksum, or holds a unit of another
/// kind (a misdirected program landed on the page its own program left erased), its copy in
/// the next unit answers, if it has one and that reads back whole (docs/FORMAT.md, "Metadata
/// copies"). Otherwise the unit's own error or record is returned, for the caller to refuse.
///
/// `expect` sees the contents too: a shared page may be of the right kind and whole, yet not
/// the one written here (a misdirected program of another descriptor page landed on the page
/// this one's program left erased); its slots then name other objects, and the copy answers.
pub(super) fn read_meta_checked<F: Flash>(
    fml: &mut Fml<F>,
    stats: &mut OsdStats,
    (at, v): (Nanos, u32),
    data: &mut [u8],
    oob_len: usize,
    expect: impl Fn(&Record, &[u8]) -> bool,
) -> Result<(Nanos, Content, Record), BadUnit> {
    let own = read_checked(fml, at, v, data, oob_len);
    match &own {
        Err(BadUnit::Device(_)) => return own,
        Ok((_, Content::Bytes, r)) if expect(r, data) => return own,
        _ => {}
    }
    match read_copy(fml, at, v, data, oob_len) {
        Some(x) if expect(&x.2, data) => {
            stats.metadata_read_from_copy += 1;
            Ok(x)
        }
        _ => {
            if own.is_ok() {
                // The caller refuses the unit it found, with its own contents.
                return read_checked(fml, at, v, data, oob_len);
            }
            own
        }
    }
}

/// Whether a shared page (descriptor or small-object) read for `owner`, a (slot, object), holds
/// that object in that slot; `slot_oid` names the object in a slot of the page's contents.
/// Without an owner any page of the kind is the one asked for.
pub(super) fn slot_holds(
    owner: Option<(u16, Oid)>,
    slot_oid: impl FnOnce(usize) -> Option<Oid>,
) -> bool {
    owner.is_none_or(|(slot, oid)| slot_oid(slot as usize) == Some(oid))
}

/// Where the copy of unit `v` would be: the next unit, if it is in the same block and
/// programmed.
pub(super) fn copy_address<F: Flash>(fml: &Fml<F>, v: u32) -> Option<u32> {
    let layout = fml.layout();
    let next = Vpa(v.checked_add(1)?);
    let id = layout.superblock_of(Vpa(v));
    (layout.superblock_of(next) == id
        && fml
            .blocks()
            .get(id as usize)
            .is_some_and(|b| layout.offset_of(next) < b.next))
    .then_some(next.0)
}

/// The copy of metadata unit `v`, read whole and checked, if it has one.
pub(super) fn read_copy<F: Flash>(
    fml: &mut Fml<F>,
    at: Nanos,
    v: u32,
    data: &mut [u8],
    oob_len: usize,
) -> Option<(Nanos, Content, Record)> {
    let c = copy_address(fml, v)?;
    let mut oob = [0u8; RECORD_MAX_BYTES];
    let oob = &mut oob[..oob_len];
    let (t, content) = fml.read(at, Vpa(c), data, oob).ok()?;
    if content == Content::Erased {
        return None;
    }
    let sealed = Record::decode_copy(oob, v).ok()??;
    (content_crc(content, data) == Some(sealed.payload_crc)).then_some((t, content, sealed.record))
}

pub(super) fn fml_err(e: FmlError) -> OsdError {
    OsdError::Device(e)
}

pub(super) fn index_err(e: IndexError) -> OsdError {
    match e {
        IndexError::Corrupted { addr, what } => OsdError::Corrupted {
            what: format!("index node ({what})"),
            location: format!("unit {addr}"),
            unit: Some(addr),
        },
        IndexError::Uncorrectable { addr } => OsdError::Uncorrectable {
            what: "index node".into(),
            location: format!("unit {addr}"),
            unit: Some(addr),
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
                unit: Some(v),
            },
            BadUnit::Corrupted(why) => OsdError::Corrupted {
                what: format!("{what} ({why})"),
                location: format!("unit {v}"),
                unit: Some(v),
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
        // The copy of the unit before it, which recovery took as the unit itself when that
        // unit's page held another (docs/FORMAT.md, "Metadata copies").
        Err(RecordError::Copy) => match v.checked_sub(1).map(|of| Record::decode_copy(oob, of)) {
            Some(Ok(Some(s))) => s,
            _ => return Err(BadUnit::Corrupted("OOB record: a copy of no unit".into())),
        },
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
