//! `fs`: the easyio file system core — NOVA-style per-inode logs, copy-on-write data,
//! undo journals for multi-inode operations, recovery and fsck — over a `pmem` region.
//!
//! Durability: the file system is *strict* (NOVA's strict mode). An operation that
//! returns has made everything it did durable: a `write` that returns has its data and
//! the log entry that maps it committed; `fsync` has nothing left to do.
//!
//! Concurrency: every inode has a readers-writer lock (level 1 of EASYIO's two-level
//! scheme) held only inside one operation. Reads copy data after releasing it; blocks a
//! reader may still copy from are not reused until it is done (see `epoch`).
//!
//! Credentials: calls on a [`Session`] (`fs.as_user(&cred)`) are checked against the
//! caller's [`Cred`] as Linux checks them; calls on the `FileSystem` itself are the
//! trusted context (no checks). `atime` is not updated by reads (as with `noatime`).

#![warn(missing_docs)]
#![warn(clippy::too_many_lines)]

mod aio;
mod alloc;
mod attr;
mod clean;
mod commit;
mod cred;
mod epoch;
mod error;
mod facade;
#[cfg(feature = "testing")]
pub mod fault;
#[cfg(not(feature = "testing"))]
mod fault;
mod file;
pub mod fsck;
mod handle;
mod index;
mod inode;
mod inode_count;
mod journal;
pub mod layout;
mod log;
mod mount;
mod namespace;
mod open;
mod recovery;
mod rename;
mod rolled_back;
mod session_xattr;
mod space;
mod watch;
pub mod xattr;
mod xattr_set;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use pmem::Pmem;
use serde::Serialize;

pub use aio::{BorrowedToken, ReadToken, WriteToken};
pub use attr::{SetAttr, Time};
pub use commit::Held;
pub use cred::Cred;
pub use error::{Error, Result};
pub use file::{Fd, OpenFlags, Segment, Whence};
pub use handle::{
    DirEntryAt, Session, StatFs, AT_EMPTY_PATH, AT_REMOVEDIR, AT_SYMLINK_FOLLOW,
    AT_SYMLINK_NOFOLLOW,
};
pub use inode::FileKind;
pub use layout::{Geometry, BLOCK_SIZE, ROOT_INO};
pub use mover::{Class, Client, Config as MoverConfig, Mode, Mover, Pending, QosConfig};
pub use recovery::MountReport;
pub use rename::{RENAME_EXCHANGE, RENAME_NOREPLACE};
pub use space::{FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE};
pub use xattr::{XATTR_CREATE, XATTR_REPLACE};

use alloc::InoAlloc;
use epoch::Epoch;
pub use epoch::ExternalReaders;
use inode::Inode;
pub use watch::{DataChanges, InodeChanges, MAX_INODE_LISTENERS};

/// Longest name of a directory entry, in bytes.
pub const MAX_NAME: usize = 255;
/// Longest path accepted, in bytes.
pub const MAX_PATH: usize = 4096;
/// Symbolic links followed in one path resolution before ELOOP.
pub const MAX_SYMLINK_HOPS: usize = 40;
/// Most hard links to one inode.
pub const MAX_LINKS: u32 = 65_000;
/// Largest file size.
pub const MAX_FILE_SIZE: u64 = 1 << 44;

/// Choices made when formatting a region.
#[derive(Clone, Debug, Default)]
pub struct FormatOptions {
    /// Number of inodes; default one per 16 KiB of region.
    pub inodes: Option<u64>,
    /// Engine channels with completion records; default 8.
    pub channels: Option<u64>,
}

/// Choices made when mounting.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// Who moves file data.
    pub mode: Mode,
    /// Thresholds of the data movers, and the copy engine of the modes that use one
    /// ([`MoverConfig::engine`]: `software` by default, or `dsa`, which needs the
    /// region to be a mapping and the machine to have DSA work queues).
    pub mover: MoverConfig,
    /// For experiments only: hold a (uthread-aware) per-inode lock across the wait for
    /// the data copy, as a file system without EASYIO's two-level locking must. Correct
    /// but serialises every operation on a file behind the copy of the one before.
    pub lock_across_wait: bool,
    /// Mount read-only: nothing is written to the region, recovery included (a crash
    /// is rolled back in memory only). An inode that cannot be read is
    /// `Error::Corrupt` for it alone; every change is `Error::ReadOnly`. Data is copied
    /// by the CPU whatever `mode` says.
    pub read_only: bool,
    /// When recovery finds damage it cannot repair, mount read-only as above — the
    /// report lists the damage — instead of failing.
    pub read_only_on_damage: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            mode: Mode::Cpu,
            mover: MoverConfig::default(),
            lock_across_wait: false,
            read_only: false,
            read_only_on_damage: true,
        }
    }
}

impl MountOptions {
    /// Default options with data moved in `mode`.
    pub fn with_mode(mode: Mode) -> MountOptions {
        MountOptions {
            mode,
            ..MountOptions::default()
        }
    }

    /// These options with their modes' copy engine on `backend`.
    pub fn with_engine(mut self, backend: engine::BackendKind) -> MountOptions {
        self.mover.engine = backend;
        self
    }

    /// These options with the thresholds of a calibration profile (`easyio calibrate`)
    /// in place of the papers' defaults. A profile measured on another machine, or with
    /// an engine other than the one the file system opens, is refused.
    pub fn with_profile(mut self, path: &std::path::Path) -> Result<MountOptions> {
        self.mover = mover::profile::Profile::load_into(path, self.mover.engine.name(), self.mover)
            .map_err(Error::Mover)?;
        Ok(self)
    }
}

/// What `stat` reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Stat {
    /// Inode number.
    pub ino: u64,
    /// The inode's generation (its creation time, ns): with `ino`, names the inode
    /// for its whole life; a reused number has another generation.
    pub generation: u64,
    /// What the inode is.
    pub kind: FileKind,
    /// `st_mode`: kind bits and permission bits.
    pub mode: u32,
    /// Hard links (for a directory: 2 plus its subdirectories).
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number of a character or block device (`st_rdev`); 0 otherwise.
    pub rdev: u64,
    /// Bytes (0 for directories and special files).
    pub size: u64,
    /// 512-byte units allocated, as `st_blocks`.
    pub blocks: u64,
    /// Preferred I/O size: the block size.
    pub blksize: u32,
    /// Last access set (reads do not update it), ns since the epoch.
    pub atime_ns: i64,
    /// Last change of the contents, ns since the epoch.
    pub mtime_ns: i64,
    /// Last change of the inode, ns since the epoch.
    pub ctime_ns: i64,
}

/// One entry of a directory listing (`.` and `..` are not listed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct DirEntry {
    /// The entry's name.
    pub name: String,
    /// The inode it names.
    pub ino: u64,
    /// `None` when the inode the entry names cannot be read (damaged: naming it is
    /// `Error::Corrupt`), as `ls` shows `?` for an inode it cannot stat.
    pub kind: Option<FileKind>,
}

/// Usage of the region.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Usage {
    /// Blocks of the region.
    pub total_blocks: u64,
    /// Blocks the next allocation can take.
    pub free_blocks: u64,
    /// Blocks freed while a reader in flight may still copy from them (or a copy into
    /// them may still run): free once those finish. Zero whenever no read or
    /// asynchronous copy is in flight.
    pub reclaiming_blocks: u64,
    /// Inodes the table holds (inode 0 is never used).
    pub inodes: u64,
    /// Inodes in use.
    pub inodes_used: u64,
}

/// A mounted easyio file system.
pub struct FileSystem {
    pm: Arc<dyn Pmem>,
    geo: Geometry,
    /// The inodes read so far: all of them after a full scan, else those named since.
    inodes: RwLock<HashMap<u64, Arc<Inode>>>,
    /// Mounted without reading every inode (after a clean unmount): an inode not in
    /// `inodes` is read from the region the first time a directory entry names it.
    lazy: bool,
    blocks: alloc::Blocks,
    inos: InoAlloc,
    /// Inodes in use, kept for `statfs` when `lazy`.
    inode_count: inode_count::InodeCount,
    journals: Vec<Mutex<()>>,
    epoch: Epoch,
    fds: file::FdTable,
    rename_lock: Mutex<()>,
    mover: Box<dyn Mover>,
    /// Data blocks of freed inodes whose last write's copy was still running: retired
    /// once it is done, so the engine never writes into a reused block.
    deferred: Mutex<Vec<(Pending, Vec<alloc::Extent>)>>,
    /// See [`MountOptions::lock_across_wait`].
    lock_across_wait: bool,
    /// See [`MountOptions::read_only`]; `pm` is then a read-only view of the region.
    read_only: bool,
    unmounted: std::sync::atomic::AtomicBool,
    /// See [`DataChanges`].
    watcher: std::sync::OnceLock<Arc<dyn DataChanges>>,
    /// See [`InodeChanges`]: every listener hears every change. Slots set once each,
    /// in order, so that telling them costs the hot path plain loads.
    changes: [std::sync::OnceLock<Arc<dyn InodeChanges>>; watch::MAX_INODE_LISTENERS],
}

impl FileSystem {
    /// Formats `pm` with an empty root directory. Everything on it is lost.
    pub fn format(pm: &dyn Pmem, opts: &FormatOptions) -> Result<Geometry> {
        let geo = Geometry::new(pm.len(), opts.inodes, opts.channels.unwrap_or(8))?;
        mount::format(pm, &geo)?;
        Ok(geo)
    }

    /// Mounts the file system on `pm`, recovering from a crash if needed.
    pub fn mount(pm: Arc<dyn Pmem>, opts: MountOptions) -> Result<(FileSystem, MountReport)> {
        mount::mount(pm, opts)
    }

    /// Closes every descriptor, saves the allocator state and marks the file system
    /// cleanly unmounted, so the next mount skips the allocator rebuild.
    pub fn unmount(self) -> Result<()> {
        self.shutdown();
        self.sync_result()
    }

    /// Fails if a fence since the last check could not write back to the disk (a
    /// region in a page cache whose disk failed or filled): what the operations since
    /// then made durable may not be on the disk.
    fn sync_result(&self) -> Result<()> {
        match self.pm.take_sync_error() {
            Some(e) => Err(Error::Region(e)),
            None => Ok(()),
        }
    }

    /// Drops the file system without the clean-unmount work, leaving the region as a
    /// crash at this instant would (descriptors unclosed, allocator not saved). For
    /// crash tests.
    pub fn abandon(self) {
        self.unmounted
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn shutdown(&self) {
        use std::sync::atomic::Ordering;
        if self.unmounted.swap(true, Ordering::SeqCst) || self.read_only {
            return;
        }
        let open: Vec<Fd> = self
            .fds
            .files
            .read()
            .iter()
            .enumerate()
            .filter(|(_, f)| f.is_some())
            .map(|(i, _)| Fd(i as u32))
            .collect();
        for fd in open {
            let _ = self.close(fd);
        }
        for (p, exts) in self.deferred.lock().drain(..) {
            let _ = self.mover.wait(p);
            for e in exts {
                self.blocks.free(e);
            }
        }
        for ext in self.epoch.drain() {
            self.blocks.free(ext);
        }
        self.store_tails();
        clean::save_clean(&*self.pm, &self.geo, self.blocks.built_alloc());
    }

    /// Whether the file system is mounted read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// `Error::ReadOnly` on a read-only mount: checked before anything is written.
    fn check_writable(&self) -> Result<()> {
        if self.read_only {
            Err(Error::ReadOnly)
        } else {
            Ok(())
        }
    }

    /// The layout of the mounted region.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// The region the file system lives in.
    pub fn pmem(&self) -> &Arc<dyn Pmem> {
        &self.pm
    }

    /// The data-movement mode in use.
    pub fn mode(&self) -> Mode {
        self.mover.mode()
    }

    /// The copy engine, in modes that use one.
    pub fn engine(&self) -> Option<&Arc<engine::Engine>> {
        self.mover.engine()
    }

    /// The channel manager, when the mount asked for one ([`MoverConfig::qos`]).
    pub fn qos(&self) -> Option<&Arc<mover::ChannelManager>> {
        self.mover.qos()
    }

    /// Makes readers in other processes take part in reclaiming freed blocks (see
    /// [`ExternalReaders`]): a block one of them may still copy from is not reused.
    pub fn set_external_readers(&self, readers: Arc<dyn ExternalReaders>) {
        self.epoch.set_external(readers);
    }

    /// Blocks and inodes in use. Hands back first whatever freed blocks no reader can
    /// still use, so that space freed by `unlink`, `truncate` or an overwrite counts
    /// as free as soon as it can be allocated.
    pub fn usage(&self) -> Usage {
        self.reclaim();
        Usage {
            total_blocks: self.geo.total_blocks,
            free_blocks: self.blocks.free_blocks(),
            reclaiming_blocks: self.epoch.waiting_blocks() + self.deferred_blocks(),
            inodes: self.geo.inodes - 1,
            inodes_used: self.inodes_used(),
        }
    }

    fn inodes_used(&self) -> u64 {
        if !self.lazy {
            return self.inodes.read().len() as u64;
        }
        // Not all read: the valid words are counted once (as many loads as there are
        // inodes), then the count follows each inode made and freed.
        let valid = |i: &u64| self.pm.load_u64(self.geo.inode_off(*i) + inode::VALID_OFF) != 0;
        self.inode_count
            .used(|| (ROOT_INO..self.geo.inodes).filter(valid).count() as u64)
    }

    /// An inode already in DRAM: the root, an ancestor of one reached by a path, or
    /// one an open descriptor or a directory entry led to before.
    fn inode(&self, ino: u64) -> Result<Arc<Inode>> {
        self.inodes.read().get(&ino).cloned().ok_or(Error::NotFound)
    }

    /// Inode `ino`, which an entry of directory `dir` names: read from the region the
    /// first time after a mount that did not read every inode. An inode whose record
    /// or log is damaged is `Error::Corrupt` here, for it alone.
    fn child_inode(&self, dir: u64, ino: u64) -> Result<Arc<Inode>> {
        if let Some(inode) = self.inodes.read().get(&ino) {
            return Ok(inode.clone());
        }
        if !self.lazy {
            return Err(Error::NotFound);
        }
        let mut map = self.inodes.write();
        if let Some(inode) = map.get(&ino) {
            return Ok(inode.clone());
        }
        if ino <= ROOT_INO || ino >= self.geo.inodes {
            return Err(Error::Corrupt(format!(
                "directory {dir}: an entry names inode {ino}, outside the inode table"
            )));
        }
        let st = recovery::load_inode(&*self.pm, &self.geo, ino, dir, &self.blocks)?;
        let inode = Arc::new(Inode {
            ino,
            state: RwLock::new(st),
            opens: std::sync::atomic::AtomicU32::new(0),
            io_lock: rt::sync::Mutex::new(()),
        });
        map.insert(ino, inode.clone());
        Ok(inode)
    }
}

impl Drop for FileSystem {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Nanoseconds since the Unix epoch, now, from the coarse real-time clock (a few
/// milliseconds' resolution, read without a timestamp counter): what Linux file
/// systems stamp into mtime and ctime as well.
pub(crate) fn now_ns() -> i64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
    t.tv_sec * 1_000_000_000 + t.tv_nsec
}
