//! Attributes as the kernel wants them: `fs::Stat` to `fuser::FileAttr`, the times of
//! `setattr` back to `fs::Time`, how long the kernel may keep what it is told, and the
//! flags of `open`, `create` and `opendir` replies, which say what of a file the kernel
//! may cache.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fs::{FileKind, Stat, Time};
use fuser::{FileAttr, FileType, FopenFlags, INodeNo, TimeOrNow};

/// How long the kernel may use an entry (a name to inode) without asking again. The
/// kernel keeps what it learns through the mount coherent itself; a change through
/// another door of this process is invalidated before that door answers (see
/// `inval.rs`), so the timeout only bounds how long an entry outlives a change no
/// door saw — there is none: every change of the image goes through this process. So
/// it is long: a shorter one only sent the lookups of a tree again once it ran out
/// between two programs working on it (`rm -rf` after a build).
pub const ENTRY_TTL: Duration = Duration::from_secs(3600);
/// How long the kernel may use attributes without asking again, for the same reason
/// as [`ENTRY_TTL`].
pub const ATTR_TTL: Duration = Duration::from_secs(3600);
/// How long the kernel may answer ENOENT for a name it was told does not exist.
pub const NEGATIVE_TTL: Duration = Duration::from_secs(3600);

/// The kernel's name of an inode kind.
pub(crate) fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDev => FileType::CharDevice,
        FileKind::BlockDev => FileType::BlockDevice,
    }
}

/// Nanoseconds since the epoch (negative: before it) as a `SystemTime`.
fn system_time(ns: i64) -> SystemTime {
    let d = Duration::from_nanos(ns.unsigned_abs());
    if ns >= 0 {
        UNIX_EPOCH + d
    } else {
        UNIX_EPOCH - d
    }
}

/// A `setattr` time as the `fs` crate takes it.
pub(crate) fn time(t: TimeOrNow) -> Time {
    match t {
        TimeOrNow::Now => Time::Now,
        TimeOrNow::SpecificTime(st) => Time::At(match st.duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_nanos() as i64,
            Err(e) => -(e.duration().as_nanos() as i64),
        }),
    }
}

/// What `stat` says, as the kernel wants it.
pub(crate) fn file_attr(st: &Stat) -> FileAttr {
    FileAttr {
        ino: INodeNo(st.ino),
        size: st.size,
        blocks: st.blocks,
        atime: system_time(st.atime_ns),
        mtime: system_time(st.mtime_ns),
        ctime: system_time(st.ctime_ns),
        crtime: system_time(st.ctime_ns),
        kind: file_type(st.kind),
        perm: (st.mode & 0o7777) as u16,
        nlink: st.nlink,
        uid: st.uid,
        gid: st.gid,
        // The kernel's `new_encode_dev` form, which is what `stat` reports.
        rdev: st.rdev as u32,
        blksize: st.blksize,
        flags: 0,
    }
}

/// The attributes of a negative entry (inode 0: the name does not exist).
pub(crate) fn negative() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}

/// How opened files are served (the flags of every `open` and `create` reply):
///
/// - with the page cache (the default), the pages kept from one open to the next
///   (`FOPEN_KEEP_CACHE`): the kernel updates them on every write through the mount
///   (each write still reaches the server before it returns), and a change through
///   another door drops them (see `inval.rs`);
/// - without it (`FOPEN_DIRECT_IO`), writes to one file from several handles in
///   parallel (`FOPEN_PARALLEL_DIRECT_WRITES`: the fs orders them itself);
/// - no `FLUSH` at `close` unless the writeback cache is on (`FOPEN_NOFLUSH`): every
///   write was durable when it was answered, so a flush has nothing to do but cost
///   `close` a round trip. With the writeback cache the kernel ignores the flag and
///   writes the dirty pages back before its `FLUSH`.
pub(crate) fn file_open_flags(page_cache: bool, writeback_cache: bool) -> FopenFlags {
    let mut f = if page_cache {
        FopenFlags::FOPEN_KEEP_CACHE
    } else {
        FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES
    };
    if !writeback_cache {
        f |= FopenFlags::FOPEN_NOFLUSH;
    }
    f
}

/// How the handle a `create` opens is served: straight to the server
/// (`FOPEN_DIRECT_IO`) unless the writeback cache is on. A new file is written through
/// the handle that created it (`tar`, `cp`, a compiler's output), and through the page
/// cache each such file would cost a request more, a `getxattr` of
/// `security.capability` (the kernel's check before its first cached write to an
/// inode), and a write that starts inside a page the kernel does not hold goes out as
/// two requests. Its pages enter the kernel's cache at the first read through a handle
/// that `open` gave.
pub(crate) fn create_open_flags(page_cache: bool, writeback_cache: bool) -> FopenFlags {
    file_open_flags(page_cache && writeback_cache, writeback_cache)
}

/// How opened directories are listed: the kernel keeps the listing
/// (`FOPEN_CACHE_DIR`), from one open to the next (`FOPEN_KEEP_CACHE`); it drops it
/// itself when the directory changes through the mount, and a change through another
/// door drops it with the directory's pages (see `inval.rs`).
pub(crate) const DIR_OPEN_FLAGS: FopenFlags =
    FopenFlags::FOPEN_CACHE_DIR.union(FopenFlags::FOPEN_KEEP_CACHE);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_flags_follow_the_caches() {
        let direct = file_open_flags(false, false);
        assert!(direct.contains(FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_NOFLUSH));
        assert!(!direct.contains(FopenFlags::FOPEN_KEEP_CACHE));
        let cached = file_open_flags(true, false);
        assert!(cached.contains(FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_NOFLUSH));
        assert!(!cached.contains(FopenFlags::FOPEN_DIRECT_IO));
        // With the writeback cache, `close` must still flush the dirty pages.
        assert!(!file_open_flags(true, true).contains(FopenFlags::FOPEN_NOFLUSH));
        // A creating handle writes straight to the server, but for the writeback cache.
        assert_eq!(create_open_flags(true, false), direct);
        assert_eq!(create_open_flags(false, false), direct);
        assert_eq!(create_open_flags(true, true), file_open_flags(true, true));
    }

    #[test]
    fn times_round_trip_through_system_time() {
        for ns in [0i64, 1, 1_700_000_000_123_456_789, -5_000_000_001] {
            let st = system_time(ns);
            assert_eq!(time(TimeOrNow::SpecificTime(st)), Time::At(ns));
        }
        assert_eq!(time(TimeOrNow::Now), Time::Now);
    }
}
