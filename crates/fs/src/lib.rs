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
//! Not modelled: permissions are recorded (mode, uid, gid) but not enforced, and
//! `atime` is not updated by reads (as with `noatime`).

mod aio;
mod alloc;
mod commit;
mod epoch;
mod error;
mod facade;
#[doc(hidden)]
pub mod fault;
mod file;
pub mod fsck;
mod index;
mod inode;
mod journal;
pub mod layout;
mod log;
mod namespace;
mod recovery;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use pmem::Pmem;
use serde::Serialize;

pub use aio::{ReadToken, WriteToken};
pub use error::{Error, Result};
pub use file::{Fd, OpenFlags, Whence};
pub use inode::FileKind;
pub use layout::{Geometry, BLOCK_SIZE, ROOT_INO};
pub use mover::{Class, Client, Config as MoverConfig, Mode, Mover, Pending, QosConfig};
pub use recovery::MountReport;

use alloc::{BlockAlloc, InoAlloc};
use epoch::Epoch;
use file::OpenFile;
use inode::Inode;

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
    /// Thresholds of the data movers.
    pub mover: MoverConfig,
    /// For experiments only: hold a (uthread-aware) per-inode lock across the wait for
    /// the data copy, as a file system without EASYIO's two-level locking must. Correct
    /// but serialises every operation on a file behind the copy of the one before.
    pub lock_across_wait: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            mode: Mode::Cpu,
            mover: MoverConfig::default(),
            lock_across_wait: false,
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

    /// These options with the thresholds of a calibration profile (`easyio calibrate`)
    /// in place of the papers' defaults. A profile measured on another machine, or with
    /// an engine other than the one the file system opens, is refused.
    pub fn with_profile(mut self, path: &std::path::Path) -> Result<MountOptions> {
        self.mover = mover::profile::Profile::load_into(
            path,
            engine::BackendKind::Software.name(),
            self.mover,
        )
        .map_err(|e| Error::Invalid(e.to_string()))?;
        Ok(self)
    }
}

/// What `stat` reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Stat {
    pub ino: u64,
    pub kind: FileKind,
    /// `st_mode`: kind bits and permission bits.
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// 512-byte units allocated, as `st_blocks`.
    pub blocks: u64,
    pub blksize: u32,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

/// One entry of a directory listing (`.` and `..` are not listed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DirEntry {
    pub name: String,
    pub ino: u64,
    pub kind: FileKind,
}

/// Usage of the region.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Usage {
    pub total_blocks: u64,
    pub free_blocks: u64,
    pub inodes: u64,
    pub inodes_used: u64,
}

/// A mounted easyio file system.
pub struct FileSystem {
    pm: Arc<dyn Pmem>,
    geo: Geometry,
    inodes: RwLock<HashMap<u64, Arc<Inode>>>,
    blocks: BlockAlloc,
    inos: InoAlloc,
    journals: Vec<Mutex<()>>,
    epoch: Epoch,
    fds: RwLock<Vec<Option<Arc<OpenFile>>>>,
    rename_lock: Mutex<()>,
    mover: Box<dyn Mover>,
    /// Data blocks of freed inodes whose last write's copy was still running: retired
    /// once it is done, so the engine never writes into a reused block.
    deferred: Mutex<Vec<(Pending, Vec<alloc::Extent>)>>,
    /// See [`MountOptions::lock_across_wait`].
    lock_across_wait: bool,
    unmounted: std::sync::atomic::AtomicBool,
}

impl FileSystem {
    /// Formats `pm` with an empty root directory. Everything on it is lost.
    pub fn format(pm: &dyn Pmem, opts: &FormatOptions) -> Result<Geometry> {
        let geo = Geometry::new(pm.len(), opts.inodes, opts.channels.unwrap_or(8))?;
        recovery::format(pm, &geo)?;
        Ok(geo)
    }

    /// Mounts the file system on `pm`, recovering from a crash if needed.
    pub fn mount(pm: Arc<dyn Pmem>, opts: MountOptions) -> Result<(FileSystem, MountReport)> {
        recovery::mount(pm, opts)
    }

    /// Closes every descriptor, saves the allocator state and marks the file system
    /// cleanly unmounted, so the next mount skips the allocator rebuild.
    pub fn unmount(self) -> Result<()> {
        self.shutdown();
        Ok(())
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
        if self.unmounted.swap(true, Ordering::SeqCst) {
            return;
        }
        let open: Vec<Fd> = self
            .fds
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
        recovery::save_clean(&*self.pm, &self.geo, &self.blocks);
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

    /// Blocks and inodes in use.
    pub fn usage(&self) -> Usage {
        Usage {
            total_blocks: self.geo.total_blocks,
            free_blocks: self.blocks.free_blocks(),
            inodes: self.geo.inodes - 1,
            inodes_used: self.inodes.read().len() as u64,
        }
    }

    fn inode(&self, ino: u64) -> Result<Arc<Inode>> {
        self.inodes.read().get(&ino).cloned().ok_or(Error::NotFound)
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
