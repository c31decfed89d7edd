//! A torn program whose record reads back whole over a wrong payload (docs/RELIABILITY.md,
//! finding 38): p-OFTL's data record carries the payload's checksum (record version 3), so a
//! mount passes such a page over for the version before it, and keeps doing so after newer
//! writes and another crash.

use flash::fault::{CutMode, Faulty};
use flash::{preset, Nand};
use fml::FmlConfig;
use poftl::{Data, GroupingPolicy, PoftlConfig, PoftlStore, ReadOut};

fn config() -> (PoftlConfig, flash::DeviceConfig) {
    let mut c = PoftlConfig {
        parallelism_degree: 1,
        grouping: GroupingPolicy::None,
        buffer_pages: 8,
        ..PoftlConfig::default()
    };
    let device = c.device(preset("tiny").unwrap()).unwrap();
    c.fml = FmlConfig::for_blocks(flash::gang::Layout::new(&device).superblocks);
    (c, device)
}

fn read_all<F: flash::Flash>(s: &mut PoftlStore<F>, id: u64) -> Vec<u8> {
    let mut out = vec![0u8; s.size(id).unwrap() as usize];
    s.read(id, 0, ReadOut::Bytes(&mut out)).unwrap();
    out
}

#[test]
fn a_torn_page_with_a_whole_record_is_passed_over_for_good() {
    let (c, device) = config();
    let mut s = PoftlStore::format(Faulty::new(Nand::in_memory(device).unwrap()), c).unwrap();
    let pb = s.page_bytes() as usize;
    s.create(1).unwrap();
    s.write(1, 0, Data::Bytes(&vec![1u8; 4 * pb])).unwrap();
    s.flush().unwrap();
    // The rewrite of page 1 is torn at its program (nothing else is pending, so it is the
    // flush's first command): its record reads back whole, its payload does not.
    s.write(1, pb as u64, Data::Bytes(&vec![2u8; pb])).unwrap();
    s.flash_mut().cut_power_after(0, CutMode::GarbledPayload);
    assert!(s.flush().is_err());
    let mut dev = s.into_flash();
    assert!(dev.counts().garbled_programs > 0, "the cut tore a program");
    dev.restore_power();
    let mut s = PoftlStore::mount(dev, c).unwrap();
    assert_eq!(s.stats().torn_pages_passed_over, 1, "{:?}", s.stats());
    assert_eq!(read_all(&mut s, 1), vec![1u8; 4 * pb], "the flushed bytes");
    s.check().unwrap();
    // Newer pages and another crash: the torn page must not come back.
    s.write(1, 3 * pb as u64, Data::Bytes(&vec![3u8; pb]))
        .unwrap();
    s.flush().unwrap();
    let mut s = PoftlStore::mount(s.into_flash(), c).unwrap();
    let mut want = vec![1u8; 4 * pb];
    want[3 * pb..].fill(3);
    assert_eq!(read_all(&mut s, 1), want, "still the flushed bytes");
    s.check().unwrap();
}
