//! `fsck::repair`, one kind of damage per test: what it drops, removes, fixes and
//! frees, and what it refuses without changing the image.

mod common;

use std::sync::Arc;

use common::*;
use fs::{FileSystem, MountOptions};
use pmem::Pmem;

fn image(pm: &Arc<dyn Pmem>) -> Vec<u8> {
    let mut v = vec![0u8; pm.len() as usize];
    pm.read(0, &mut v);
    v
}

fn flip(pm: &Arc<dyn Pmem>, off: u64) {
    let mut b = [0u8];
    pm.read(off, &mut b);
    pm.write_persist(off, &[b[0] ^ 1]);
}

/// `/keep`, and `/d` holding `/d/one` (9000 bytes) and `/d/sub/two` (20000 bytes).
fn populate(pm: &Arc<dyn Pmem>) -> FileSystem {
    let fs = mount(pm);
    write_file(&fs, "/keep", b"keep");
    fs.mkdir("/d", 0o755).unwrap();
    write_file(&fs, "/d/one", &[1u8; 9000]);
    fs.mkdir("/d/sub", 0o755).unwrap();
    write_file(&fs, "/d/sub/two", &[2u8; 20000]);
    fs
}

/// The free blocks of the image, after a mount that builds its allocator.
fn free_blocks(pm: &Arc<dyn Pmem>) -> u64 {
    let fs = mount(pm);
    let free = fs.usage().free_blocks;
    fs.unmount().unwrap();
    free
}

/// Repairs, then requires a clean image that mounts read-write.
fn repair_clean(pm: &Arc<dyn Pmem>) -> fs::fsck::RepairReport {
    let r = fs::fsck::repair(pm.clone()).unwrap();
    assert!(!r.before.ok(), "nothing was damaged: {r:#?}");
    assert!(r.ok() && r.refused.is_empty(), "{r:#?}");
    assert_fsck_clean(pm);
    let opts = MountOptions {
        read_only_on_damage: false,
        ..MountOptions::default()
    };
    let (fs, report) = FileSystem::mount(pm.clone(), opts).unwrap();
    assert!(!report.read_only);
    fs.unmount().unwrap();
    r
}

#[test]
fn a_file_whose_record_is_damaged_is_dropped_and_its_blocks_freed() {
    let pm = fresh(8 * MIB);
    let fs = populate(&pm);
    let ino = fs.lstat("/d/one").unwrap().ino;
    let geo = *fs.geometry();
    fs.unmount().unwrap();
    // The same image with /d/one removed: the free space repair must give back.
    let twin = fresh(8 * MIB);
    let t = populate(&twin);
    t.unlink("/d/one").unwrap();
    t.unmount().unwrap();
    let want_free = free_blocks(&twin);

    flip(&pm, geo.inode_off(ino) + 33);
    let r = repair_clean(&pm);
    assert!(
        r.actions
            .iter()
            .any(|a| a.starts_with(&format!("dropped inode {ino}"))),
        "{r:#?}"
    );
    let fs = mount(&pm);
    assert!(matches!(fs.lstat("/d/one"), Err(fs::Error::NotFound)));
    assert_eq!(read_file(&fs, "/d/sub/two"), vec![2u8; 20000]);
    assert_eq!(read_file(&fs, "/keep"), b"keep");
    write_file(&fs, "/d/one", b"new");
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
    let fs = mount(&pm);
    fs.unlink("/d/one").unwrap();
    fs.unmount().unwrap();
    assert_eq!(free_blocks(&pm), want_free);
}

#[test]
fn a_damaged_directory_is_dropped_and_what_only_it_reached_kept_in_lost_found() {
    let pm = fresh(8 * MIB);
    let fs = populate(&pm);
    let ino = fs.lstat("/d").unwrap().ino;
    let one = fs.lstat("/d/one").unwrap().ino;
    let sub = fs.lstat("/d/sub").unwrap().ino;
    let geo = *fs.geometry();
    assert_eq!(fs.lstat("/").unwrap().nlink, 3);
    fs.unmount().unwrap();

    flip(&pm, geo.inode_off(ino) + 33);
    let r = repair_clean(&pm);
    for want in [
        format!("dropped inode {ino}"),
        "set the link count of inode 1 to 2".into(),
        "created /lost+found".into(),
        format!("kept inode {one}, which only a dropped directory reached, as /lost+found/#{one}"),
        format!("kept inode {sub}, which only a dropped directory reached, as /lost+found/#{sub}"),
    ] {
        assert!(
            r.actions.iter().any(|a| a.starts_with(&want)),
            "{want}: {r:#?}"
        );
    }
    let fs = mount(&pm);
    // The root lost /d and gained /lost+found.
    assert_eq!(fs.lstat("/").unwrap().nlink, 3);
    let names: Vec<String> = fs
        .readdir("/")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["keep", "lost+found"]);
    assert_eq!(read_file(&fs, "/keep"), b"keep");
    assert_eq!(
        read_file(&fs, &format!("/lost+found/#{one}")),
        vec![1u8; 9000]
    );
    assert_eq!(fs.lstat(&format!("/lost+found/#{one}")).unwrap().nlink, 1);
    assert_eq!(
        read_file(&fs, &format!("/lost+found/#{sub}/two")),
        vec![2u8; 20000]
    );
    // What was kept is an ordinary part of the tree again.
    fs.rename(&format!("/lost+found/#{sub}"), "/sub").unwrap();
    fs.unlink(&format!("/lost+found/#{one}")).unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
}

#[test]
fn a_directory_kept_in_lost_found_loses_its_entries_to_dropped_inodes() {
    let pm = fresh(8 * MIB);
    let fs = populate(&pm);
    let d = fs.lstat("/d").unwrap().ino;
    let sub = fs.lstat("/d/sub").unwrap().ino;
    let two = fs.lstat("/d/sub/two").unwrap().ino;
    let geo = *fs.geometry();
    fs.unmount().unwrap();
    flip(&pm, geo.inode_off(d) + 33);
    flip(&pm, geo.inode_off(two) + 33);
    let r = repair_clean(&pm);
    assert!(
        r.actions
            .iter()
            .any(|a| a == &format!("removed entry \"two\" (inode {two}) from directory {sub}")),
        "{r:#?}"
    );
    let fs = mount(&pm);
    assert!(fs
        .readdir(&format!("/lost+found/#{sub}"))
        .unwrap()
        .is_empty());
    fs.unmount().unwrap();
}

#[test]
fn an_entry_naming_a_free_inode_is_removed_after_a_crash() {
    let pm = fresh(8 * MIB);
    let fs = populate(&pm);
    let ino = fs.lstat("/d/one").unwrap().ino;
    let geo = *fs.geometry();
    fs.abandon();
    // Its valid word (the record's first) cleared: the inode is free, the entry stays.
    pm.store_u64_persist(geo.inode_off(ino), 0);
    let before = fs::fsck::check(&*pm).unwrap();
    assert!(
        before
            .problems
            .iter()
            .any(|p| p.contains(&format!("names inode {ino}, which is not in use"))),
        "{before:#?}"
    );
    let r = repair_clean(&pm);
    assert!(
        r.actions.iter().any(|a| a
            == &format!("removed entry \"one\" (inode {ino}) from directory {}", {
                let fs = mount(&pm);
                let d = fs.lstat("/d").unwrap().ino;
                fs.unmount().unwrap();
                d
            })),
        "{r:#?}"
    );
    let fs = mount(&pm);
    assert_eq!(read_file(&fs, "/d/sub/two"), vec![2u8; 20000]);
    fs.unmount().unwrap();
}

#[test]
fn damaged_completion_record_headers_are_rewritten_with_their_counters() {
    let pm = fresh(8 * MIB);
    let fs = populate(&pm);
    let geo = *fs.geometry();
    fs.unmount().unwrap();
    let counters = engine::read_counters(&*pm, geo.records_off(), geo.channels as usize).unwrap();
    // The magic of channel 1's record.
    flip(&pm, geo.records_off() + engine::RECORD_BYTES + 8);
    assert!(engine::read_counters(&*pm, geo.records_off(), geo.channels as usize).is_err());
    let r = repair_clean(&pm);
    assert!(
        r.actions.iter().any(|a| a.contains("completion records")),
        "{r:#?}"
    );
    assert_eq!(
        engine::read_counters(&*pm, geo.records_off(), geo.channels as usize).unwrap(),
        counters
    );
}

#[test]
fn a_damaged_primary_superblock_is_rewritten_from_the_replica() {
    let pm = fresh(8 * MIB);
    populate(&pm).unmount().unwrap();
    flip(&pm, 20);
    let r = repair_clean(&pm);
    assert!(r.actions.iter().any(|a| a.contains("superblock")), "{r:#?}");
    let mut sb = vec![0u8; 128];
    let mut replica = vec![0u8; 128];
    pm.read(0, &mut sb);
    pm.read(fs::BLOCK_SIZE, &mut replica);
    assert_eq!(sb, replica);
}

#[test]
fn a_damaged_root_is_refused_and_the_image_left_unchanged() {
    let pm = fresh(8 * MIB);
    let fs = populate(&pm);
    let geo = *fs.geometry();
    fs.unmount().unwrap();
    flip(&pm, geo.inode_off(fs::ROOT_INO) + 33);
    let before = image(&pm);
    let r = fs::fsck::repair(pm.clone()).unwrap();
    assert!(!r.ok());
    assert!(
        r.refused.iter().any(|w| w.contains("root directory")),
        "{r:#?}"
    );
    assert!(r.actions.is_empty());
    assert!(image(&pm) == before, "a refused repair changed the image");
}

#[test]
fn both_superblocks_damaged_is_refused_and_the_image_left_unchanged() {
    let pm = fresh(8 * MIB);
    populate(&pm).unmount().unwrap();
    flip(&pm, 20);
    flip(&pm, fs::BLOCK_SIZE + 20);
    let before = image(&pm);
    let r = fs::fsck::repair(pm.clone()).unwrap();
    assert!(!r.ok());
    assert!(
        r.refused.iter().any(|w| w.contains("no superblock reads")),
        "{r:#?}"
    );
    assert!(image(&pm) == before, "a refused repair changed the image");
}

#[test]
fn an_undamaged_image_is_left_alone() {
    let pm = fresh(8 * MIB);
    populate(&pm).unmount().unwrap();
    let before = image(&pm);
    let r = fs::fsck::repair(pm.clone()).unwrap();
    assert!(r.ok() && r.actions.is_empty() && r.refused.is_empty());
    assert!(image(&pm) == before);
}
