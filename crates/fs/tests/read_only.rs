//! Read-only mounts: nothing is written to the region (recovery included: a crash is
//! rolled back in memory), every change is EROFS, and a damaged inode is EUCLEAN for
//! itself alone while the rest of the tree reads back.

mod common;

use std::sync::Arc;

use common::*;
use fs::{Error, FileSystem, MountOptions, OpenFlags};
use pmem::Pmem;

fn read_only() -> MountOptions {
    MountOptions {
        read_only: true,
        ..MountOptions::default()
    }
}

fn image(pm: &Arc<dyn Pmem>) -> Vec<u8> {
    let mut v = vec![0u8; pm.len() as usize];
    pm.read(0, &mut v);
    v
}

fn populate(pm: &Arc<dyn Pmem>) -> FileSystem {
    let fs = mount(pm);
    fs.mkdir("/d", 0o755).unwrap();
    write_file(&fs, "/d/one", &vec![1u8; 9000]);
    write_file(&fs, "/d/two", &vec![2u8; 20000]);
    write_file(&fs, "/top", b"top");
    fs
}

#[test]
fn read_only_mount_reads_changes_nothing_and_refuses_changes() {
    let pm = fresh(8 * MIB);
    populate(&pm).unmount().unwrap();
    let before = image(&pm);
    let (fs, report) = FileSystem::mount(pm.clone(), read_only()).unwrap();
    assert!(report.read_only && report.damage.is_empty());
    assert_eq!(read_file(&fs, "/d/two"), vec![2u8; 20000]);
    assert_eq!(fs.readdir("/d").unwrap().len(), 2);
    let refused = [
        fs.open("/top", OpenFlags::RDWR, 0).map(|_| ()),
        fs.open("/new", OpenFlags::WRONLY | OpenFlags::CREAT, 0o644)
            .map(|_| ()),
        fs.mkdir("/e", 0o755),
        fs.unlink("/top"),
        fs.rename("/top", "/bottom"),
        fs.truncate("/top", 0),
        fs.chmod("/top", 0o600),
        fs.link("/top", "/d/top"),
        fs.symlink("/top", "/s"),
    ];
    for r in refused {
        assert!(matches!(r, Err(Error::ReadOnly)), "{r:?}");
    }
    fs.unmount().unwrap();
    assert!(
        image(&pm) == before,
        "a read-only mount wrote to the region"
    );
}

#[test]
fn read_only_mount_of_a_crashed_image_recovers_in_memory_only() {
    let pm = fresh(8 * MIB);
    let fs = populate(&pm);
    let _held = fs.open("/top", OpenFlags::RDONLY, 0).unwrap();
    fs.unlink("/top").unwrap();
    fs.abandon();
    let before = image(&pm);
    let (fs, report) = FileSystem::mount(pm.clone(), read_only()).unwrap();
    assert!(report.read_only && !report.clean);
    assert_eq!(read_file(&fs, "/d/one"), vec![1u8; 9000]);
    assert!(matches!(fs.stat("/top"), Err(Error::NotFound)));
    fs.unmount().unwrap();
    assert!(
        image(&pm) == before,
        "a read-only mount wrote to the region"
    );
    // A writable mount then recovers for real.
    let fs = mount(&pm);
    assert_eq!(read_file(&fs, "/d/two"), vec![2u8; 20000]);
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
}

#[test]
fn damage_recovery_cannot_repair_falls_back_to_read_only() {
    let pm = fresh(8 * MIB);
    let fs = populate(&pm);
    let ino = fs.lstat("/d/one").unwrap().ino;
    let geo = *fs.geometry();
    fs.abandon();
    // Damage the inode record of /d/one (its checksum no longer holds).
    let off = geo.inode_off(ino) + 33;
    let mut b = [0u8];
    pm.read(off, &mut b);
    pm.write_persist(off, &[b[0] ^ 1]);
    let (fs, report) = FileSystem::mount(pm.clone(), MountOptions::default()).unwrap();
    assert!(report.read_only, "{report:?}");
    assert!(
        report
            .damage
            .iter()
            .any(|d| d.contains(&format!("inode {ino}"))),
        "{report:?}"
    );
    let e = fs.stat("/d/one").unwrap_err();
    assert!(matches!(e, Error::Corrupt(_)), "{e}");
    assert_eq!(e.errno(), libc::EUCLEAN);
    // The listing shows the damaged entry, with no kind, as `ls` shows `?`.
    let listed: Vec<(String, Option<fs::FileKind>)> = fs
        .readdir("/d")
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.kind))
        .collect();
    assert_eq!(
        listed,
        [
            ("one".into(), None),
            ("two".into(), Some(fs::FileKind::File))
        ]
    );
    assert_eq!(read_file(&fs, "/d/two"), vec![2u8; 20000]);
    assert_eq!(read_file(&fs, "/top"), b"top");
    assert!(matches!(
        fs.open("/d/three", OpenFlags::WRONLY | OpenFlags::CREAT, 0o644),
        Err(Error::ReadOnly)
    ));
    fs.unmount().unwrap();
}
