//! The calls by inode number, as a FUSE server makes them: lookup, getattr, setattr,
//! open_ino, mknod/mkdir/symlink/link/unlink/rmdir/rename in a parent, readdir with
//! cookies, statfs, generations; with a caller's credentials; and renames in opposite
//! directions at once, which the lock plan keeps from deadlocking.

mod common;

use std::sync::Arc;

use common::*;
use fs::{
    Cred, Error, FileKind, OpenFlags, SetAttr, Time, RENAME_EXCHANGE, RENAME_NOREPLACE, ROOT_INO,
};

#[test]
fn the_namespace_by_inode_number() {
    let pm = fresh(8 * MIB);
    let fs = mount(&pm);
    let d = fs.mkdir_in(ROOT_INO, "d", 0o755).unwrap();
    assert_eq!(d.kind, FileKind::Dir);
    assert_eq!(fs.lookup(ROOT_INO, "d").unwrap(), d);
    assert_eq!(fs.getattr(d.ino).unwrap(), d);
    assert_eq!(fs.lookup(d.ino, "..").unwrap().ino, ROOT_INO);
    assert_eq!(fs.lookup(d.ino, ".").unwrap().ino, d.ino);
    let f = fs.mknod_in(d.ino, "f", 0o644, 0).unwrap();
    assert_eq!((f.kind, f.mode, f.nlink), (FileKind::File, 0o100644, 1));
    assert!(matches!(
        fs.mknod_in(d.ino, "f", 0o644, 0),
        Err(Error::Exists)
    ));
    let fifo = fs.mknod_in(d.ino, "p", libc::S_IFIFO | 0o600, 0).unwrap();
    assert_eq!(fifo.kind, FileKind::Fifo);
    let dev = fs
        .mknod_in(d.ino, "c", libc::S_IFCHR | 0o600, libc::makedev(4, 5))
        .unwrap();
    assert_eq!(
        (dev.kind, dev.rdev),
        (FileKind::CharDev, libc::makedev(4, 5))
    );
    assert!(matches!(
        fs.open_ino(dev.ino, OpenFlags::RDONLY),
        Err(Error::NoDevice)
    ));
    let l = fs.symlink_in(d.ino, "l", "f").unwrap();
    assert_eq!(fs.readlink_ino(l.ino).unwrap(), "f");
    assert_eq!(fs.link_ino(f.ino, ROOT_INO, "f2").unwrap().nlink, 2);
    let fd = fs.open_ino(f.ino, OpenFlags::RDWR).unwrap();
    fs.write(fd, b"by number").unwrap();
    // setattr: size, mode, owner and times in one call; ctime moves with it.
    let t = SetAttr {
        mode: Some(0o600),
        uid: Some(7),
        gid: Some(8),
        size: Some(2),
        atime: Some(Time::At(5_000_000_000)),
        mtime: Some(Time::Now),
    };
    let st = fs.setattr(f.ino, &t).unwrap();
    assert_eq!((st.mode, st.uid, st.gid, st.size), (0o100600, 7, 8, 2));
    assert_eq!(st.atime_ns, 5_000_000_000);
    assert!(st.mtime_ns > 5_000_000_000 && st.ctime_ns >= st.mtime_ns);
    let mut buf = [0u8; 16];
    assert_eq!(fs.pread(fd, &mut buf, 0).unwrap(), 2);
    assert_eq!(&buf[..2], b"by");
    // Renames by parent and name, with flags.
    assert!(matches!(
        fs.rename_in(d.ino, "f", ROOT_INO, "f2", RENAME_NOREPLACE),
        Err(Error::Exists)
    ));
    fs.rename_in(d.ino, "p", ROOT_INO, "f2", RENAME_EXCHANGE)
        .unwrap();
    assert_eq!(fs.lookup(ROOT_INO, "f2").unwrap().kind, FileKind::Fifo);
    assert_eq!(fs.lookup(d.ino, "p").unwrap().ino, f.ino);
    // A directory is not swapped with its own parent.
    assert!(matches!(
        fs.rename_in(d.ino, "p", ROOT_INO, "d", RENAME_EXCHANGE),
        Err(Error::Invalid(_))
    ));
    fs.unlink_in(d.ino, "l").unwrap();
    assert!(matches!(fs.rmdir_in(ROOT_INO, "d"), Err(Error::NotEmpty)));
    fs.close(fd).unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
}

#[test]
fn listing_by_cookie_and_statfs() {
    let pm = fresh(8 * MIB);
    let fs = mount(&pm);
    let before = fs.statfs().unwrap();
    let d = fs.mkdir_in(ROOT_INO, "d", 0o755).unwrap();
    for i in 0..10 {
        fs.mknod_in(d.ino, &format!("n{i}"), 0o644, 0).unwrap();
    }
    let fd = fs
        .open("/d", OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0)
        .unwrap();
    let all = fs.readdir_fd(fd, 0).unwrap();
    assert_eq!(all.len(), 12);
    // Resuming after each entry in turn gives the rest.
    for (i, e) in all.iter().enumerate() {
        let rest = fs.readdir_fd(fd, e.offset).unwrap();
        assert_eq!(rest, all[i + 1..].to_vec());
    }
    fs.close(fd).unwrap();
    let after = fs.statfs().unwrap();
    assert_eq!(after.ffree, before.ffree - 11);
    assert_eq!(after.files, before.files);
    assert!(after.bfree <= before.bfree);
    assert_eq!(after.namelen, 255);
}

/// Inodes in use after a mount that read none of the table: counted once, then kept
/// as inodes are made and freed, the same as a count of a fresh mount's.
#[test]
fn statfs_after_a_clean_mount_follows_makes_and_frees() {
    let pm = fresh(8 * MIB);
    let fs = mount(&pm);
    let d = fs.mkdir_in(ROOT_INO, "d", 0o755).unwrap();
    for i in 0..20 {
        fs.mknod_in(d.ino, &format!("n{i}"), 0o644, 0).unwrap();
    }
    fs.unmount().unwrap();
    let counted = |pm: &std::sync::Arc<dyn pmem::Pmem>| {
        let fs = mount(pm);
        let s = fs.statfs().unwrap();
        fs.unmount().unwrap();
        s.ffree
    };
    let at_mount = counted(&pm);
    let fs = mount(&pm);
    assert_eq!(fs.statfs().unwrap().ffree, at_mount);
    // Inodes are read when first named.
    let d = fs.lookup(ROOT_INO, "d").unwrap();
    for i in 0..5 {
        fs.unlink_in(d.ino, &format!("n{i}")).unwrap();
    }
    fs.mkdir_in(ROOT_INO, "e", 0o755).unwrap();
    // An unlinked file still open is freed at its close; an unnamed file too.
    let open = fs.open("/d/n10", OpenFlags::RDONLY, 0).unwrap();
    fs.unlink_in(d.ino, "n10").unwrap();
    let tmp = fs
        .open("/d", OpenFlags::RDWR | OpenFlags::TMPFILE, 0o600)
        .unwrap();
    assert_eq!(fs.statfs().unwrap().ffree, at_mount + 5 - 1 - 1);
    fs.close(open).unwrap();
    fs.close(tmp).unwrap();
    let ffree = fs.statfs().unwrap().ffree;
    assert_eq!(ffree, at_mount + 5 - 1 + 1);
    fs.unmount().unwrap();
    assert_eq!(counted(&pm), ffree);
    assert_fsck_clean(&pm);
}

#[test]
fn a_reused_inode_number_has_another_generation() {
    let pm = fresh(8 * MIB);
    let fs = mount(&pm);
    let a = fs.mknod_in(ROOT_INO, "a", 0o644, 0).unwrap();
    fs.unlink_in(ROOT_INO, "a").unwrap();
    assert!(matches!(fs.getattr(a.ino), Err(Error::NotFound)));
    std::thread::sleep(std::time::Duration::from_millis(20));
    let mut reused = None;
    for i in 0..200 {
        let b = fs.mknod_in(ROOT_INO, &format!("b{i}"), 0o644, 0).unwrap();
        if b.ino == a.ino {
            reused = Some(b);
            break;
        }
    }
    let b = reused.expect("the freed number is reused");
    assert_ne!(b.generation, a.generation);
    // The generation is the inode's own: the same after a remount.
    fs.unmount().unwrap();
    let fs = mount(&pm);
    let name = fs
        .readdir("/")
        .unwrap()
        .into_iter()
        .find(|e| e.ino == b.ino)
        .unwrap()
        .name;
    assert_eq!(fs.lookup(ROOT_INO, &name).unwrap().generation, b.generation);
}

#[test]
fn handle_calls_check_the_callers_credentials() {
    let pm = fresh(8 * MIB);
    let fs = mount(&pm);
    let d = fs.mkdir_in(ROOT_INO, "d", 0o755).unwrap();
    let user = Cred {
        uid: 1000,
        gid: 1000,
        groups: vec![],
        umask: 0o077,
    };
    let u = fs.as_user(&user);
    assert!(matches!(
        u.mknod_in(d.ino, "x", 0o644, 0),
        Err(Error::Access)
    ));
    let home = fs.mkdir_in(ROOT_INO, "home", 0o755).unwrap();
    fs.setattr(
        home.ino,
        &SetAttr {
            uid: Some(1000),
            gid: Some(1000),
            ..SetAttr::default()
        },
    )
    .unwrap();
    let f = u.mknod_in(home.ino, "x", 0o666, 0).unwrap();
    assert_eq!((f.uid, f.gid, f.mode), (1000, 1000, 0o100600));
    assert!(matches!(
        u.setattr(
            f.ino,
            &SetAttr {
                uid: Some(0),
                ..SetAttr::default()
            }
        ),
        Err(Error::NotPermitted(_))
    ));
    let other = fs.as_user(&Cred::user(1001, 1001));
    assert!(matches!(
        other.open_ino(f.ino, OpenFlags::RDONLY),
        Err(Error::Access)
    ));
    assert!(matches!(
        other.setattr(
            f.ino,
            &SetAttr {
                mtime: Some(Time::Now),
                atime: Some(Time::Now),
                ..SetAttr::default()
            }
        ),
        Err(Error::Access)
    ));
    assert!(matches!(other.unlink_in(home.ino, "x"), Err(Error::Access)));
    // The owner's descriptor keeps working whoever asks: checks are at open.
    let fd = u.open_ino(f.ino, OpenFlags::RDWR).unwrap();
    fs.write(fd, b"mine").unwrap();
    fs.close(fd).unwrap();
    u.unlink_in(home.ino, "x").unwrap();
}

#[test]
fn renames_in_opposite_directions_at_once_finish() {
    let pm = fresh(32 * MIB);
    let fs = Arc::new(mount(&pm));
    for d in ["/a", "/b", "/a/sub", "/b/sub"] {
        fs.mkdir(d, 0o755).unwrap();
    }
    write_file(&fs, "/a/x", b"x");
    write_file(&fs, "/b/y", b"y");
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                for i in 0..300 {
                    let (from, to) = if (t + i) % 2 == 0 {
                        ("/a/x", "/b/y")
                    } else {
                        ("/b/y", "/a/x")
                    };
                    fs.renameat2(None, from, None, to, RENAME_EXCHANGE).unwrap();
                    let (s, d) = if t % 2 == 0 {
                        ("/a/sub", "/b/sub")
                    } else {
                        ("/b/sub", "/a/sub")
                    };
                    let _ = fs.renameat2(None, s, None, d, RENAME_EXCHANGE);
                    let _ = fs.rename("/a/sub/m", "/b/sub/m");
                    let _ = fs.rename("/b/sub/m", "/a/sub/m");
                    if i % 50 == 0 {
                        let _ = fs.mkdir("/a/sub/m", 0o755);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut names = vec![read_file(&fs, "/a/x"), read_file(&fs, "/b/y")];
    names.sort();
    assert_eq!(names, vec![b"x".to_vec(), b"y".to_vec()]);
    Arc::try_unwrap(fs).ok().unwrap().unmount().unwrap();
    assert_fsck_clean(&pm);
}
