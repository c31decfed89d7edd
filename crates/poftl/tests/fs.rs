//! The thin file layer against `vfs::oracle::MemFs`: the same calls, the same answers.

use flash::{preset, Nand};
use fml::FmlConfig;
use poftl::fs::PoftlFs;
use poftl::{PoftlConfig, PoftlStore};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vfs::oracle::MemFs;
use vfs::{FileData, FileSystem, FsError, ReadInto, ROOT};

fn fs() -> PoftlFs<Nand> {
    let mut c = PoftlConfig {
        parallelism_degree: 4,
        buffer_pages: 32,
        ..PoftlConfig::default()
    };
    let device = c.device(preset("tiny").unwrap()).unwrap();
    c.fml = FmlConfig::for_blocks(flash::gang::Layout::new(&device).superblocks);
    PoftlFs::new(
        PoftlStore::format(Nand::in_memory(device).unwrap(), c).unwrap(),
        "p-OFTL",
    )
}

#[test]
fn agrees_with_the_oracle() {
    let mut p = fs();
    let mut m = MemFs::default();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let dp = p.mkdir(ROOT, "d").unwrap();
    let dm = m.mkdir(ROOT, "d").unwrap();
    let mut files = Vec::new();
    for i in 0..8 {
        let name = format!("f{i}");
        files.push((
            name.clone(),
            p.create(dp, &name).unwrap(),
            m.create(dm, &name).unwrap(),
        ));
    }
    for step in 0..600 {
        let k = rng.gen_range(0..files.len());
        let (name, ip, im) = files[k].clone();
        match rng.gen_range(0..10) {
            0..=4 => {
                let off = rng.gen_range(0..200_000u64);
                let len = rng.gen_range(1..20_000usize);
                let b: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                p.write(ip, off, len as u64, FileData::Bytes(&b)).unwrap();
                m.write(im, off, len as u64, FileData::Bytes(&b)).unwrap();
            }
            5..=6 => {
                let off = rng.gen_range(0..220_000u64);
                let mut a = vec![0u8; 30_000];
                let mut b = vec![0u8; 30_000];
                let na = p.read(ip, off, ReadInto::Bytes(&mut a)).unwrap();
                let nb = m.read(im, off, ReadInto::Bytes(&mut b)).unwrap();
                assert_eq!(na, nb, "step {step}");
                assert!(a[..na as usize] == b[..nb as usize], "step {step}");
            }
            7 => {
                let to = rng.gen_range(0..100_000);
                p.truncate(ip, to).unwrap();
                m.truncate(im, to).unwrap();
            }
            8 => {
                p.unlink(dp, &name).unwrap();
                m.unlink(dm, &name).unwrap();
                files[k].1 = p.create(dp, &name).unwrap();
                files[k].2 = m.create(dm, &name).unwrap();
            }
            _ => p.fsync(ip, true).unwrap(),
        }
        assert_eq!(
            p.stat(files[k].1).unwrap().size,
            m.stat(files[k].2).unwrap().size
        );
    }
    let names = |v: Vec<(String, u64)>| v.into_iter().map(|e| e.0).collect::<Vec<_>>();
    assert_eq!(names(p.readdir(dp).unwrap()), names(m.readdir(dm).unwrap()));
    assert_eq!(p.check().unwrap(), Vec::<String>::new());
    assert!(matches!(p.rmdir(ROOT, "d"), Err(FsError::NotEmpty(_))));
    assert!(matches!(p.unlink(ROOT, "d"), Err(FsError::IsDir(_))));
    assert!(matches!(p.create(dp, "f0"), Err(FsError::Exists(_))));
    assert!(matches!(p.create(ROOT, "a/b"), Err(FsError::Invalid(_))));
}
