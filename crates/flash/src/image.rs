//! A device kept in an image file that another process can reopen. The byte layout is
//! specified in `docs/FORMAT.md` ("Device image"); every multi-byte field is little-endian and
//! every record carries a CRC-32C, so a damaged or foreign file is refused with a clear error.

use codec::le;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::store::PageStore;
use crate::{
    BlockInfo, Content, DeviceConfig, DeviceConfigError, FlashError, Gang, Geometry, PageAddr,
    Payload, PayloadMode, Scheduling, Timing,
};

/// The first 8 bytes of every device image file.
pub const IMAGE_MAGIC: &[u8; 8] = b"OSSDNAND";
/// The version this build writes. Versions 1 (no scheduling word; the device ran `in-order`)
/// and 2 (no content word) are still read.
pub const IMAGE_VERSION: u32 = 3;

/// Which mapping layer an image was formatted for (header word 116 of version 3), so a command
/// for one layer refuses an image of the other instead of reading its records as its own and
/// collecting the other's data as garbage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageContent {
    /// Not recorded: images of versions 1 and 2, or made by [`ImageStore::create`] (tests,
    /// tools that manage the content themselves).
    Unspecified,
    /// The object store (`osd`), possibly with OFS on it.
    ObjectStore,
    /// The page-mapping FTL (`ftl`), exported as a block device.
    BlockFtl,
    /// The page-mapping FTL with the ext4-like block file system (`blockfs`) on it, mounted
    /// with `ossd mount --fs blockfs`. Kept apart from [`ImageContent::BlockFtl`] so that a
    /// raw export (where a real ext4 would be made over blockfs's bytes) refuses it.
    BlockFs,
}

impl ImageContent {
    fn code(self) -> u32 {
        match self {
            ImageContent::Unspecified => 0,
            ImageContent::ObjectStore => 1,
            ImageContent::BlockFtl => 2,
            ImageContent::BlockFs => 3,
        }
    }

    fn from_code(code: u32) -> Option<ImageContent> {
        match code {
            0 => Some(ImageContent::Unspecified),
            1 => Some(ImageContent::ObjectStore),
            2 => Some(ImageContent::BlockFtl),
            3 => Some(ImageContent::BlockFs),
            _ => None,
        }
    }
}

impl std::fmt::Display for ImageContent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ImageContent::Unspecified => "unspecified",
            ImageContent::ObjectStore => "an object store",
            ImageContent::BlockFtl => "a block device (page-mapping FTL)",
            ImageContent::BlockFs => "the ext4-like block file system on the page-mapping FTL",
        })
    }
}
const HEADER_BYTES: u64 = 4096;
const BLOCK_RECORD_BYTES: u64 = 16;
const PAGE_HEADER_BYTES: u64 = 16;

const KIND_FINGERPRINT: u8 = 1;
const KIND_BYTES: u8 = 2;

/// A [`PageStore`] kept in an image file, so another process can reopen the device.
pub struct ImageStore {
    file: File,
    path: PathBuf,
    geometry: Geometry,
    blocks: Option<Vec<BlockInfo>>,
    page_area: u64,
    slot_bytes: u64,
    content: ImageContent,
}

fn err(path: &Path, msg: impl Into<String>) -> FlashError {
    FlashError::Image {
        path: path.display().to_string(),
        msg: msg.into(),
    }
}

struct Writer(Vec<u8>);
impl Writer {
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
}

fn encode_header(c: &DeviceConfig, content: ImageContent) -> Vec<u8> {
    let mut w = Writer(IMAGE_MAGIC.to_vec());
    w.u32(IMAGE_VERSION);
    let g = &c.geometry;
    for v in [
        g.channels,
        g.dies_per_channel,
        g.planes_per_die,
        g.blocks_per_plane,
        g.pages_per_block,
        g.page_size_bytes,
        g.oob_size_bytes,
    ] {
        w.u32(v);
    }
    let t = &c.timing;
    for v in [
        t.read_ns,
        t.program_ns,
        t.erase_ns,
        t.bus_mb_s,
        t.command_ns,
    ] {
        w.u64(v);
    }
    for v in [
        c.gang.planes_per_unit,
        c.gang.dies_per_unit,
        c.gang.units_per_superblock,
    ] {
        w.u32(v);
    }
    w.u32(c.endurance_cycles);
    w.u32(c.factory_bad_ppm);
    w.u32(c.ecc_correctable_bits);
    w.u64(c.seed);
    w.u32(match c.timing.scheduling {
        Scheduling::InOrder => 0,
        Scheduling::Backfill => 1,
    });
    w.u32(content.code());
    let crc = crc32c::crc32c(&w.0);
    w.u32(crc);
    w.0
}

/// Version 1 header length: magic, version, 7 geometry words, 5 timing words, 3 gang words,
/// 3 words, seed, CRC.
const HEADER_LEN_V1: usize = 8 + 4 + 7 * 4 + 5 * 8 + 3 * 4 + 3 * 4 + 8 + 4;
/// Version 2 adds the scheduling word before the CRC.
const HEADER_LEN_V2: usize = HEADER_LEN_V1 + 4;
/// Version 3 adds the content word before the CRC.
const HEADER_LEN: usize = HEADER_LEN_V2 + 4;

fn decode_header(path: &Path, b: &[u8]) -> Result<(DeviceConfig, ImageContent), FlashError> {
    if b.len() < HEADER_LEN_V1 || &b[..8] != IMAGE_MAGIC {
        return Err(err(path, "not an ossd device image (bad magic)"));
    }
    let mut r = le::Le::at(b, 8);
    // The length is checked above; a short header is still an error, never a panic.
    let short = |e: le::Truncated| err(path, format!("header: {e}"));
    let version = r.u32().map_err(short)?;
    let len = match version {
        1 => HEADER_LEN_V1,
        2 => HEADER_LEN_V2,
        IMAGE_VERSION => HEADER_LEN,
        _ => {
            return Err(err(
                path,
                format!("image format version {version} is not supported (this build reads versions 1 to {IMAGE_VERSION})"),
            ))
        }
    };
    let mut crc_bytes = [0u8; 4];
    crc_bytes.copy_from_slice(&b[len - 4..len]);
    let stored_crc = u32::from_le_bytes(crc_bytes);
    if crc32c::crc32c(&b[..len - 4]) != stored_crc {
        return Err(err(
            path,
            "header checksum mismatch: the header is corrupted",
        ));
    }
    let geometry = Geometry {
        channels: r.u32().map_err(short)?,
        dies_per_channel: r.u32().map_err(short)?,
        planes_per_die: r.u32().map_err(short)?,
        blocks_per_plane: r.u32().map_err(short)?,
        pages_per_block: r.u32().map_err(short)?,
        page_size_bytes: r.u32().map_err(short)?,
        oob_size_bytes: r.u32().map_err(short)?,
    };
    let timing = Timing {
        read_ns: r.u64().map_err(short)?,
        program_ns: r.u64().map_err(short)?,
        erase_ns: r.u64().map_err(short)?,
        bus_mb_s: r.u64().map_err(short)?,
        command_ns: r.u64().map_err(short)?,
        scheduling: Scheduling::InOrder,
    };
    let gang = Gang {
        planes_per_unit: r.u32().map_err(short)?,
        dies_per_unit: r.u32().map_err(short)?,
        units_per_superblock: r.u32().map_err(short)?,
    };
    let mut c = DeviceConfig {
        geometry,
        timing,
        gang,
        endurance_cycles: r.u32().map_err(short)?,
        factory_bad_ppm: r.u32().map_err(short)?,
        ecc_correctable_bits: r.u32().map_err(short)?,
        seed: r.u64().map_err(short)?,
        payload: PayloadMode::Full,
    };
    if version >= 2 {
        c.timing.scheduling = match r.u32().map_err(short)? {
            0 => Scheduling::InOrder,
            1 => Scheduling::Backfill,
            other => {
                return Err(err(
                    path,
                    format!(
                        "header: scheduling = {other} is neither 0 (in-order) nor 1 (backfill)"
                    ),
                ))
            }
        };
    }
    let mut content = ImageContent::Unspecified;
    if version >= 3 {
        let code = r.u32().map_err(short)?;
        content = ImageContent::from_code(code).ok_or_else(|| {
            err(
                path,
                format!("header: content = {code} is none of 0 (unspecified), 1 (object store), 2 (block FTL)"),
            )
        })?;
    }
    c.validate()
        .map_err(|e| err(path, format!("header holds an invalid device: {e}")))?;
    if c.geometry.oob_size_bytes > 255 {
        return Err(err(
            path,
            "oob_size_bytes over 255 is not supported in images",
        ));
    }
    Ok((c, content))
}

fn encode_block(info: &BlockInfo) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[0..4].copy_from_slice(&info.erase_count.to_le_bytes());
    let flags = info.bad as u32 | (info.factory_bad as u32) << 1;
    b[4..8].copy_from_slice(&flags.to_le_bytes());
    let crc = crc32c::crc32c(&b[..12]);
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    b
}

impl ImageStore {
    fn layout(geometry: &Geometry) -> (u64, u64) {
        let table = geometry.blocks() as u64 * BLOCK_RECORD_BYTES;
        let page_area = (HEADER_BYTES + table).next_multiple_of(4096);
        let slot =
            PAGE_HEADER_BYTES + geometry.oob_size_bytes as u64 + geometry.page_size_bytes as u64;
        (page_area, slot)
    }

    /// Creates a blank image (all blocks erased) whose content is not recorded; fails if the
    /// file exists.
    pub fn create(path: &Path, config: &DeviceConfig) -> Result<Self, FlashError> {
        Self::create_for(path, config, ImageContent::Unspecified)
    }

    /// Creates a blank image (all blocks erased) recorded as holding `content`; fails if the
    /// file exists.
    pub fn create_for(
        path: &Path,
        config: &DeviceConfig,
        content: ImageContent,
    ) -> Result<Self, FlashError> {
        config.validate()?;
        if config.payload != PayloadMode::Full {
            return Err(FlashError::Config(DeviceConfigError::TimingOnly {
                what: "an image file keeps page contents; use payload = full for an image".into(),
            }));
        }
        if config.geometry.oob_size_bytes > 255 {
            return Err(FlashError::Config(DeviceConfigError::ImageOob {
                oob_size_bytes: config.geometry.oob_size_bytes,
            }));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| err(path, format!("cannot create: {e}")))?;
        let (page_area, slot_bytes) = Self::layout(&config.geometry);
        let len = page_area + config.geometry.pages() * slot_bytes;
        file.set_len(len)
            .map_err(|e| err(path, format!("cannot size to {len} bytes: {e}")))?;
        file.write_all_at(&encode_header(config, content), 0)
            .map_err(|e| err(path, e.to_string()))?;
        let empty = encode_block(&BlockInfo::default());
        let table: Vec<u8> = (0..config.geometry.blocks()).flat_map(|_| empty).collect();
        file.write_all_at(&table, HEADER_BYTES)
            .map_err(|e| err(path, e.to_string()))?;
        Ok(ImageStore {
            file,
            path: path.to_owned(),
            geometry: config.geometry,
            blocks: None,
            page_area,
            slot_bytes,
            content,
        })
    }

    /// What the image was formatted for (`Unspecified` for images older than version 3).
    pub fn content(&self) -> ImageContent {
        self.content
    }

    /// Opens an existing image, returning the device configuration it was created with.
    pub fn open(path: &Path) -> Result<(DeviceConfig, Self), FlashError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| err(path, format!("cannot open: {e}")))?;
        let actual = file.metadata().map_err(|e| err(path, e.to_string()))?.len();
        if actual < HEADER_BYTES {
            return Err(err(
                path,
                format!("not an ossd device image (only {actual} bytes)"),
            ));
        }
        let mut header = vec![0u8; HEADER_LEN];
        file.read_exact_at(&mut header, 0)
            .map_err(|e| err(path, format!("cannot read the header: {e}")))?;
        let (config, content) = decode_header(path, &header)?;
        let g = config.geometry;
        let (page_area, slot_bytes) = Self::layout(&g);
        let expected = page_area + g.pages() * slot_bytes;
        if actual != expected {
            return Err(err(path, format!("file is {actual} bytes, its geometry needs {expected}: truncated or not an image")));
        }
        let mut table = vec![0u8; (g.blocks() as u64 * BLOCK_RECORD_BYTES) as usize];
        file.read_exact_at(&mut table, HEADER_BYTES)
            .map_err(|e| err(path, e.to_string()))?;
        let mut store = ImageStore {
            file,
            path: path.to_owned(),
            geometry: g,
            blocks: None,
            page_area,
            slot_bytes,
            content,
        };
        let mut blocks = Vec::with_capacity(g.blocks() as usize);
        for (i, rec) in table.chunks_exact(16).enumerate() {
            let field = |at: usize| {
                le::u32_at(rec, at).map_err(|e| err(path, format!("block record {i}: {e}")))
            };
            let crc = field(12)?;
            if crc32c::crc32c(&rec[..12]) != crc {
                return Err(err(
                    path,
                    format!("block record {i} is corrupted (checksum mismatch)"),
                ));
            }
            let erase_count = field(0)?;
            let flags = field(4)?;
            let mut info = BlockInfo {
                erase_count,
                next_page: 0,
                bad: flags & 1 != 0,
                factory_bad: flags & 2 != 0,
            };
            info.next_page = store.find_next_page(i as u32, erase_count)?;
            blocks.push(info);
        }
        store.blocks = Some(blocks);
        Ok((config, store))
    }

    fn slot(&self, block: u32, page: u32) -> u64 {
        self.page_area
            + (block as u64 * self.geometry.pages_per_block as u64 + page as u64) * self.slot_bytes
    }

    fn page_epoch(&self, block: u32, page: u32) -> Result<u32, FlashError> {
        let mut h = [0u8; 4];
        self.file
            .read_exact_at(&mut h, self.slot(block, page))
            .map_err(|e| err(&self.path, e.to_string()))?;
        Ok(u32::from_le_bytes(h))
    }

    /// Pages programmed since the last erase carry epoch `erase_count + 1` and form a prefix of
    /// the block, so the write pointer is found by binary search.
    fn find_next_page(&self, block: u32, erase_count: u32) -> Result<u32, FlashError> {
        let want = erase_count.wrapping_add(1);
        let (mut lo, mut hi) = (0u32, self.geometry.pages_per_block);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.page_epoch(block, mid)? == want {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }
}

impl PageStore for ImageStore {
    fn load_blocks(&mut self) -> Result<Option<Vec<BlockInfo>>, FlashError> {
        Ok(self.blocks.take())
    }

    fn put_block(&mut self, index: u32, info: &BlockInfo) -> Result<(), FlashError> {
        self.file
            .write_all_at(
                &encode_block(info),
                HEADER_BYTES + index as u64 * BLOCK_RECORD_BYTES,
            )
            .map_err(|e| err(&self.path, e.to_string()))
    }

    fn put_page(
        &mut self,
        block: u32,
        page: u32,
        epoch: u32,
        payload: Payload<'_>,
        oob: &[u8],
    ) -> Result<(), FlashError> {
        let oob_size = self.geometry.oob_size_bytes as usize;
        let mut head = vec![0xFFu8; PAGE_HEADER_BYTES as usize + oob_size];
        head[0..4].copy_from_slice(&epoch.wrapping_add(1).to_le_bytes());
        let (kind, fp) = match payload {
            Payload::Fingerprint(fp) => (KIND_FINGERPRINT, fp),
            Payload::Bytes(_) => (KIND_BYTES, 0),
        };
        head[4] = kind;
        head[5] = oob.len() as u8;
        head[6..8].fill(0);
        head[8..16].copy_from_slice(&fp.to_le_bytes());
        head[16..16 + oob.len()].copy_from_slice(oob);
        let at = self.slot(block, page);
        // Header, spare area and data in one write: the slot's bytes are contiguous, and one
        // system call per page instead of two. A process killed (kill -9) never leaves half
        // of one write; a machine crash orders no two unsynced writes anyway, so writing the
        // data before the header (which makes the page count as programmed) as two calls
        // would protect nothing more.
        if let Payload::Bytes(data) = payload {
            head.extend_from_slice(data);
        }
        self.file
            .write_all_at(&head, at)
            .map_err(|e| err(&self.path, e.to_string()))
    }

    fn get_page(
        &mut self,
        block: u32,
        page: u32,
        data: &mut [u8],
        oob: &mut [u8],
    ) -> Result<Content, FlashError> {
        let oob_size = self.geometry.oob_size_bytes as usize;
        let head_len = PAGE_HEADER_BYTES as usize + oob_size;
        let at = self.slot(block, page);
        // Header, spare area and data in one read (one system call per page).
        let mut head = vec![0u8; head_len + data.len()];
        self.file
            .read_exact_at(&mut head, at)
            .map_err(|e| err(&self.path, e.to_string()))?;
        let len = (head[5] as usize).min(oob_size);
        oob.fill(0xFF);
        let n = len.min(oob.len());
        oob[..n].copy_from_slice(&head[16..16 + n]);
        match head[4] {
            KIND_FINGERPRINT => {
                Ok(Content::Fingerprint(le::u64_at(&head, 8).map_err(|e| {
                    err(&self.path, format!("page header: {e}"))
                })?))
            }
            KIND_BYTES => {
                data.copy_from_slice(&head[head_len..]);
                Ok(Content::Bytes)
            }
            // A damaged slot header is a damaged page, not a failed device: the read is
            // uncorrectable, as a page beyond its ECC's strength is, and the rest of the image
            // stays usable.
            _ => Err(FlashError::Uncorrectable {
                addr: PageAddr {
                    page,
                    ..self.geometry.block_at(block).page(0)
                },
                bit_errors: 0,
            }),
        }
    }

    fn drop_block(&mut self, _block: u32) {}

    fn sync(&mut self) -> Result<(), FlashError> {
        self.file
            .sync_data()
            .map_err(|e| err(&self.path, e.to_string()))
    }

    fn resident_bytes(&self) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{preset, BlockAddr, DieId, Flash, Nand, PageAddr, ProgramOp, ReadOp};

    fn tmp(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("ossd-image-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    #[test]
    fn a_timing_only_device_is_refused_for_an_image() {
        let path = tmp("timing");
        let c = DeviceConfig {
            payload: PayloadMode::Timing,
            ..preset("tiny").unwrap()
        };
        let e = ImageStore::create(&path, &c).err().unwrap();
        assert!(e.to_string().contains("payload = timing"), "{e}");
        assert!(!path.exists(), "nothing is created");
    }

    #[test]
    fn image_survives_reopen() {
        let path = tmp("reopen");
        let c = preset("tiny").unwrap();
        let a = PageAddr {
            die: DieId(1),
            plane: 0,
            block: 3,
            page: 0,
        };
        let data = vec![0x5Au8; 4096];
        {
            let mut n = Nand::open(c, ImageStore::create(&path, &c).unwrap()).unwrap();
            n.program(
                0,
                &[ProgramOp {
                    addr: a,
                    payload: Payload::Bytes(&data),
                    oob: b"x1",
                }],
            )
            .unwrap();
            let b = PageAddr { page: 1, ..a };
            n.program(
                0,
                &[ProgramOp {
                    addr: b,
                    payload: Payload::Fingerprint(42),
                    oob: b"x2",
                }],
            )
            .unwrap();
            n.erase(
                0,
                &[BlockAddr {
                    die: DieId(0),
                    plane: 0,
                    block: 0,
                }],
            )
            .unwrap();
            n.sync().unwrap();
        }
        let (c2, store) = ImageStore::open(&path).unwrap();
        assert_eq!(c2, c);
        let mut n = Nand::open(c2, store).unwrap();
        assert_eq!(n.block_info(a.block_addr()).next_page, 2);
        assert_eq!(
            n.block_info(BlockAddr {
                die: DieId(0),
                plane: 0,
                block: 0
            })
            .erase_count,
            1
        );
        let mut out = vec![0u8; 4096];
        let mut oob = [0u8; 2];
        let mut ops = [ReadOp::new(a, &mut out, &mut oob)];
        n.read(0, &mut ops).unwrap();
        assert_eq!(ops[0].content, Content::Bytes);
        assert_eq!(out, data);
        assert_eq!(&oob, b"x1");
        // Programming the same page again is still refused after reopen.
        let r = n.program(
            0,
            &[ProgramOp {
                addr: a,
                payload: Payload::Fingerprint(1),
                oob: &[],
            }],
        );
        assert!(r.is_err());
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn scheduling_survives_reopen_and_version_1_reads_as_in_order() {
        let path = tmp("sched");
        let mut c = preset("tiny").unwrap();
        c.timing.scheduling = Scheduling::Backfill;
        drop(ImageStore::create(&path, &c).unwrap());
        let (got, _) = ImageStore::open(&path).unwrap();
        assert_eq!(got, c);
        // The same header written as version 1: no scheduling word, CRC right after the seed.
        let mut v1 = encode_header(&c, ImageContent::Unspecified);
        v1.truncate(HEADER_LEN_V1 - 4);
        v1[8..12].copy_from_slice(&1u32.to_le_bytes());
        let crc = crc32c::crc32c(&v1);
        v1.extend_from_slice(&crc.to_le_bytes());
        v1.resize(HEADER_LEN, 0);
        let (old, content) = decode_header(&path, &v1).unwrap();
        assert_eq!(old.timing.scheduling, Scheduling::InOrder);
        assert_eq!(old.geometry, c.geometry);
        assert_eq!(content, ImageContent::Unspecified);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn the_content_survives_reopen_version_2_reads_as_unspecified_and_unknown_is_refused() {
        let path = tmp("content");
        let c = preset("tiny").unwrap();
        drop(ImageStore::create_for(&path, &c, ImageContent::BlockFtl).unwrap());
        let (_, store) = ImageStore::open(&path).unwrap();
        assert_eq!(store.content(), ImageContent::BlockFtl);
        drop(store);
        std::fs::remove_file(&path).unwrap();
        drop(ImageStore::create_for(&path, &c, ImageContent::BlockFs).unwrap());
        let (_, store) = ImageStore::open(&path).unwrap();
        assert_eq!(store.content(), ImageContent::BlockFs);
        // Version 2: the scheduling word, then the CRC.
        let mut v2 = encode_header(&c, ImageContent::BlockFtl);
        v2.truncate(HEADER_LEN_V2 - 4);
        v2[8..12].copy_from_slice(&2u32.to_le_bytes());
        let crc = crc32c::crc32c(&v2);
        v2.extend_from_slice(&crc.to_le_bytes());
        v2.resize(HEADER_LEN, 0);
        let (old, content) = decode_header(&path, &v2).unwrap();
        assert_eq!(old, c);
        assert_eq!(content, ImageContent::Unspecified);
        // An unknown content code with a valid CRC is refused by value.
        let mut bad = encode_header(&c, ImageContent::BlockFtl);
        bad.truncate(HEADER_LEN - 4);
        bad[HEADER_LEN - 8..HEADER_LEN - 4].copy_from_slice(&7u32.to_le_bytes());
        let crc = crc32c::crc32c(&bad);
        bad.extend_from_slice(&crc.to_le_bytes());
        let e = decode_header(&path, &bad).unwrap_err().to_string();
        assert!(e.contains("content = 7"), "{e}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn foreign_or_damaged_files_are_refused() {
        let path = tmp("bad");
        std::fs::write(&path, b"hello world, not an image").unwrap();
        let e = ImageStore::open(&path).err().unwrap().to_string();
        assert!(e.contains("not an ossd device image"), "{e}");
        std::fs::remove_file(&path).unwrap();

        let c = preset("tiny").unwrap();
        drop(ImageStore::create(&path, &c).unwrap());
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&[99], 8).unwrap(); // version 99
        let e = ImageStore::open(&path).err().unwrap().to_string();
        assert!(e.contains("version 99"), "{e}");
        f.write_all_at(&[1], 8).unwrap();
        f.write_all_at(&[0xEE], 20).unwrap(); // geometry byte: checksum mismatch
        let e = ImageStore::open(&path).err().unwrap().to_string();
        assert!(e.contains("checksum"), "{e}");
        std::fs::remove_file(&path).unwrap();
    }
}
