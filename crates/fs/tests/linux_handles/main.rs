//! The handle, `*at`, attribute, special-file, rename-flag, path-limit and credential
//! calls run twice: on the host's kernel (a directory in the temporary file system,
//! from a forked child that becomes the caller's uid, gid and groups, its results
//! sent back through a pipe) and on easyio (a session with the same credentials).
//! Every return value and errno must agree.

#[path = "../common/mod.rs"]
mod common;
mod host;
mod ours;

use common::*;
use fs::Cred;

/// A descriptor slot of a scenario (the same slot on both sides).
pub type Slot = usize;

/// A time argument of `utimensat`.
#[derive(Clone, Copy, Debug)]
pub enum T {
    Now,
    Omit,
    /// Seconds since the epoch.
    At(i64),
}

/// One call; paths starting with '/' are from the scenario's root, others from the
/// handle given (`None`: the root).
#[derive(Clone, Debug)]
pub enum Op {
    Mkdir(String, u32),
    MkdirAt(Option<Slot>, String, u32),
    /// Create (`O_CREAT|O_WRONLY|O_TRUNC`), write, close.
    Put(String, u32, &'static [u8]),
    Open(Slot, Option<Slot>, String, i32, u32),
    Close(Slot),
    Write(Slot, &'static [u8]),
    /// Read up to n bytes at offset 0.
    Pread(Slot, usize),
    Stat(String),
    Lstat(String),
    Fstat(Slot),
    FstatAt(Option<Slot>, String, i32),
    Chmod(String, u32),
    Fchmod(Slot, u32),
    FchmodAt(Option<Slot>, String, u32, i32),
    /// uid, gid: -1 leaves one.
    Chown(String, i64, i64),
    Lchown(String, i64, i64),
    Fchown(Slot, i64, i64),
    FchownAt(Option<Slot>, String, i64, i64, i32),
    UtimensAt(Option<Slot>, String, T, T, i32),
    Futimens(Slot, T, T),
    /// atime and mtime in seconds.
    Times(String),
    Truncate(String, u64),
    Ftruncate(Slot, u64),
    Unlink(String),
    Rmdir(String),
    UnlinkAt(Option<Slot>, String, i32),
    Link(String, String),
    LinkAt(Option<Slot>, String, Option<Slot>, String, i32),
    Symlink(&'static str, String),
    SymlinkAt(&'static str, Option<Slot>, String),
    Readlink(String),
    ReadlinkAt(Option<Slot>, String),
    Rename(String, String),
    RenameAt2(Option<Slot>, String, Option<Slot>, String, u32),
    Mknod(String, u32, u64),
    MknodAt(Option<Slot>, String, u32, u64),
    /// Names in a directory, sorted, without `.` and `..`.
    List(String),
    /// `setxattr(path, name, value, flags)`.
    SetXattr(String, &'static str, &'static [u8], i32),
    /// `getxattr(path, name)` into a buffer of n bytes (0: the size only).
    GetXattr(String, &'static str, usize),
    /// `fgetxattr` into a buffer of n bytes.
    FgetXattr(Slot, &'static str, usize),
    /// `fsetxattr`.
    FsetXattr(Slot, &'static str, &'static [u8], i32),
    /// `listxattr(path)` into a buffer of n bytes: the length and the names, sorted
    /// (each file system lists in its own order).
    ListXattr(String, usize),
    /// `removexattr`.
    RemoveXattr(String, &'static str),
    /// `fallocate(fd, mode, off, len)`.
    Fallocate(Slot, i32, u64, u64),
    /// `lseek(fd, off, whence)` with a raw `whence` (`SEEK_DATA`, `SEEK_HOLE`, ...).
    Seek(Slot, i64, i32),
}

/// How a `listxattr` answer reads in an outcome: its length, then its names sorted.
pub fn describe_list(len: usize, bytes: &[u8]) -> String {
    let mut names: Vec<&[u8]> = bytes.split(|&b| b == 0).filter(|n| !n.is_empty()).collect();
    names.sort();
    let names: Vec<String> = names
        .iter()
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    format!("{len}: {}", names.join(" "))
}

/// What a call gave: its result described, or its errno.
pub type Outcome = Result<String, i32>;

/// How a stat reads in an outcome: kind and mode, links, owner, size (regular files
/// and links only: directory sizes differ between file systems) and device.
pub fn describe_stat(mode: u32, nlink: u64, uid: u32, gid: u32, size: u64, rdev: u64) -> String {
    let kind = mode & libc::S_IFMT;
    let size = if kind == libc::S_IFREG || kind == libc::S_IFLNK {
        size.to_string()
    } else {
        "-".into()
    };
    format!("mode {mode:o} nlink {nlink} owner {uid}:{gid} size {size} rdev {rdev}")
}

/// A scenario: calls made as root (umask 0), then calls made as `cred`.
pub struct Scenario {
    pub name: &'static str,
    pub setup: Vec<Op>,
    pub cred: Cred,
    pub steps: Vec<Op>,
}

fn agree(s: Scenario) {
    let host = host::run(&s);
    let ours = ours::run(&s);
    if std::env::var_os("EASYIO_SHOW_OUTCOMES").is_some() {
        for (op, h) in s.steps.iter().zip(&host) {
            eprintln!("{}: {op:?} -> {h}", s.name);
        }
    }
    for (i, (op, (h, o))) in s.steps.iter().zip(host.iter().zip(&ours)).enumerate() {
        assert_eq!(
            o, h,
            "{}: step {i} {op:?}: easyio (left) and the kernel (right) differ",
            s.name
        );
    }
    assert_eq!(ours.len(), host.len(), "{}", s.name);
}

fn p(s: &str) -> String {
    s.to_string()
}

fn user(uid: u32, gid: u32, groups: &[u32]) -> Cred {
    Cred {
        uid,
        gid,
        groups: groups.to_vec(),
        umask: 0o022,
    }
}

/// A `Times` outcome. A time within an hour of now reads "now": the kernel's run and
/// easyio's are a moment apart and may fall either side of a second; the times the
/// scenarios set are decades away from it.
fn times(atime: i64, mtime: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let show = |t: i64| {
        if (t - now).abs() < 3600 {
            "now".to_string()
        } else {
            t.to_string()
        }
    };
    format!("atime {} mtime {}", show(atime), show(mtime))
}

const RW: i32 = libc::O_RDWR;
const RO: i32 = libc::O_RDONLY;
const WO: i32 = libc::O_WRONLY;

#[test]
fn attribute_calls_on_open_files_unlinked_or_renamed_agree() {
    use Op::*;
    for cred in [Cred::root(), user(1000, 1000, &[])] {
        agree(Scenario {
            name: "unlinked-open",
            setup: vec![Mkdir(p("/d"), 0o777)],
            cred: cred.clone(),
            steps: vec![
                Put(p("/d/f"), 0o644, b"hello"),
                Open(0, None, p("/d/f"), RW, 0),
                Unlink(p("/d/f")),
                Fstat(0),
                Fchmod(0, 0o600),
                Fchown(0, -1, cred.gid as i64),
                Futimens(0, T::At(1_000_000), T::Omit),
                Ftruncate(0, 2),
                Fstat(0),
                Pread(0, 10),
                Write(0, b"xyz"),
                Fstat(0),
                Stat(p("/d/f")),
                Close(0),
                Put(p("/d/g"), 0o640, b"abc"),
                Open(1, None, p("/d/g"), RO, 0),
                Rename(p("/d/g"), p("/d/h")),
                Fchmod(1, 0o604),
                Ftruncate(1, 0),
                Fstat(1),
                Stat(p("/d/h")),
                Times(p("/d/h")),
                Close(1),
            ],
        });
    }
}

#[test]
fn symlink_no_follow_variants_agree() {
    use Op::*;
    agree(Scenario {
        name: "nofollow",
        setup: vec![],
        cred: Cred::root(),
        steps: vec![
            Put(p("/t"), 0o644, b"target"),
            Symlink("t", p("/l")),
            Symlink("nowhere", p("/dangling")),
            Lstat(p("/l")),
            Stat(p("/l")),
            Stat(p("/dangling")),
            Lchown(p("/l"), 5, 6),
            Lstat(p("/l")),
            Stat(p("/t")),
            Chown(p("/l"), 7, 8),
            Stat(p("/t")),
            Lstat(p("/l")),
            UtimensAt(
                None,
                p("l"),
                T::At(100),
                T::At(200),
                libc::AT_SYMLINK_NOFOLLOW,
            ),
            Times(p("/t")),
            UtimensAt(None, p("l"), T::At(300), T::Omit, 0),
            Times(p("/t")),
            FstatAt(None, p("l"), libc::AT_SYMLINK_NOFOLLOW),
            FstatAt(None, p("l"), 0),
            FchmodAt(None, p("l"), 0o600, libc::AT_SYMLINK_NOFOLLOW),
            FchmodAt(None, p("l"), 0o600, 0),
            Stat(p("/t")),
            Open(0, None, p("/l"), RO | libc::O_NOFOLLOW, 0),
            Open(0, None, p("/l"), RO | libc::O_PATH | libc::O_NOFOLLOW, 0),
            Fstat(0),
            ReadlinkAt(Some(0), p("")),
            FstatAt(Some(0), p(""), libc::AT_EMPTY_PATH),
            Pread(0, 4),
            Close(0),
            Open(1, None, p("/t"), RO | libc::O_DIRECTORY, 0),
            Open(1, None, p("/l"), RO | libc::O_DIRECTORY, 0),
            Open(1, None, p("/dangling"), RO | libc::O_NOFOLLOW, 0),
            FchownAt(None, p("dangling"), 9, 9, libc::AT_SYMLINK_NOFOLLOW),
            Lstat(p("/dangling")),
            LinkAt(None, p("l"), None, p("l2"), 0),
            Lstat(p("/l2")),
            LinkAt(None, p("l"), None, p("t2"), libc::AT_SYMLINK_FOLLOW),
            Lstat(p("/t2")),
            Readlink(p("/t")),
        ],
    });
}

#[test]
fn at_calls_from_directory_handles_agree() {
    use Op::*;
    agree(Scenario {
        name: "at-calls",
        setup: vec![Mkdir(p("/a"), 0o777), Mkdir(p("/a/b"), 0o777)],
        cred: user(1000, 1000, &[]),
        steps: vec![
            Open(0, None, p("/a"), RO | libc::O_DIRECTORY, 0),
            Open(1, Some(0), p("b"), libc::O_PATH, 0),
            MkdirAt(Some(1), p("c"), 0o750),
            FstatAt(Some(1), p("c"), 0),
            Open(2, Some(1), p("c/f"), RW | libc::O_CREAT, 0o666),
            Write(2, b"data"),
            FstatAt(Some(2), p(""), libc::AT_EMPTY_PATH),
            FstatAt(Some(2), p("x"), 0),
            Close(2),
            SymlinkAt("c/f", Some(1), p("s")),
            ReadlinkAt(Some(1), p("s")),
            LinkAt(Some(1), p("c/f"), Some(0), p("hard"), 0),
            FstatAt(Some(0), p("hard"), 0),
            RenameAt2(Some(0), p("hard"), Some(1), p("moved"), 0),
            List(p("/a")),
            List(p("/a/b")),
            UnlinkAt(Some(1), p("c"), 0),
            UnlinkAt(Some(1), p("c"), libc::AT_REMOVEDIR),
            UnlinkAt(Some(1), p("c/f"), libc::AT_REMOVEDIR),
            UnlinkAt(Some(1), p("c/f"), 0),
            UnlinkAt(Some(1), p("c"), libc::AT_REMOVEDIR),
            MknodAt(Some(1), p("fifo"), libc::S_IFIFO | 0o644, 0),
            FstatAt(Some(1), p("fifo"), 0),
            Pread(1, 4),
            Fchmod(1, 0o700),
            FstatAt(Some(0), p(".."), 0),
            FstatAt(Some(0), p("/a/b"), 0),
            Close(1),
            FstatAt(Some(1), p("b"), 0),
        ],
    });
}

#[test]
fn special_files_agree() {
    use Op::*;
    let chr = libc::makedev(1, 7);
    let blk = libc::makedev(7, 200);
    agree(Scenario {
        name: "special-root",
        setup: vec![],
        cred: Cred::root(),
        steps: vec![
            Mknod(p("/fifo"), libc::S_IFIFO | 0o640, 0),
            Mknod(p("/sock"), libc::S_IFSOCK | 0o600, 0),
            Mknod(p("/chr"), libc::S_IFCHR | 0o620, chr),
            Mknod(p("/blk"), libc::S_IFBLK | 0o660, blk),
            Mknod(p("/reg"), 0o644, 0),
            Mknod(p("/dir"), libc::S_IFDIR | 0o755, 0),
            Mknod(p("/fifo"), libc::S_IFIFO | 0o640, 0),
            Lstat(p("/fifo")),
            Lstat(p("/sock")),
            Lstat(p("/chr")),
            Lstat(p("/blk")),
            Lstat(p("/reg")),
            List(p("/")),
            Open(0, None, p("/sock"), RW, 0),
            Open(0, None, p("/fifo"), RO | libc::O_PATH, 0),
            Fstat(0),
            Close(0),
            Truncate(p("/fifo"), 0),
            Chmod(p("/chr"), 0o600),
            Lstat(p("/chr")),
            Rename(p("/blk"), p("/blk2")),
            Link(p("/fifo"), p("/fifo2")),
            Lstat(p("/fifo")),
            Unlink(p("/fifo")),
            Unlink(p("/sock")),
            List(p("/")),
        ],
    });
    agree(Scenario {
        name: "special-user",
        setup: vec![Mkdir(p("/u"), 0o777)],
        cred: user(1000, 1000, &[]),
        steps: vec![
            Mknod(p("/u/fifo"), libc::S_IFIFO | 0o666, 0),
            Mknod(p("/u/sock"), libc::S_IFSOCK | 0o666, 0),
            Mknod(p("/u/chr"), libc::S_IFCHR | 0o666, chr),
            Mknod(p("/u/blk"), libc::S_IFBLK | 0o666, blk),
            Lstat(p("/u/fifo")),
            Lstat(p("/u/sock")),
            List(p("/u")),
        ],
    });
}

#[test]
fn rename_flags_agree() {
    use Op::*;
    let nr = libc::RENAME_NOREPLACE;
    let ex = libc::RENAME_EXCHANGE;
    agree(Scenario {
        name: "rename-flags",
        setup: vec![],
        cred: Cred::root(),
        steps: vec![
            Mkdir(p("/a"), 0o755),
            Mkdir(p("/b"), 0o755),
            Mkdir(p("/a/sub"), 0o755),
            Put(p("/a/f"), 0o644, b"f"),
            Put(p("/b/g"), 0o644, b"gg"),
            RenameAt2(None, p("a/f"), None, p("b/g"), nr),
            RenameAt2(None, p("a/f"), None, p("b/new"), nr),
            RenameAt2(None, p("b/new"), None, p("a/f"), nr | ex),
            RenameAt2(None, p("b/new"), None, p("a/none"), ex),
            RenameAt2(None, p("b/new"), None, p("b/g"), ex),
            Stat(p("/b/new")),
            Stat(p("/b/g")),
            RenameAt2(None, p("a/sub"), None, p("b/g"), ex),
            Lstat(p("/a")),
            Lstat(p("/b")),
            Lstat(p("/a/sub")),
            Lstat(p("/b/g")),
            List(p("/a")),
            List(p("/b")),
            RenameAt2(None, p("b"), None, p("b/g/x"), ex),
            Mkdir(p("/b/g/x"), 0o755),
            RenameAt2(None, p("b"), None, p("b/g/x"), ex),
            RenameAt2(None, p("b/g/x"), None, p("b"), ex),
            RenameAt2(None, p("b/new"), None, p("b/new"), ex),
            RenameAt2(None, p("b/new"), None, p("b/new/"), ex),
            RenameAt2(None, p("b/g/"), None, p("a/sub"), ex),
            RenameAt2(None, p("b/new"), None, p("b/g"), 8),
            List(p("/a")),
            List(p("/b")),
        ],
    });
}

#[test]
fn path_length_limits_agree() {
    use Op::*;
    let name255 = "n".repeat(255);
    let name256 = "n".repeat(256);
    // Relative paths from a handle on the root, so both sides see the same string.
    let dots = |len: usize| format!("{}f", "./".repeat((len - 1) / 2));
    let c200 = "c".repeat(200);
    let mut steps = vec![
        Open(0, None, p("/"), libc::O_PATH, 0),
        Put(format!("/{name255}"), 0o644, b"x"),
        Put(format!("/{name256}"), 0o644, b"x"),
        Stat(format!("/{name256}")),
        Mkdir(format!("/{name256}"), 0o755),
        Symlink("x", format!("/{name256}")),
        Put(p("/f"), 0o644, b"f"),
        FstatAt(Some(0), dots(4095), 0),
        FstatAt(Some(0), dots(4097), 0),
        FstatAt(Some(0), format!("{}/f", name256), 0),
    ];
    // Twenty-five directories of 200-byte names: 5025 bytes deep, reached a step at a
    // time from handles; the whole path is then too long to name at once.
    let mut whole = String::new();
    for i in 0..25 {
        let (at, next) = (1 + i % 2, 1 + (i + 1) % 2);
        let from = if i == 0 { 0 } else { at };
        steps.push(MkdirAt(Some(from), c200.clone(), 0o755));
        steps.push(Open(next, Some(from), c200.clone(), libc::O_PATH, 0));
        whole.push('/');
        whole.push_str(&c200);
    }
    steps.push(Open(3, Some(2), p("deep"), RW | libc::O_CREAT, 0o600));
    steps.push(Write(3, b"deep"));
    steps.push(FstatAt(Some(2), p("deep"), 0));
    steps.push(Stat(format!("{whole}/deep")));
    steps.push(FstatAt(Some(0), format!("{}/deep", &whole[1..]), 0));
    agree(Scenario {
        name: "path-limits",
        setup: vec![],
        cred: Cred::root(),
        steps,
    });
}

#[test]
fn o_tmpfile_and_linkat_agree() {
    use Op::*;
    agree(Scenario {
        name: "tmpfile",
        setup: vec![Mkdir(p("/d"), 0o777)],
        cred: Cred::root(),
        steps: vec![
            Open(0, None, p("/d"), RW | libc::O_TMPFILE, 0o640),
            Write(0, b"anonymous"),
            Fstat(0),
            List(p("/d")),
            LinkAt(Some(0), p(""), None, p("d/named"), libc::AT_EMPTY_PATH),
            Fstat(0),
            Stat(p("/d/named")),
            Close(0),
            Open(1, None, p("/d"), RW | libc::O_TMPFILE | libc::O_EXCL, 0o600),
            LinkAt(Some(1), p(""), None, p("d/never"), libc::AT_EMPTY_PATH),
            Close(1),
            Open(2, None, p("/d"), RO | libc::O_TMPFILE, 0o600),
            Open(2, None, p("/d/named"), WO | libc::O_TMPFILE, 0o600),
            List(p("/d")),
        ],
    });
}

#[test]
fn permission_checks_as_an_unprivileged_user_agree() {
    use Op::*;
    agree(Scenario {
        name: "perm-user",
        setup: vec![
            Mkdir(p("/closed"), 0o700),
            Put(p("/closed/f"), 0o644, b"secret"),
            Mkdir(p("/open"), 0o777),
            Mkdir(p("/ro"), 0o755),
            Put(p("/ro/f"), 0o644, b"ro"),
            Put(p("/ro/w"), 0o666, b"w"),
            Put(p("/ro/x"), 0o600, b"x"),
            Mkdir(p("/sticky"), 0o1777),
            Put(p("/sticky/other"), 0o666, b"o"),
            Chown(p("/sticky/other"), 2000, 2000),
            // mkdir drops setgid from the mode it is given: chmod sets it.
            Mkdir(p("/sgid"), 0o777),
            Chown(p("/sgid"), 0, 3000),
            Chmod(p("/sgid"), 0o2777),
            Put(p("/open/mine"), 0o644, b"m"),
            Chown(p("/open/mine"), 1000, 1000),
            Put(p("/open/suid"), 0o6755, b"s"),
            Chown(p("/open/suid"), 1000, 1000),
            Chmod(p("/open/suid"), 0o6755),
            Mkdir(p("/open/theirs"), 0o755),
            Chown(p("/open/theirs"), 2000, 2000),
        ],
        cred: user(1000, 1000, &[1000, 4000]),
        steps: vec![
            Stat(p("/closed/f")),
            Open(0, None, p("/closed/f"), RO, 0),
            List(p("/closed")),
            Open(0, None, p("/ro/f"), RO, 0),
            Close(0),
            Open(0, None, p("/ro/f"), RW, 0),
            Open(0, None, p("/ro/x"), RO, 0),
            Open(0, None, p("/ro/w"), WO | libc::O_TRUNC, 0),
            Close(0),
            Put(p("/ro/new"), 0o644, b"n"),
            Mkdir(p("/ro/newdir"), 0o755),
            Unlink(p("/ro/f")),
            Rename(p("/ro/f"), p("/open/f")),
            Truncate(p("/ro/f"), 0),
            Truncate(p("/ro/w"), 1),
            Chmod(p("/ro/f"), 0o777),
            Chown(p("/ro/f"), 1000, -1),
            UtimensAt(None, p("/ro/w"), T::Now, T::Now, 0),
            UtimensAt(None, p("/ro/w"), T::At(5), T::Omit, 0),
            UtimensAt(None, p("/ro/f"), T::Now, T::Omit, 0),
            UtimensAt(None, p("/open/mine"), T::At(7), T::At(8), 0),
            Times(p("/open/mine")),
            Unlink(p("/sticky/other")),
            Rename(p("/sticky/other"), p("/sticky/again")),
            Put(p("/sticky/mine"), 0o600, b"mine"),
            Lstat(p("/sticky/mine")),
            Unlink(p("/sticky/mine")),
            Put(p("/sgid/f"), 0o2775, b"g"),
            Lstat(p("/sgid/f")),
            Mkdir(p("/sgid/d"), 0o755),
            Lstat(p("/sgid/d")),
            Symlink("f", p("/sgid/l")),
            Lstat(p("/sgid/l")),
            Chmod(p("/sgid/f"), 0o2755),
            Lstat(p("/sgid/f")),
            Chmod(p("/open/mine"), 0o2755),
            Lstat(p("/open/mine")),
            Chown(p("/open/mine"), -1, 4000),
            Lstat(p("/open/mine")),
            Chown(p("/open/mine"), -1, 5000),
            Chown(p("/open/mine"), 1001, -1),
            Chown(p("/open/mine"), 1000, -1),
            Chown(p("/open/suid"), -1, -1),
            Lstat(p("/open/suid")),
            Chmod(p("/open/suid"), 0o6755),
            Truncate(p("/open/suid"), 0),
            Lstat(p("/open/suid")),
            Put(p("/open/masked"), 0o777, b""),
            Lstat(p("/open/masked")),
            Mkdir(p("/open/theirs/x"), 0o755),
            Rename(p("/open/mine"), p("/open/theirs/mine")),
            Link(p("/ro/x"), p("/open/hard")),
            Link(p("/ro/w"), p("/open/hard")),
            Mkdir(p("/open/md"), 0o755),
            Rename(p("/open/theirs"), p("/open/md/t")),
            Rmdir(p("/open/theirs")),
        ],
    });
}

#[test]
fn root_credentials_agree() {
    use Op::*;
    agree(Scenario {
        name: "perm-root",
        setup: vec![
            Mkdir(p("/closed"), 0o000),
            Put(p("/closed/f"), 0o000, b"secret"),
            Put(p("/noexec"), 0o644, b"x"),
            Put(p("/suid"), 0o6755, b"s"),
            Chmod(p("/suid"), 0o6755),
            Mkdir(p("/sgid"), 0o2755),
            Chown(p("/sgid"), 0, 3000),
            Chmod(p("/sgid"), 0o2755),
        ],
        cred: Cred {
            umask: 0o027,
            ..Cred::root()
        },
        steps: vec![
            Stat(p("/closed/f")),
            Open(0, None, p("/closed/f"), RW, 0),
            Close(0),
            Chown(p("/suid"), 5, 5),
            Lstat(p("/suid")),
            Chmod(p("/suid"), 0o6755),
            Truncate(p("/suid"), 0),
            Lstat(p("/suid")),
            Put(p("/sgid/f"), 0o2777, b""),
            Lstat(p("/sgid/f")),
            Mkdir(p("/sgid/d"), 0o777),
            Lstat(p("/sgid/d")),
            Mknod(p("/sgid/p"), libc::S_IFIFO | 0o666, 0),
            Lstat(p("/sgid/p")),
        ],
    });
}

#[test]
fn directory_offsets_are_stable_under_concurrent_change() {
    let pm = fresh(8 * MIB);
    let fs = mount(&pm);
    fs.mkdir("/d", 0o755).unwrap();
    for i in 0..50 {
        write_file(&fs, &format!("/d/f{i}"), b"");
    }
    let dir = fs.stat("/d").unwrap().ino;
    let first: Vec<_> = fs.readdir_ino(dir, 0).unwrap();
    assert_eq!(first.len(), 52);
    assert_eq!(first[0].entry.name, ".");
    assert_eq!(first[1].entry.name, "..");
    // Read half, then change the directory: remove some names not yet read and some
    // read, add new ones; the rest of the listing has every old name not removed
    // exactly once, and nothing read before.
    let cut = first[20].offset;
    let seen: Vec<String> = first[..21].iter().map(|e| e.entry.name.clone()).collect();
    let removed: Vec<String> = first[10..40]
        .iter()
        .step_by(3)
        .map(|e| e.entry.name.clone())
        .collect();
    for n in &removed {
        fs.unlink(&format!("/d/{n}")).unwrap();
    }
    for i in 0..20 {
        write_file(&fs, &format!("/d/new{i}"), b"");
    }
    let rest = fs.readdir_ino(dir, cut).unwrap();
    let rest_names: Vec<&str> = rest.iter().map(|e| e.entry.name.as_str()).collect();
    for e in &first[21..] {
        let n = e.entry.name.as_str();
        let count = rest_names.iter().filter(|&&r| r == n).count();
        let want = usize::from(!removed.iter().any(|r| r == n));
        assert_eq!(count, want, "{n}");
    }
    for n in &seen {
        assert!(!rest_names.contains(&n.as_str()), "{n} listed twice");
    }
    assert!(rest.windows(2).all(|w| w[0].offset < w[1].offset));
    // The same cookies after a remount.
    let cookies: Vec<(String, u64)> = fs
        .readdir_ino(dir, 0)
        .unwrap()
        .into_iter()
        .map(|e| (e.entry.name, e.offset))
        .collect();
    fs.unmount().unwrap();
    let fs = mount(&pm);
    let dir = fs.stat("/d").unwrap().ino;
    let again: Vec<(String, u64)> = fs
        .readdir_ino(dir, 0)
        .unwrap()
        .into_iter()
        .map(|e| (e.entry.name, e.offset))
        .collect();
    assert_eq!(again, cookies);
}

#[test]
fn extended_attributes_under_credentials_agree() {
    use Op::*;
    const CREATE: i32 = libc::XATTR_CREATE;
    const REPLACE: i32 = libc::XATTR_REPLACE;
    // Set up by root: a file the user owns, one only readable by it, one it cannot
    // read, a sticky directory owned by root and one owned by the user, all with
    // user.*, trusted.* and security.* attributes.
    let mut setup = vec![
        Mkdir(p("/d"), 0o777),
        Put(p("/d/mine"), 0o644, b"m"),
        Chown(p("/d/mine"), 1000, 1000),
        Put(p("/d/ro"), 0o644, b"r"),
        Put(p("/d/none"), 0o600, b"n"),
        Mkdir(p("/sticky"), 0o1777),
        Mkdir(p("/sticky/own"), 0o1777),
        Chown(p("/sticky/own"), 1000, 1000),
    ];
    for f in ["/d/mine", "/d/ro", "/d/none", "/sticky"] {
        setup.push(SetXattr(p(f), "user.a", b"1", 0));
        setup.push(SetXattr(p(f), "trusted.t", b"2", 0));
        setup.push(SetXattr(p(f), "security.s", b"3", 0));
    }
    let steps = vec![
        // user.*: read needs read permission, a change write permission.
        GetXattr(p("/d/mine"), "user.a", 16),
        GetXattr(p("/d/ro"), "user.a", 16),
        GetXattr(p("/d/none"), "user.a", 16),
        GetXattr(p("/d/none"), "user.a", 0),
        SetXattr(p("/d/mine"), "user.b", b"x", CREATE),
        SetXattr(p("/d/mine"), "user.b", b"y", CREATE),
        SetXattr(p("/d/mine"), "user.b", b"yy", REPLACE),
        GetXattr(p("/d/mine"), "user.b", 16),
        GetXattr(p("/d/mine"), "user.b", 1),
        SetXattr(p("/d/ro"), "user.b", b"x", 0),
        RemoveXattr(p("/d/ro"), "user.a"),
        SetXattr(p("/d/none"), "user.missing", b"x", REPLACE),
        RemoveXattr(p("/d/mine"), "user.b"),
        RemoveXattr(p("/d/mine"), "user.b"),
        // trusted.*: root's alone.
        GetXattr(p("/d/mine"), "trusted.t", 16),
        SetXattr(p("/d/mine"), "trusted.u", b"x", 0),
        RemoveXattr(p("/d/mine"), "trusted.t"),
        // security.*: anyone reads, only root changes.
        GetXattr(p("/d/none"), "security.s", 16),
        SetXattr(p("/d/mine"), "security.s", b"x", 0),
        RemoveXattr(p("/d/mine"), "security.s"),
        // Lists need no permission; trusted.* names are hidden.
        ListXattr(p("/d/mine"), 0),
        ListXattr(p("/d/mine"), 256),
        ListXattr(p("/d/none"), 256),
        // Sticky directories: only the owner (or root) changes user.*.
        GetXattr(p("/sticky"), "user.a", 16),
        SetXattr(p("/sticky"), "user.b", b"x", 0),
        RemoveXattr(p("/sticky"), "user.a"),
        SetXattr(p("/sticky/own"), "user.b", b"x", 0),
        GetXattr(p("/sticky/own"), "user.b", 16),
        // Through descriptors, the same checks on the inode.
        Open(0, None, p("/d/ro"), RO, 0),
        FgetXattr(0, "user.a", 16),
        FsetXattr(0, "user.c", b"x", 0),
        FgetXattr(0, "trusted.t", 16),
        Close(0),
        Open(1, None, p("/d/mine"), WO, 0),
        FsetXattr(1, "user.c", b"z", 0),
        FgetXattr(1, "user.c", 16),
        Close(1),
        // An O_PATH handle is no descriptor for them.
        Open(2, None, p("/d/mine"), libc::O_PATH, 0),
        FgetXattr(2, "user.a", 16),
        FsetXattr(2, "user.d", b"x", 0),
        Close(2),
    ];
    for cred in [user(1000, 1000, &[]), Cred::root()] {
        agree(Scenario {
            name: "xattr-cred",
            setup: setup.clone(),
            cred,
            steps: steps.clone(),
        });
    }
}

#[test]
fn fallocate_and_seek_under_credentials_agree() {
    use Op::*;
    let page = 4096u64;
    let steps = vec![
        Put(p("/d/f"), 0o644, b"data"),
        // fallocate needs a descriptor open for writing.
        Open(0, None, p("/d/f"), RO, 0),
        Fallocate(0, 0, 0, page),
        Seek(0, 0, libc::SEEK_DATA),
        Seek(0, 0, libc::SEEK_HOLE),
        Seek(0, 10, libc::SEEK_DATA),
        Close(0),
        Open(1, None, p("/d/f"), WO, 0),
        Fallocate(1, 0, 0, 4 * page),
        Fstat(1),
        Fallocate(1, libc::FALLOC_FL_KEEP_SIZE, 4 * page, page),
        Fstat(1),
        Fallocate(1, libc::FALLOC_FL_PUNCH_HOLE, 0, page),
        Fallocate(
            1,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            page,
            2 * page,
        ),
        Seek(1, 0, libc::SEEK_DATA),
        Seek(1, 0, libc::SEEK_HOLE),
        Seek(1, 4 * page as i64, libc::SEEK_DATA),
        Close(1),
        Open(2, None, p("/d"), RO | libc::O_DIRECTORY, 0),
        Fallocate(2, 0, 0, page),
        Close(2),
        // A file of another user the caller may write, and one it may not open.
        Open(3, None, p("/d/other"), WO, 0),
        Fallocate(3, 0, 0, page),
        Close(3),
        Open(4, None, p("/d/root"), WO, 0),
    ];
    agree(Scenario {
        name: "fallocate-cred",
        setup: vec![
            Mkdir(p("/d"), 0o777),
            Put(p("/d/other"), 0o666, b""),
            Put(p("/d/root"), 0o644, b""),
        ],
        cred: user(1000, 1000, &[]),
        steps,
    });
}

#[test]
fn read_only_open_with_o_trunc_truncates_as_linux_does() {
    use Op::*;
    let trunc = RO | libc::O_TRUNC;
    for cred in [Cred::root(), user(1000, 1000, &[])] {
        agree(Scenario {
            name: "rdonly-trunc",
            setup: vec![
                Mkdir(p("/d"), 0o777),
                Put(p("/d/mine"), 0o644, b"contents"),
                Chown(p("/d/mine"), 1000, 1000),
                Put(p("/d/readonly"), 0o444, b"kept"),
                Chown(p("/d/readonly"), 1000, 1000),
                Put(p("/d/theirs"), 0o644, b"theirs"),
            ],
            cred: cred.clone(),
            steps: vec![
                // Truncated through a descriptor that cannot write.
                Open(0, None, p("/d/mine"), trunc, 0),
                Pread(0, 16),
                Fstat(0),
                Write(0, b"no"),
                Close(0),
                Stat(p("/d/mine")),
                // Write permission is needed (root needs none).
                Open(1, None, p("/d/readonly"), trunc, 0),
                Stat(p("/d/readonly")),
                Open(2, None, p("/d/theirs"), trunc, 0),
                Stat(p("/d/theirs")),
                // A directory is refused.
                Open(3, None, p("/d"), trunc, 0),
            ],
        });
    }
}
