//! Inodes: the persistent record in the inode table, and the DRAM state rebuilt from
//! the inode's log.
//!
//! Persistent inode ([`INODE_SIZE`](crate::layout::INODE_SIZE) bytes):
//!
//! | offset | size | field                                                     |
//! |--------|------|-----------------------------------------------------------|
//! | 0      | 8    | valid word: 0 free, [`VALID`] in use (journaled)          |
//! | 8      | 8    | log head: byte offset of the first log page (0: none), sealed|
//! | 16     | 8    | log tail: byte offset of the next free slot (0: empty), sealed|
//! | 24     | 8    | inode number (must match the slot)                        |
//! | 32     | 4    | kind (1 file, 2 directory, 3 symlink, 4 FIFO, 5 socket, 6 character device, 7 block device) |
//! | 36     | 4    | permission bits at creation                               |
//! | 40     | 4    | uid at creation                                           |
//! | 44     | 4    | gid at creation                                           |
//! | 48     | 8    | creation time, ns since the epoch                         |
//! | 56     | 4    | CRC-32C of bytes 24..56, then (special kinds 4..7 only) of 120..128 |
//! | 120    | 8    | device number (`st_rdev`) of a special file; 0 otherwise   |
//!
//! Head and tail are *sealed* ([`crate::layout::seal_log_word`]): offset in the low 48
//! bits, a 16-bit check of (inode, word, offset) in the high 16.
//!
//! Everything that changes after creation (size, attributes, links, data, directory
//! entries, extended attributes) is in the log.

use std::collections::HashMap;
use std::sync::atomic::AtomicU32;

use parking_lot::RwLock;
use pmem::Pmem;

use crate::alloc::Extent;
use crate::error::{Error, Result};
use crate::index::PageIndex;
use crate::layout::{get32, get64, put32, put64, BLOCK_SIZE};
use crate::log::{attr, Entry, LogState};
use crate::xattr_set::SetRef;

/// Valid word of an inode in use.
pub const VALID: u64 = 0x444F_4E49_4F49_4145; // "EAIOINOD"
/// Offset of the valid word.
pub const VALID_OFF: u64 = 0;
/// Offset of the log head.
pub const HEAD_OFF: u64 = 8;
/// Offset of the log tail.
pub const TAIL_OFF: u64 = 16;
const INO_OFF: usize = 24;
const KIND_OFF: usize = 32;
const MODE_OFF: usize = 36;
const UID_OFF: usize = 40;
const GID_OFF: usize = 44;
const CTIME_OFF: usize = 48;
const CSUM_OFF: usize = 56;
const STATIC_LEN: usize = CSUM_OFF + 4;
/// The device number, at the end of the record: only special files have one, and only
/// their checksum covers it, so records of the other kinds read as before.
const RDEV_OFF: u64 = crate::layout::INODE_SIZE - 8;

/// What an inode is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    /// A regular file.
    File = 1,
    /// A directory.
    Dir = 2,
    /// A symbolic link.
    Symlink = 3,
    /// A named pipe (`mkfifo`).
    Fifo = 4,
    /// A Unix-domain socket's name.
    Socket = 5,
    /// A character device.
    CharDev = 6,
    /// A block device.
    BlockDev = 7,
}

impl FileKind {
    fn from_u32(v: u32) -> Option<FileKind> {
        match v {
            1 => Some(FileKind::File),
            2 => Some(FileKind::Dir),
            3 => Some(FileKind::Symlink),
            4 => Some(FileKind::Fifo),
            5 => Some(FileKind::Socket),
            6 => Some(FileKind::CharDev),
            7 => Some(FileKind::BlockDev),
            _ => None,
        }
    }

    /// The `S_IF*` bits of `st_mode`.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::File => libc::S_IFREG,
            FileKind::Dir => libc::S_IFDIR,
            FileKind::Symlink => libc::S_IFLNK,
            FileKind::Fifo => libc::S_IFIFO,
            FileKind::Socket => libc::S_IFSOCK,
            FileKind::CharDev => libc::S_IFCHR,
            FileKind::BlockDev => libc::S_IFBLK,
        }
    }

    /// The kind an `st_mode`'s `S_IF*` bits name (0 is a regular file, as for mknod).
    pub fn from_mode(mode: u32) -> Option<FileKind> {
        match mode & libc::S_IFMT {
            0 | libc::S_IFREG => Some(FileKind::File),
            libc::S_IFDIR => Some(FileKind::Dir),
            libc::S_IFLNK => Some(FileKind::Symlink),
            libc::S_IFIFO => Some(FileKind::Fifo),
            libc::S_IFSOCK => Some(FileKind::Socket),
            libc::S_IFCHR => Some(FileKind::CharDev),
            libc::S_IFBLK => Some(FileKind::BlockDev),
            _ => None,
        }
    }

    /// FIFOs, sockets and devices: inodes with a kind and a device number, no data.
    pub fn is_special(self) -> bool {
        matches!(
            self,
            FileKind::Fifo | FileKind::Socket | FileKind::CharDev | FileKind::BlockDev
        )
    }
}

/// The fixed part of a persistent inode, written once at creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InodeRecord {
    pub ino: u64,
    pub kind: FileKind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub ctime: i64,
    /// Device number of a special file (0 for other kinds).
    pub rdev: u64,
}

impl InodeRecord {
    /// Writes the record with an empty log (valid word untouched), durably.
    pub fn write(&self, pm: &dyn Pmem, off: u64) {
        let mut b = [0u8; STATIC_LEN];
        put64(&mut b, INO_OFF, self.ino);
        put32(&mut b, KIND_OFF, self.kind as u32);
        put32(&mut b, MODE_OFF, self.mode);
        put32(&mut b, UID_OFF, self.uid);
        put32(&mut b, GID_OFF, self.gid);
        put64(&mut b, CTIME_OFF, self.ctime as u64);
        let rdev = self.rdev.to_le_bytes();
        let csum = record_csum(&b, self.kind, &rdev);
        put32(&mut b, CSUM_OFF, csum);
        pm.write(off + HEAD_OFF, &b[HEAD_OFF as usize..]);
        pm.persist(off + HEAD_OFF, STATIC_LEN as u64 - HEAD_OFF);
        if self.kind.is_special() {
            pm.write(off + RDEV_OFF, &rdev);
            pm.persist(off + RDEV_OFF, 8);
        }
    }

    /// Reads and checks the record of inode `ino` at `off`.
    pub fn read(pm: &dyn Pmem, off: u64, ino: u64) -> Result<InodeRecord> {
        let mut b = [0u8; STATIC_LEN];
        pm.read(off, &mut b);
        let bad = |why: &str| Error::Corrupt(format!("inode {ino}: {why}"));
        let kind = FileKind::from_u32(get32(&b, KIND_OFF));
        let mut rdev = [0u8; 8];
        if kind.is_some_and(FileKind::is_special) {
            pm.read(off + RDEV_OFF, &mut rdev);
        }
        // An unknown kind is reported as such once the checksum says the kind word is
        // what was written.
        let csum = record_csum(&b, kind.unwrap_or(FileKind::File), &rdev);
        if csum != get32(&b, CSUM_OFF) {
            return Err(bad("checksum mismatch"));
        }
        if get64(&b, INO_OFF) != ino {
            return Err(bad("records another inode number"));
        }
        Ok(InodeRecord {
            ino,
            kind: kind.ok_or_else(|| bad("unknown kind"))?,
            rdev: u64::from_le_bytes(rdev),
            mode: get32(&b, MODE_OFF),
            uid: get32(&b, UID_OFF),
            gid: get32(&b, GID_OFF),
            ctime: get64(&b, CTIME_OFF) as i64,
        })
    }
}

/// The record's checksum: bytes 24..56, then the device number for special kinds.
fn record_csum(b: &[u8], kind: FileKind, rdev: &[u8; 8]) -> u32 {
    let c = crc32c::crc32c(&b[INO_OFF..CSUM_OFF]);
    if kind.is_special() {
        crc32c::crc32c_append(c, rdev)
    } else {
        c
    }
}

/// An inode in DRAM.
pub struct Inode {
    pub ino: u64,
    /// Level-1 lock: held within one operation, never across a wait.
    pub state: RwLock<InodeState>,
    /// Open descriptors; an unlinked inode is freed when the last one closes.
    pub opens: AtomicU32,
    /// Held across whole reads and writes, copy included, only by the
    /// `lock_across_wait` experiment variant (yields rather than blocks).
    pub io_lock: rt::sync::Mutex<()>,
}

/// Everything about an inode, rebuilt from its record and log.
#[derive(Clone, Debug)]
pub struct InodeState {
    pub kind: FileKind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    /// Creation time from the record: the inode's generation, which tells a reused
    /// inode number from the inode that had it before.
    pub born: i64,
    /// Device number of a special file.
    pub rdev: u64,
    /// An `O_TMPFILE` inode opened without `O_EXCL`: `linkat` may give it a name
    /// although it has no links (DRAM only: after a crash it is freed unnamed).
    pub linkable: bool,
    pub log: LogState,
    /// File and symlink data: page offset → block.
    pub pages: PageIndex,
    /// Directory entries: name → inode.
    pub children: HashMap<String, u64>,
    /// Directories: the parent's inode number (the root is its own parent).
    pub parent: u64,
    /// Set once the inode has been freed; operations that raced with the free fail.
    pub freed: bool,
    /// Level 2 of the two-level lock: the copy of the latest write, which a later read
    /// or write of this inode waits for before touching data.
    pub last_write: mover::Pending,
    /// Where the inode's extended attributes are stored (`None`: it has none).
    pub xattr: Option<SetRef>,
}

impl InodeState {
    /// A fresh inode as its creation record describes it.
    pub fn new(rec: &InodeRecord) -> InodeState {
        InodeState {
            kind: rec.kind,
            mode: rec.mode,
            uid: rec.uid,
            gid: rec.gid,
            nlink: if rec.kind == FileKind::Dir { 2 } else { 1 },
            size: 0,
            atime: rec.ctime,
            mtime: rec.ctime,
            ctime: rec.ctime,
            born: rec.ctime,
            rdev: rec.rdev,
            linkable: false,
            log: LogState::default(),
            pages: PageIndex::default(),
            children: HashMap::new(),
            parent: 0,
            freed: false,
            last_write: mover::Pending::Done,
            xattr: None,
        }
    }

    /// Applies one committed entry; returns the data blocks it displaced. This single
    /// function defines what an entry means, at run time and in recovery alike.
    pub fn apply(&mut self, e: &Entry, displaced: &mut Vec<Extent>) {
        self.log.entries += 1;
        match e {
            Entry::Write {
                pgoff,
                block,
                npages,
                size,
                mtime,
                ..
            } => {
                for i in 0..*npages as u64 {
                    if let Some(old) = self.pages.insert(pgoff + i, block + i) {
                        push_block(displaced, old);
                    }
                }
                self.size = *size;
                self.mtime = *mtime;
                self.ctime = *mtime;
            }
            Entry::Attr {
                mask,
                mode,
                uid,
                gid,
                size,
                atime,
                mtime,
                ctime,
            } => {
                if mask & attr::MODE != 0 {
                    self.mode = *mode;
                }
                if mask & attr::UID != 0 {
                    self.uid = *uid;
                }
                if mask & attr::GID != 0 {
                    self.gid = *gid;
                }
                if mask & attr::SIZE != 0 {
                    // A shrink, or a truncate to the same size, drops the blocks
                    // past the end (`fallocate` may have placed some there); growing
                    // keeps them. As Linux's tmpfs does.
                    if *size <= self.size {
                        let keep = size.div_ceil(BLOCK_SIZE);
                        for b in self.pages.remove_from(keep) {
                            push_block(displaced, b);
                        }
                    }
                    self.size = *size;
                }
                if mask & attr::ATIME != 0 {
                    self.atime = *atime;
                }
                if mask & attr::MTIME != 0 {
                    self.mtime = *mtime;
                }
                if mask & attr::CTIME != 0 {
                    self.ctime = *ctime;
                }
            }
            Entry::Link { nlink, ctime } => {
                self.nlink = *nlink;
                self.ctime = *ctime;
            }
            Entry::DentryAdd { ino, ctime, name } => {
                self.children.insert(name.clone(), *ino);
                self.mtime = *ctime;
                self.ctime = *ctime;
            }
            Entry::DentryDel { ctime, name, .. } => {
                self.children.remove(name);
                self.mtime = *ctime;
                self.ctime = *ctime;
            }
            Entry::Xattr { .. } => self.apply_xattr(e, displaced),
            Entry::Punch { .. } => self.apply_punch(e, displaced),
            Entry::Void => {}
        }
    }

    /// Applies an xattr entry: the set it names replaces the inode's set, whose blocks
    /// are displaced.
    fn apply_xattr(&mut self, e: &Entry, displaced: &mut Vec<Extent>) {
        if let Entry::Xattr {
            extents,
            bytes,
            crc,
            ctime,
        } = e
        {
            let set = SetRef::of_entry(extents, *bytes, *crc);
            if let Some(old) = std::mem::replace(&mut self.xattr, set) {
                displaced.extend(old.extents);
            }
            self.ctime = *ctime;
        }
    }

    /// Blocks the inode references besides its log — file data and the blocks of its
    /// extended attributes — as extents.
    pub fn data_extents(&self) -> Vec<Extent> {
        let mut out = Vec::new();
        for b in self.pages.blocks() {
            push_block(&mut out, b);
        }
        if let Some(x) = &self.xattr {
            out.extend_from_slice(&x.extents);
        }
        out
    }

    /// Entries a compacted log would hold: a lower bound on the live entries.
    pub fn live_entries(&self) -> u64 {
        2 + self.pages.len() as u64 + self.children.len() as u64 + self.xattr.is_some() as u64
    }
}

/// Appends block `b` to a list of extents, extending the last one when contiguous.
pub fn push_block(list: &mut Vec<Extent>, b: u64) {
    if let Some(last) = list.last_mut() {
        if last.start + last.len == b {
            last.len += 1;
            return;
        }
    }
    list.push(Extent { start: b, len: 1 });
}
