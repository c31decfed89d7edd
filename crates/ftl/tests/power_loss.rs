//! A read the power cut strikes reports the power loss, not a corrupted page: the caller must
//! remount, and nothing on flash is damaged.

use flash::fault::{CutMode, Faulty};
use flash::{preset, FlashError, Nand};
use fml::FmlError;
use ftl::{Data, Ftl, FtlConfig, FtlError, ReadOut};

#[test]
fn a_read_cut_by_power_loss_reports_the_power_loss() {
    let nand = Faulty::new(Nand::in_memory(preset("tiny").unwrap()).unwrap());
    let mut ftl = Ftl::open(nand, FtlConfig::default()).unwrap();
    let unit = ftl.unit_bytes() as u64;
    let data = vec![7u8; unit as usize];
    let t = ftl.write(0, 0, unit, Data::Bytes(&data)).unwrap();
    let t = ftl.flush(t).unwrap();
    // The cut strikes the next program; every command after it finds the power off.
    ftl.device_mut().cut_power_after(0, CutMode::Clean);
    let cut = ftl
        .write(t, unit, unit, Data::Bytes(&data))
        .and_then(|t| ftl.flush(t));
    assert!(cut.is_err());
    let mut out = vec![0u8; unit as usize];
    let e = ftl
        .read(t, 0, unit, ReadOut::Bytes(&mut out))
        .expect_err("the power is off");
    assert!(
        matches!(e, FtlError::Fml(FmlError::Flash(FlashError::PowerLoss))),
        "{e}"
    );
}
