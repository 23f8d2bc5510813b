//! Attributes as the kernel wants them: `fs::Stat` to `fuser::FileAttr`, the times of
//! `setattr` back to `fs::Time`, and how long the kernel may keep what it is told.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fs::{FileKind, Stat, Time};
use fuser::{FileAttr, FileType, INodeNo, TimeOrNow};

/// How long the kernel may use an entry (a name to inode) without asking again. The
/// kernel keeps what it learns through the mount coherent itself; a change through
/// another door of this process is invalidated before that door answers (see
/// `inval.rs`), so the timeout only bounds how long an entry outlives a change no
/// door saw — there is none: every change of the image goes through this process.
pub const ENTRY_TTL: Duration = Duration::from_secs(10);
/// How long the kernel may use attributes without asking again, for the same reason
/// as [`ENTRY_TTL`].
pub const ATTR_TTL: Duration = Duration::from_secs(10);
/// How long the kernel may answer ENOENT for a name it was told does not exist.
pub const NEGATIVE_TTL: Duration = Duration::from_secs(10);

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_through_system_time() {
        for ns in [0i64, 1, 1_700_000_000_123_456_789, -5_000_000_001] {
            let st = system_time(ns);
            assert_eq!(time(TimeOrNow::SpecificTime(st)), Time::At(ns));
        }
        assert_eq!(time(TimeOrNow::Now), Time::Now);
    }
}
