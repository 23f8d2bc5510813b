//! `faccessat`: the permission bits as Linux's `generic_permission` reads them for
//! the owner, the group, others and root; search permission on the walk; symbolic
//! links followed or not; bad modes and flags; EROFS on a read-only mount.

mod common;

use common::{fresh, mount, write_file, MIB};
use fs::{Cred, Error, FileSystem, MountOptions};
use libc::{AT_EACCESS, AT_SYMLINK_NOFOLLOW, F_OK, R_OK, W_OK, X_OK};

fn errno(r: Result<(), Error>) -> i32 {
    r.map_or_else(|e| e.errno(), |_| 0)
}

fn setup(fs: &FileSystem) {
    write_file(fs, "/f", b"x");
    fs.chown("/f", Some(1000), Some(100)).unwrap();
    fs.chmod("/f", 0o640).unwrap();
    fs.mkdir("/private", 0o700).unwrap();
    fs.chown("/private", Some(1000), Some(1000)).unwrap();
    write_file(fs, "/private/g", b"y");
    fs.chmod("/private/g", 0o666).unwrap();
    fs.symlink("/nowhere", "/dangling").unwrap();
}

#[test]
fn access_checks_the_bits_of_owner_group_others_and_root() {
    let pm = fresh(16 * MIB);
    let fs = mount(&pm);
    setup(&fs);
    let owner = fs.as_user(&Cred::user(1000, 1000));
    let member = fs.as_user(&Cred::user(2000, 100));
    let other = fs.as_user(&Cred::user(3000, 3000));
    let root = fs.as_user(&Cred::root());
    assert_eq!(errno(owner.faccessat(None, "/f", R_OK | W_OK, 0)), 0);
    assert_eq!(errno(owner.faccessat(None, "/f", X_OK, 0)), libc::EACCES);
    assert_eq!(errno(member.faccessat(None, "/f", R_OK, 0)), 0);
    assert_eq!(errno(member.faccessat(None, "/f", W_OK, 0)), libc::EACCES);
    assert_eq!(errno(other.faccessat(None, "/f", R_OK, 0)), libc::EACCES);
    assert_eq!(errno(other.faccessat(None, "/f", F_OK, AT_EACCESS)), 0);
    // Root reads and writes anything, and executes what has an execute bit or is a
    // directory.
    assert_eq!(errno(root.faccessat(None, "/f", R_OK | W_OK, 0)), 0);
    assert_eq!(errno(root.faccessat(None, "/f", X_OK, 0)), libc::EACCES);
    assert_eq!(errno(root.faccessat(None, "/private", X_OK, 0)), 0);
    // The walk needs search permission: others cannot reach /private/g at all.
    assert_eq!(
        errno(other.faccessat(None, "/private/g", F_OK, 0)),
        libc::EACCES
    );
    assert_eq!(errno(owner.faccessat(None, "/private/g", W_OK, 0)), 0);
    assert_eq!(
        errno(owner.faccessat(None, "/missing", F_OK, 0)),
        libc::ENOENT
    );
    // A dangling link exists only when it is not followed.
    assert_eq!(
        errno(owner.faccessat(None, "/dangling", F_OK, 0)),
        libc::ENOENT
    );
    assert_eq!(
        errno(owner.faccessat(None, "/dangling", F_OK, AT_SYMLINK_NOFOLLOW)),
        0
    );
    assert_eq!(errno(owner.faccessat(None, "/f", 8, 0)), libc::EINVAL);
    assert_eq!(
        errno(owner.faccessat(None, "/f", F_OK, 0x4000_0000)),
        libc::EINVAL
    );
    // The trusted context is never refused.
    assert_eq!(
        errno(fs.faccessat(None, "/private/g", R_OK | W_OK | X_OK, 0)),
        0
    );
    fs.unmount().unwrap();
}

#[test]
fn access_for_writing_on_a_read_only_mount_is_erofs() {
    let pm = fresh(16 * MIB);
    let fs = mount(&pm);
    setup(&fs);
    fs.unmount().unwrap();
    let opts = MountOptions {
        read_only: true,
        ..MountOptions::default()
    };
    let (fs, _) = FileSystem::mount(pm.clone(), opts).unwrap();
    let owner = fs.as_user(&Cred::user(1000, 1000));
    assert_eq!(errno(owner.faccessat(None, "/f", W_OK, 0)), libc::EROFS);
    assert_eq!(errno(owner.faccessat(None, "/f", R_OK, 0)), 0);
}

#[test]
fn access_by_inode_checks_as_faccessat_does() {
    let pm = fresh(16 * MIB);
    let fs = mount(&pm);
    setup(&fs);
    let f = fs.stat("/f").unwrap().ino;
    let private = fs.stat("/private").unwrap().ino;
    let member = fs.as_user(&Cred::user(2000, 100));
    let other = fs.as_user(&Cred::user(3000, 3000));
    let root = fs.as_user(&Cred::root());
    assert_eq!(errno(member.access_ino(f, R_OK)), 0);
    assert_eq!(errno(member.access_ino(f, W_OK)), libc::EACCES);
    assert_eq!(errno(other.access_ino(f, R_OK)), libc::EACCES);
    assert_eq!(errno(root.access_ino(f, R_OK | W_OK)), 0);
    assert_eq!(errno(root.access_ino(f, X_OK)), libc::EACCES);
    assert_eq!(errno(root.access_ino(private, X_OK)), 0);
    assert_eq!(errno(other.access_ino(private, F_OK)), 0);
    assert_eq!(errno(member.access_ino(f, 8)), libc::EINVAL);
    fs.unmount().unwrap();
}
