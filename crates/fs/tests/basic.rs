//! POSIX behaviour of single operations, and persistence across remounts.

mod common;

use common::*;
use fs::{Error, FileKind, OpenFlags, Whence};

#[test]
fn write_read_remount() {
    let pm = fresh(16 * MIB);
    let data: Vec<u8> = (0..50_000u32).map(|i| (i % 253) as u8).collect();
    {
        let fs = mount(&pm);
        fs.mkdir("/d", 0o755).unwrap();
        write_file(&fs, "/d/f", &data);
        assert_eq!(read_file(&fs, "/d/f"), data);
        fs.unmount().unwrap();
    }
    assert_fsck_clean(&pm);
    let fs = mount(&pm);
    assert_eq!(read_file(&fs, "/d/f"), data);
    let st = fs.stat("/d/f").unwrap();
    assert_eq!(st.size, 50_000);
    assert_eq!(st.kind, FileKind::File);
    assert_eq!(st.nlink, 1);
    assert_eq!(fs.stat("/d").unwrap().nlink, 2);
    assert_eq!(fs.stat("/").unwrap().nlink, 3);
}

#[test]
fn partial_overwrites_and_holes() {
    let pm = fresh(16 * MIB);
    let fs = mount(&pm);
    let fd = fs.open("/f", rw_create(), 0o644).unwrap();
    let mut model = vec![0u8; 0];
    let writes: [(u64, usize, u8); 6] = [
        (0, 10, 1),
        (5000, 3000, 2),
        (4090, 20, 3),
        (20_000, 1, 4),
        (3, 12_000, 5),
        (8191, 2, 6),
    ];
    for (off, len, v) in writes {
        let buf = vec![v; len];
        fs.pwrite(fd, &buf, off).unwrap();
        let end = off as usize + len;
        if model.len() < end {
            model.resize(end, 0);
        }
        model[off as usize..end].fill(v);
        let mut back = vec![0xEEu8; model.len() + 100];
        let n = fs.pread(fd, &mut back, 0).unwrap();
        assert_eq!(&back[..n], &model[..]);
    }
    // Shrink into a page, grow again: the cut bytes read back as zeros.
    fs.ftruncate(fd, 4100).unwrap();
    fs.ftruncate(fd, 9000).unwrap();
    model.truncate(4100);
    model.resize(9000, 0);
    let mut back = vec![0u8; 9000];
    assert_eq!(fs.pread(fd, &mut back, 0).unwrap(), 9000);
    assert_eq!(back, model);
    fs.close(fd).unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
    let fs = mount(&pm);
    assert_eq!(read_file(&fs, "/f"), model);
}

#[test]
fn descriptors_positions_and_flags() {
    let pm = fresh(8 * MIB);
    let fs = mount(&pm);
    let fd = fs.open("/a", rw_create(), 0o600).unwrap();
    fs.write(fd, b"hello").unwrap();
    fs.write(fd, b" world").unwrap();
    assert_eq!(fs.lseek(fd, 0, Whence::Cur).unwrap(), 11);
    assert_eq!(fs.lseek(fd, -5, Whence::End).unwrap(), 6);
    let mut b = [0u8; 5];
    assert_eq!(fs.read(fd, &mut b).unwrap(), 5);
    assert_eq!(&b, b"world");
    assert_eq!(fs.read(fd, &mut b).unwrap(), 0);
    assert!(matches!(
        fs.lseek(fd, -1, Whence::Set),
        Err(Error::Invalid(_))
    ));
    fs.close(fd).unwrap();
    assert!(matches!(fs.close(fd), Err(Error::BadFd)));
    assert!(matches!(fs.read(fd, &mut b), Err(Error::BadFd)));

    let app = fs
        .open("/a", OpenFlags::WRONLY | OpenFlags::APPEND, 0)
        .unwrap();
    fs.pwrite(app, b"!", 0).unwrap();
    assert_eq!(read_file(&fs, "/a"), b"hello world!");
    assert!(matches!(fs.read(app, &mut b), Err(Error::BadFd)));
    let ro = fs.open("/a", OpenFlags::RDONLY, 0).unwrap();
    assert!(matches!(fs.write(ro, b"x"), Err(Error::BadFd)));
    assert!(matches!(
        fs.open("/a", rw_create() | OpenFlags::EXCL, 0o644),
        Err(Error::Exists)
    ));
    let t = fs
        .open("/a", OpenFlags::WRONLY | OpenFlags::TRUNC, 0)
        .unwrap();
    assert_eq!(fs.fstat(t).unwrap().size, 0);
    assert!(matches!(
        fs.open("/a", OpenFlags(3), 0),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        fs.open("/a", OpenFlags(0o40000000), 0),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        fs.open("/nope", OpenFlags::RDONLY, 0),
        Err(Error::NotFound)
    ));
    assert_eq!(
        fs.open("/nope", OpenFlags::RDONLY, 0).unwrap_err().errno(),
        libc::ENOENT
    );
    for fd in [app, ro, t] {
        fs.close(fd).unwrap();
    }
}

#[test]
fn namespace_errors_follow_posix() {
    let pm = fresh(8 * MIB);
    let fs = mount(&pm);
    fs.mkdir("/d", 0o755).unwrap();
    write_file(&fs, "/d/f", b"x");
    assert!(matches!(fs.mkdir("/d", 0o755), Err(Error::Exists)));
    assert!(matches!(fs.mkdir("/d/f/g", 0o755), Err(Error::NotDir)));
    assert!(matches!(fs.mkdir("/x/y", 0o755), Err(Error::NotFound)));
    assert!(matches!(fs.rmdir("/d"), Err(Error::NotEmpty)));
    assert_eq!(fs.rmdir("/d").unwrap_err().errno(), libc::ENOTEMPTY);
    assert!(matches!(fs.rmdir("/d/f"), Err(Error::NotDir)));
    assert!(matches!(fs.unlink("/d"), Err(Error::IsDir)));
    assert!(matches!(
        fs.open("/d", OpenFlags::WRONLY, 0),
        Err(Error::IsDir)
    ));
    assert!(matches!(
        fs.open("/d/f/", OpenFlags::RDONLY, 0),
        Err(Error::NotDir)
    ));
    let long = "n".repeat(256);
    assert!(matches!(
        fs.mkdir(&format!("/{long}"), 0o755),
        Err(Error::NameTooLong)
    ));
    fs.mkdir(&format!("/{}", "n".repeat(255)), 0o755).unwrap();
    assert!(matches!(
        fs.stat(&"/a".repeat(3000)),
        Err(Error::PathTooLong)
    ));
    assert!(matches!(fs.link("/d", "/d2"), Err(Error::NotPermitted(_))));
    assert!(matches!(fs.rename("/d", "/d/sub"), Err(Error::Invalid(_))));
    assert!(matches!(fs.rmdir("/"), Err(Error::NotPermitted(_))));
    // . and ..
    assert!(matches!(fs.stat("/d/./f/"), Err(Error::NotDir)));
    assert_eq!(fs.stat("/d/../d/./f").unwrap().size, 1);
    assert_eq!(fs.stat("/..").unwrap().ino, fs::ROOT_INO);
}

#[test]
fn links_symlinks_rename() {
    let pm = fresh(8 * MIB);
    {
        let fs = mount(&pm);
        fs.mkdir("/a", 0o755).unwrap();
        fs.mkdir("/b", 0o755).unwrap();
        write_file(&fs, "/a/f", b"one");
        fs.link("/a/f", "/b/g").unwrap();
        assert_eq!(fs.stat("/a/f").unwrap().nlink, 2);
        fs.symlink("/a/f", "/s").unwrap();
        fs.symlink("../a", "/b/up").unwrap();
        assert_eq!(fs.readlink("/s").unwrap(), "/a/f");
        assert_eq!(read_file(&fs, "/s"), b"one");
        assert_eq!(read_file(&fs, "/b/up/f"), b"one");
        assert_eq!(fs.lstat("/s").unwrap().kind, FileKind::Symlink);
        fs.symlink("/loop2", "/loop1").unwrap();
        fs.symlink("/loop1", "/loop2").unwrap();
        assert!(matches!(fs.stat("/loop1"), Err(Error::Loop)));
        // Rename a file over another: the replaced inode loses a link.
        write_file(&fs, "/b/h", b"two");
        fs.rename("/b/h", "/b/g").unwrap();
        assert_eq!(fs.stat("/a/f").unwrap().nlink, 1);
        assert_eq!(read_file(&fs, "/b/g"), b"two");
        // Move a directory across directories; link counts of both parents follow.
        fs.mkdir("/a/sub", 0o755).unwrap();
        assert_eq!(fs.stat("/a").unwrap().nlink, 3);
        fs.rename("/a/sub", "/b/sub").unwrap();
        assert_eq!(fs.stat("/a").unwrap().nlink, 2);
        assert_eq!(fs.stat("/b").unwrap().nlink, 3);
        assert_eq!(
            fs.stat("/b/sub/..").unwrap().ino,
            fs.stat("/b").unwrap().ino
        );
        // Replace an empty directory with a directory.
        fs.mkdir("/c", 0o755).unwrap();
        fs.rename("/b/sub", "/c").unwrap();
        assert_eq!(fs.stat("/b").unwrap().nlink, 2);
        assert!(matches!(fs.rename("/a/f", "/c"), Err(Error::IsDir)));
        assert!(matches!(fs.rename("/c", "/a/f"), Err(Error::NotDir)));
        let names: Vec<String> = fs
            .readdir("/")
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, ["a", "b", "c", "loop1", "loop2", "s"]);
        fs.unmount().unwrap();
    }
    assert_fsck_clean(&pm);
    let fs = mount(&pm);
    assert_eq!(read_file(&fs, "/b/g"), b"two");
    assert_eq!(fs.readlink("/b/up").unwrap(), "../a");
    assert_eq!(fs.stat("/b").unwrap().nlink, 2);
}

#[test]
fn unlinked_open_file_lives_until_close() {
    let pm = fresh(8 * MIB);
    let fs = mount(&pm);
    write_file(&fs, "/f", &vec![7u8; 100_000]);
    let free0 = fs.usage().free_blocks;
    let fd = fs.open("/f", OpenFlags::RDWR, 0).unwrap();
    fs.unlink("/f").unwrap();
    assert!(matches!(fs.stat("/f"), Err(Error::NotFound)));
    let mut b = vec![0u8; 100_000];
    assert_eq!(fs.pread(fd, &mut b, 0).unwrap(), 100_000);
    assert!(b.iter().all(|&x| x == 7));
    assert_eq!(fs.fstat(fd).unwrap().nlink, 0);
    fs.close(fd).unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
    let fs = mount(&pm);
    assert!(
        fs.usage().free_blocks > free0,
        "blocks of the unlinked file were not freed"
    );
}

#[test]
fn attributes() {
    let pm = fresh(8 * MIB);
    let fs = mount(&pm);
    write_file(&fs, "/f", b"abc");
    fs.chmod("/f", 0o600).unwrap();
    fs.chown("/f", Some(12), None).unwrap();
    fs.utimens("/f", Some(1_000), Some(2_000)).unwrap();
    let st = fs.stat("/f").unwrap();
    assert_eq!(st.mode, libc::S_IFREG | 0o600);
    assert_eq!(st.uid, 12);
    assert_eq!((st.atime_ns, st.mtime_ns), (1_000, 2_000));
    assert_eq!(st.blocks, 8);
    fs.unmount().unwrap();
    let fs = mount(&pm);
    let again = fs.stat("/f").unwrap();
    assert_eq!(
        (again.mode, again.uid, again.atime_ns, again.mtime_ns),
        (st.mode, 12, 1_000, 2_000)
    );
}

#[test]
fn full_region_gives_enospc_without_effect() {
    let pm = fresh(4 * MIB);
    let fs = mount(&pm);
    let fd = fs.open("/big", rw_create(), 0o644).unwrap();
    let chunk = vec![1u8; 256 * 1024];
    let mut written = 0u64;
    let err = loop {
        match fs.write(fd, &chunk) {
            Ok(n) => written += n as u64,
            Err(e) => break e,
        }
    };
    assert!(matches!(err, Error::NoSpace), "{err}");
    assert_eq!(err.errno(), libc::ENOSPC);
    assert_eq!(
        fs.fstat(fd).unwrap().size,
        written,
        "failed write changed the size"
    );
    // Metadata operations fail cleanly too once the pool is exhausted.
    let mut created = 0;
    loop {
        match fs.mkdir(&format!("/d{created}"), 0o755) {
            Ok(()) => created += 1,
            Err(Error::NoSpace) | Err(Error::NoInodes) => break,
            Err(e) => panic!("{e}"),
        }
        if created > 100_000 {
            panic!("never ran out");
        }
    }
    // Freeing space makes room again.
    fs.ftruncate(fd, 0).unwrap();
    fs.close(fd).unwrap();
    fs.rmdir("/d0").unwrap();
    fs.rmdir("/d1").unwrap();
    fs.mkdir("/after", 0o755).unwrap();
    write_file(&fs, "/after/f", &chunk);
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
    let fs = mount(&pm);
    assert!(fs.stat("/after").is_ok());
}

#[test]
fn log_cleaning_bounds_log_growth() {
    let pm = fresh(16 * MIB);
    let fs = mount(&pm);
    let fd = fs.open("/hot", rw_create(), 0o644).unwrap();
    let free0 = fs.usage().free_blocks;
    for i in 0..20_000u32 {
        fs.pwrite(fd, &i.to_le_bytes(), 0).unwrap();
    }
    let used = free0 - fs.usage().free_blocks;
    // 20 000 entries would need 318 log pages without cleaning; what is in use is the
    // compacted log, the data page, and displaced pages awaiting reclamation (< 64).
    assert!(used < 80, "log not cleaned: {used} blocks in use");
    let mut b = [0u8; 4];
    fs.pread(fd, &mut b, 0).unwrap();
    assert_eq!(u32::from_le_bytes(b), 19_999);
    fs.close(fd).unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
    let fs = mount(&pm);
    assert_eq!(read_file(&fs, "/hot"), 19_999u32.to_le_bytes());
}

#[test]
fn dot_and_dotdot_cannot_be_removed_or_renamed() {
    let pm = fresh(8 * MIB);
    let fs = mount(&pm);
    fs.mkdir("/d", 0o755).unwrap();
    fs.mkdir("/d/e", 0o755).unwrap();
    write_file(&fs, "/f", b"x");
    // The kernel's answers (tmpfs gives the same).
    assert!(matches!(fs.rmdir("/d/e/."), Err(Error::Invalid(_))));
    assert!(matches!(fs.rmdir("/d/e/.."), Err(Error::NotEmpty)));
    assert!(matches!(fs.unlink("/d/."), Err(Error::IsDir)));
    assert!(matches!(fs.unlink("/d/.."), Err(Error::IsDir)));
    let busy = |r: fs::Result<()>| matches!(r, Err(e) if e.errno() == libc::EBUSY);
    assert!(busy(fs.rename("/d/.", "/x")));
    assert!(busy(fs.rename("/d/e", "/d/..")));
    assert!(matches!(fs.mkdir("/d/.", 0o755), Err(Error::Exists)));
    assert!(matches!(fs.stat("/f/."), Err(Error::NotDir)));
    assert_eq!(fs.stat("/d/e/.").unwrap().ino, fs.stat("/d/e").unwrap().ino);
    assert!(
        fs.stat("/d/e").is_ok(),
        "a refused removal removed something"
    );
}

/// A device DAX device (or an image reformatted with `mkfs --force`) keeps what was
/// on it: formatting over old bytes gives a file system as clean as a fresh region's.
#[test]
fn format_over_old_contents_is_clean() {
    use fs::{FileSystem, FormatOptions};
    use pmem::{Pmem, Region};
    use std::sync::Arc;
    let pm: Arc<dyn Pmem> = Arc::new(Region::create_temp(16 * MIB).unwrap());
    let junk: Vec<u8> = (0..pm.len()).map(|i| (i * 131 % 251) as u8 | 1).collect();
    pm.write_persist(0, &junk);
    FileSystem::format(&*pm, &FormatOptions::default()).unwrap();
    assert_fsck_clean(&pm);
    let fs = mount(&pm);
    write_file(&fs, "/f", b"after the old bytes");
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
    assert_eq!(read_file(&mount(&pm), "/f"), b"after the old bytes");
}
