//! Sub-page mapping (`ftl.mapping_unit_bytes` below the write unit): bad settings are refused
//! by name; sub-page writes are gathered so a unit is programmed once per `slots` pages; an
//! image is opened only with the mapping unit it was written with.

use flash::{preset, DeviceConfig, Flash, Nand};
use ftl::{BufferPolicy, Data, Ftl, FtlConfig, FtlConfigError, FtlError, ReadOut};

/// 8 KiB write units (two 4 KiB planes), as `mqsim-default`'s 8 KiB pages.
fn device() -> DeviceConfig {
    let mut c = preset("tiny").unwrap();
    c.geometry.planes_per_die = 2;
    c.gang.planes_per_unit = 2;
    c.seed = 5;
    c
}

fn config(mapping_unit_bytes: u64) -> FtlConfig {
    FtlConfig {
        mapping_unit_bytes,
        buffer_bytes: 64 << 10,
        ..FtlConfig::default()
    }
}

#[test]
fn mapping_units_that_do_not_fit_are_refused_by_name() {
    for (bytes, what) in [
        (1000, "not a multiple of 512"),
        (3072, "divide the write unit"),
        (16384, "divide the write unit"),
    ] {
        let e = Ftl::open(Nand::in_memory(device()).unwrap(), config(bytes))
            .err()
            .unwrap();
        assert!(
            matches!(e, FtlError::Config(FtlConfigError::MappingUnit { .. })),
            "{bytes}: {e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains("ftl.mapping_unit_bytes") && text.contains(what),
            "{text}"
        );
    }
    // Four 2 KiB slots need a 66-byte record; the device's OOB area is 64 bytes.
    let e = Ftl::open(Nand::in_memory(device()).unwrap(), config(2048))
        .err()
        .unwrap();
    assert!(
        matches!(
            e,
            FtlError::Config(FtlConfigError::SlotsOverOob {
                record_bytes: 66,
                oob_bytes: 64,
                ..
            })
        ),
        "{e:?}"
    );
    // The write unit itself, and 0, are whole-unit mapping.
    for bytes in [0, 8192] {
        let f = Ftl::open(Nand::in_memory(device()).unwrap(), config(bytes)).unwrap();
        assert_eq!((f.unit_bytes(), f.slots_per_unit()), (8192, 1));
    }
}

/// Random 4 KiB writes, 4 KiB-aligned: whole-unit mapping programs one 8 KiB unit per write
/// (and merges the other half first once it is mapped); sub-page mapping one unit per two
/// writes, with no read-modify-write.
#[test]
fn four_kib_writes_program_half_as_many_units() {
    let writes = 2000u64;
    let mut programs = Vec::new();
    for (bytes, policy) in [
        (0, BufferPolicy::Evict),
        (4096, BufferPolicy::Evict),
        (4096, BufferPolicy::WriteBack),
        (4096, BufferPolicy::Destage),
    ] {
        let cfg = FtlConfig {
            buffer_policy: policy,
            ..config(bytes)
        };
        let mut f = Ftl::open(Nand::in_memory(device()).unwrap(), cfg).unwrap();
        let pages = f.capacity_bytes() / 4096 / 4;
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut t = 0;
        for _ in 0..writes {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            t = f
                .write(t, (x % pages) * 4096, 4096, Data::Token(x | 1))
                .unwrap();
        }
        t = f.flush(t).unwrap();
        let s = f.stats();
        programs.push((s.data_units_written, s.rmw_reads));
        f.check().unwrap();
        // Reads return each 4 KiB page's own fingerprint.
        let mut v = Vec::new();
        f.read(t, 0, 8192, ReadOut::Fingerprints(&mut v)).unwrap();
        assert_eq!(v.len(), if bytes == 0 { 1 } else { 2 });
        assert_eq!(f.fml().flash().stats().blocks_erased, 0);
    }
    let (whole, _) = programs[0];
    assert!(whole > writes * 9 / 10, "{programs:?}");
    for &(sub, rmw) in &programs[1..] {
        assert_eq!(rmw, 0, "{programs:?}");
        assert!(sub <= writes / 2 + 1, "{programs:?}");
    }
}

#[test]
fn an_image_opens_only_with_the_mapping_unit_it_was_written_with() {
    let mut f = Ftl::open(Nand::in_memory(device()).unwrap(), config(4096)).unwrap();
    let data = vec![7u8; 4096];
    let t = f.write(0, 4096, 4096, Data::Bytes(&data)).unwrap();
    let t = f.flush(t).unwrap();
    let dev = f.crash(); // no checkpoint: recovery must read the data records
    let e = Ftl::open(dev, config(0)).err().unwrap();
    assert!(
        matches!(&e, FtlError::Corrupted(m) if m.contains("ftl.mapping_unit_bytes")),
        "{e}"
    );
    let mut f = Ftl::open(Nand::in_memory(device()).unwrap(), config(0)).unwrap();
    let t2 = f.write(t, 0, 4096, Data::Bytes(&data)).unwrap();
    f.flush(t2).unwrap();
    let e = Ftl::open(f.crash(), config(4096)).err().unwrap();
    assert!(
        matches!(&e, FtlError::Corrupted(m) if m.contains("ftl.mapping_unit_bytes")),
        "{e}"
    );
}
