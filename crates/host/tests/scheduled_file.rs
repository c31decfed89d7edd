//! Scheduled file I/O: a file's reads and writes as OIOs of its data object, and its priority
//! as the object's attribute (OSSD-13 V-B, V-C).

use flash::Nand;
use host::ScheduledFile;
use ofs::Ofs;
use osd::Osd;
use sched::{Direction, Oaq, OaqConfig, Priority};
use vfs::{FileData, FileSystem, FsError, ReadInto, ROOT};

/// OFS on a fresh in-memory `tiny` device.
fn fresh() -> Ofs<osd::ObjectStore<Nand>> {
    let spec = stacks::StackSpec::new(stacks::StackKind::Ofs);
    let store = spec.object_store(flash::preset("tiny").unwrap()).unwrap();
    Ofs::format(store, spec.ofs).unwrap()
}

#[test]
fn a_file_io_is_the_same_range_of_its_object_in_sectors() {
    let mut fs = fresh();
    let ino = fs.create(ROOT, "video").unwrap();
    let f = ScheduledFile::open(&mut fs, ino).unwrap();
    assert_eq!(f.ino, ino);
    assert_eq!(f.object().0, f.oid().object.0);
    let oio = f.oio(Direction::Read, 8192, 65536, None).unwrap();
    assert_eq!(
        (
            oio.oid,
            oio.dir,
            oio.offset_sectors,
            oio.sectors,
            oio.priority
        ),
        (f.object(), Direction::Read, 16, 128, None)
    );
    // Bytes written through the file are the bytes of the object OAQ names.
    fs.write(ino, 0, 4, FileData::Bytes(b"abcd")).unwrap();
    let mut buf = [0u8; 4];
    fs.store_mut().read(f.oid(), 0, &mut buf).unwrap();
    assert_eq!(&buf, b"abcd");
    let mut back = [0u8; 4];
    fs.read(ino, 0, ReadInto::Bytes(&mut back)).unwrap();
    assert_eq!(&back, b"abcd");
}

#[test]
fn bad_ranges_and_directories_are_refused() {
    let mut fs = fresh();
    let ino = fs.create(ROOT, "f").unwrap();
    let f = ScheduledFile::open(&mut fs, ino).unwrap();
    for (off, len) in [(1, 512), (0, 100), (0, 0)] {
        assert!(matches!(
            f.oio(Direction::Write, off, len, None),
            Err(FsError::Invalid(_))
        ));
    }
    assert!(f.oio(Direction::Write, 0, 512 << 32, None).is_err());
    let dir = fs.mkdir(ROOT, "d").unwrap();
    assert!(matches!(
        ScheduledFile::open(&mut fs, dir),
        Err(FsError::IsDir(_))
    ));
    assert!(matches!(fs.set_priority(dir, 1), Err(FsError::IsDir(_))));
    assert!(ScheduledFile::open(&mut fs, 9999).is_err());
}

#[test]
fn a_files_priority_is_its_objects_attribute_and_orders_its_oreqs() {
    let mut fs = fresh();
    let video = fs.create(ROOT, "video").unwrap();
    let other = fs.create(ROOT, "other").unwrap();
    assert_eq!(fs.priority(video).unwrap(), 0);
    fs.set_priority(video, 3).unwrap();
    assert_eq!(fs.priority(video).unwrap(), 3);
    assert_eq!(fs.priority(other).unwrap(), 0);
    // The attribute is the store's, so it survives a sync and a remount.
    fs.sync().unwrap();
    let store = fs.unmount().unwrap();
    let mut fs = ofs::Ofs::mount(store).unwrap();
    assert_eq!(fs.priority(video).unwrap(), 3);
    // Registered with OAQ, it puts the file's OREQs ahead of earlier ones of other files.
    let (v, o) = (
        ScheduledFile::open(&mut fs, video).unwrap(),
        ScheduledFile::open(&mut fs, other).unwrap(),
    );
    let mut q = Oaq::new(OaqConfig::default()).unwrap();
    let p = fs.priority(video).unwrap();
    q.set_object_priority(v.object(), Some(Priority(p)))
        .unwrap();
    q.submit(o.oio(Direction::Write, 0, 4096, None).unwrap())
        .unwrap();
    q.submit(v.oio(Direction::Read, 0, 4096, None).unwrap())
        .unwrap();
    q.submit(v.oio(Direction::Read, 4096, 4096, None).unwrap())
        .unwrap();
    let first = q.dispatch().unwrap();
    assert_eq!(
        (first.oid, first.priority, first.sectors, first.oios.len()),
        (v.object(), Priority(3), 16, 2)
    );
    assert_eq!(q.dispatch().unwrap().oid, o.object());
}
