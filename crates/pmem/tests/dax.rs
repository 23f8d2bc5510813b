//! Regions on persistent memory: a device DAX device and a file on a DAX file system.
//!
//! These need the hardware, or a virtual machine with an emulated NVDIMM (CI's
//! persistent-memory VM runs them): each is ignored by default and, asked for with
//! `--ignored`, fails unless its environment variable names what it tests:
//! `EASYIO_TEST_DEVDAX` a device DAX device (`/dev/daxX.Y`) whose contents may be
//! destroyed, `EASYIO_TEST_DAX_DIR` a directory on a file system mounted `-o dax`.

use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use pmem::{Durability, Error, Mapping, Pmem, Region, RegionKind, HEADER_LEN};

fn env_path(var: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!("{var} is not set: it names what this test runs on"),
    }
}

/// The size sysfs gives the device, which a device DAX region takes whole.
fn devdax_size(dev: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let rdev = std::fs::metadata(dev).unwrap().rdev();
    let sys = format!(
        "/sys/dev/char/{}:{}/size",
        libc::major(rdev),
        libc::minor(rdev)
    );
    std::fs::read_to_string(&sys)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
#[ignore = "needs a device DAX device named by EASYIO_TEST_DEVDAX"]
fn device_dax_region_is_mapped_whole_and_survives_reopen() {
    let dev = env_path("EASYIO_TEST_DEVDAX");
    let size = devdax_size(&dev);

    // A device DAX region takes the whole device: another size is refused.
    match Region::create(&dev, size - 2 * 4096) {
        Err(Error::BadSize { .. }) => {}
        other => panic!("a partial device DAX region: {other:?}"),
    }

    let data = pattern(7, 3 * 4096 + 123);
    let tail_off;
    {
        let r = Region::create(&dev, 0).unwrap();
        assert_eq!(r.kind(), RegionKind::DevDax);
        assert_eq!(r.mapping(), Mapping::DevDax);
        assert_eq!(r.durability(), Durability::CpuFlush);
        assert_eq!(r.mapped_len(), size);
        tail_off = r.len() - 4096;
        r.write_persist(4096 + 5, &data);
        r.copy_persist(tail_off, &data[..4096]);
        r.store_u64_persist(0, 0x0123_4567_89ab_cdef);
        // No pages to write back, and no fsync on the device: a fence.
        r.sync().unwrap();
        assert_eq!(r.syncs(), 0);
        // Held exclusively.
        match Region::open(&dev) {
            Err(Error::Busy { .. }) => {}
            other => panic!("a second open of a held device: {other:?}"),
        }
    }
    {
        let r = Region::open(&dev).unwrap();
        assert_eq!(r.mapping(), Mapping::DevDax);
        assert_eq!(r.load_u64(0), 0x0123_4567_89ab_cdef);
        let mut back = vec![0u8; data.len()];
        r.read(4096 + 5, &mut back);
        assert_eq!(back, data);
        let mut tail = vec![0u8; 4096];
        r.read(tail_off, &mut tail);
        assert_eq!(tail, data[..4096]);
    }
    {
        let r = Region::open_read_only(&dev).unwrap();
        assert_eq!(r.durability(), Durability::CpuFlush);
        assert_eq!(r.load_u64(0), 0x0123_4567_89ab_cdef);
    }
    // The device is not a file to remove.
    assert!(pmem::remove(&dev).is_err());
    assert!(dev.exists());
    // Reformatting writes a fresh header over the old contents.
    let r = Region::overwrite(&dev, 0).unwrap();
    assert_eq!(r.mapping(), Mapping::DevDax);
    assert_eq!(r.mapped_len(), size);
}

#[test]
#[ignore = "needs a directory on a DAX file system named by EASYIO_TEST_DAX_DIR"]
fn file_on_dax_is_mapped_with_map_sync_for_writers_and_readers() {
    let dir = env_path("EASYIO_TEST_DAX_DIR");
    let path = dir.join(format!("dax-test-{}.region", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let len = 8 << 20;
    let data = pattern(3, 10_000);
    {
        let r = Region::create(&path, len).unwrap();
        assert_eq!(r.kind(), RegionKind::File);
        assert_eq!(
            (r.mapping(), r.durability()),
            (Mapping::MapSync, Durability::CpuFlush),
            "{} is not on a DAX file system",
            dir.display()
        );
        r.write_persist(100, &data);
        r.copy_persist(1 << 20, &data);
        // A fence on MAP_SYNC writes nothing back to a disk.
        assert_eq!(r.syncs(), 0);
        r.sync().unwrap();
    }
    // The stores are the file's contents: read(2) sees them.
    let f = std::fs::File::open(&path).unwrap();
    let mut back = vec![0u8; data.len()];
    f.read_exact_at(&mut back, HEADER_LEN + 100).unwrap();
    assert_eq!(back, data);
    f.read_exact_at(&mut back, HEADER_LEN + (1 << 20)).unwrap();
    assert_eq!(back, data);
    drop(f);
    {
        // A read-only open maps it with MAP_SYNC too, and says it is persistent.
        let r = Region::open_read_only(&path).unwrap();
        assert_eq!(r.mapping(), Mapping::MapSync);
        assert_eq!(r.durability(), Durability::CpuFlush);
        let mut back = vec![0u8; data.len()];
        r.read(100, &mut back);
        assert_eq!(back, data);
    }
    {
        let r = Region::open(&path).unwrap();
        assert_eq!(r.mapping(), Mapping::MapSync);
        let r2 = Region::overwrite(&path, 0);
        assert!(matches!(r2, Err(Error::Busy { .. })), "{r2:?}");
    }
    pmem::remove(&path).unwrap();

    // A sparse region: its holes are filled on DAX as anywhere else.
    let sparse = dir.join(format!("dax-test-{}-sparse.region", std::process::id()));
    let _ = std::fs::remove_file(&sparse);
    {
        let r = Region::create_sparse(&sparse, len).unwrap();
        assert_eq!(r.mapping(), Mapping::MapSync);
        r.write_persist(r.len() - 4096, &data[..4096]);
    }
    let r = Region::open(&sparse).unwrap();
    assert_eq!(r.mapping(), Mapping::MapSync);
    let mut back = vec![0u8; 4096];
    r.read(r.len() - 4096, &mut back);
    assert_eq!(back, data[..4096]);
    drop(r);
    pmem::remove(&sparse).unwrap();
}
