//! Mapping a region: devdax device, DAX file (`MAP_SYNC`) or plain file; exclusive use
//! by `flock`; the region header; and the real-hardware implementation of [`Pmem`].
//!
//! # Region header (first [`HEADER_LEN`] bytes of the file or device)
//!
//! | offset | size | field                                               |
//! |--------|------|-----------------------------------------------------|
//! | 0      | 8    | magic `b"EASYIORG"`                                 |
//! | 8      | 4    | header format version, little endian ([`VERSION`])  |
//! | 12     | 4    | header length in bytes ([`HEADER_LEN`])             |
//! | 16     | 8    | total region length in bytes, header included       |
//! | 24     | 4    | CRC-32C of bytes 0..24                              |
//! | 28     | ..   | zero up to [`HEADER_LEN`]                           |
//!
//! Usable offsets `0..len()` of [`Pmem`] start right after the header.
//!
//! # Durability on a page-cache backing
//!
//! A file on a block-device file system (neither tmpfs nor DAX) is mapped through the
//! page cache: a cache-line write-back reaches DRAM only, and the kernel writes dirty
//! pages to disk whenever it likes, in any order. So on such a region every
//! [`Pmem::fence`] that follows a write-back or non-temporal copy is also a write-back
//! to disk (`fdatasync`): what the x86 model says is durable after the fence is on disk
//! when it returns, and what the file system orders with fences reaches the disk in
//! that order. Writes note that the mapping is dirty (one flag); a fence with nothing
//! noted costs nothing more, and on tmpfs or DAX neither the flag nor the sync exists.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::{io_err, Error, Result};
use crate::flock::{lock, Access};
use crate::reserve::reserve;
use crate::{check_range, check_word, persist, Pmem};

/// The page size regions are sized in.
pub const PAGE_SIZE: u64 = 4096;
/// Bytes reserved at the start of every region for its header.
pub const HEADER_LEN: u64 = PAGE_SIZE;
/// Version of the header format written by this code.
pub const VERSION: u32 = 1;

const MAGIC: [u8; 8] = *b"EASYIORG";
const MAGIC_OFF: usize = 0;
const VERSION_OFF: usize = MAGIC_OFF + MAGIC.len();
const HDR_LEN_OFF: usize = VERSION_OFF + 4;
const REGION_LEN_OFF: usize = HDR_LEN_OFF + 4;
const CSUM_OFF: usize = REGION_LEN_OFF + 8;
const HEADER_USED: usize = CSUM_OFF + 4;

/// Smallest region `create` accepts: the header plus one page of usable memory.
pub const MIN_REGION: u64 = HEADER_LEN + PAGE_SIZE;

const TMPFS_MAGIC: i64 = 0x0102_1994;
const HUGETLBFS_MAGIC: i64 = 0x9584_58f6;

/// What survives a power loss, as far as this process can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Persistent memory mapped with `MAP_SYNC` or through device DAX: data is durable
    /// once written back from the CPU cache and fenced.
    CpuFlush,
    /// DRAM (tmpfs, hugetlbfs): flush and fence order the stores, but everything is
    /// lost at power-off or reboot. The embedded default.
    Dram,
    /// A file in the page cache of a block-backed file system: durable once written to
    /// the disk, which every fence after a write does (`fdatasync`), so the file system
    /// is as durable as on persistent memory, at the cost of a disk flush per fence.
    PageCache,
}

impl Durability {
    /// A one-line description fit for output to a person.
    pub fn describe(self) -> &'static str {
        match self {
            Durability::CpuFlush => "persistent: durable after cache write-back and fence",
            Durability::Dram => "volatile DRAM: contents lost at power-off or reboot",
            Durability::PageCache => {
                "disk file through the page cache: durable once a fence has written it back"
            }
        }
    }
}

/// Whether a new region file's blocks are allocated up front.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backing {
    Reserved,
    Sparse,
}

/// When the page tables of a new mapping are filled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Populate {
    /// At `mmap` (`MAP_POPULATE`): a region just created is about to be written
    /// throughout (formatted, then benchmarked) and should not pay a fault per page.
    Now,
    /// On first touch: opening an existing image maps the whole of it, and filling
    /// the page tables of a 16 GiB image (then tearing them down at exit) would cost
    /// more than everything a short command does; only the pages it touches fault in.
    /// A sparse image also stays sparse.
    OnTouch,
}

/// What backs a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionKind {
    /// A device DAX character device (`/dev/daxX.Y`).
    DevDax,
    /// A regular file, mapped with `MAP_SYNC` when the file system allows it.
    File,
}

/// How the region's memory is mapped, which decides what a fence makes durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mapping {
    /// The whole of a device DAX device: loads and stores reach the persistent memory
    /// itself, with no page cache and no file system in between.
    DevDax,
    /// A file on a DAX file system mapped with `MAP_SYNC`: stores reach the persistent
    /// memory, and the file system keeps the metadata of every page written durable
    /// before the write can fault in, so a cache write-back and fence is enough.
    MapSync,
    /// A shared mapping of a file in DRAM (tmpfs) or in a page cache.
    Shared,
}

impl Mapping {
    /// The short name: `devdax`, `MAP_SYNC` or `shared` (`easyio info --json`).
    pub fn name(self) -> &'static str {
        match self {
            Mapping::DevDax => "devdax",
            Mapping::MapSync => "MAP_SYNC",
            Mapping::Shared => "shared",
        }
    }

    /// A short description fit for output to a person (`easyio info`).
    pub fn describe(self) -> &'static str {
        match self {
            Mapping::DevDax => "device DAX",
            Mapping::MapSync => "DAX file mapped with MAP_SYNC",
            Mapping::Shared => "shared file mapping",
        }
    }
}

/// A mapped region of slow memory, held exclusively by this open.
pub struct Region {
    map: *mut u8,
    map_len: usize,
    path: PathBuf,
    kind: RegionKind,
    mapping: Mapping,
    durability: Durability,
    remove_on_drop: bool,
    /// False when opened with [`Region::open_read_only`].
    writable: bool,
    /// Page cache only: set by every write-back and copy, cleared by the sync that
    /// covers it.
    dirty: AtomicBool,
    /// Serialises syncs, so a fence never returns while a sync that took its dirty
    /// flag is still writing.
    sync_lock: Mutex<()>,
    /// Syncs to disk issued so far.
    syncs: AtomicU64,
    /// The first failed sync not yet reported ([`Pmem::take_sync_error`]), as an errno.
    sync_error: AtomicU64,
    /// Held for its flock (closing the descriptor releases the region) and for syncs.
    file: File,
    /// The protection key the mapping is tagged with ([`Region::protect`]): every
    /// access opens it on its thread for its duration.
    key: Option<u32>,
}

// SAFETY: the mapping is shared memory whose every access goes through raw pointers in
// this module with atomic or byte-copy semantics; nothing in `Region` is tied to the
// thread that created it.
unsafe impl Send for Region {}
// SAFETY: as above; concurrent accesses from several threads are the caller's protocol
// (log tails, completion counters), exactly as with hardware persistent memory.
unsafe impl Sync for Region {}

impl Region {
    /// Creates a new region file of `size` bytes (header included) at `path` and holds
    /// it. On a devdax device, formats the whole device instead (`size` must then be 0
    /// or the device size). Fails with [`Error::Exists`] if a regular file is already
    /// there.
    pub fn create(path: impl AsRef<Path>, size: u64) -> Result<Region> {
        Self::create_file(path.as_ref(), size, Backing::Reserved)
    }

    /// Creates a region file of `size` bytes that takes host space only where it is
    /// written (a sparse file), mapped without populating it: for large images in tests
    /// and benchmarks, whose memory or disk use should be what they touch. A host file
    /// system that fills up under it makes the first touch of a hole fail with SIGBUS;
    /// [`Region::open`] reserves the holes (disk) or checks there is room (DRAM).
    pub fn create_sparse(path: impl AsRef<Path>, size: u64) -> Result<Region> {
        Self::create_file(path.as_ref(), size, Backing::Sparse)
    }

    fn create_file(path: &Path, size: u64, backing: Backing) -> Result<Region> {
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.file_type().is_char_device() {
                return Self::format_devdax(path, size);
            }
            return Err(Error::Exists { path: path.into() });
        }
        check_size(size)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => Error::Exists { path: path.into() },
                io::ErrorKind::NotFound => Error::NotFound { path: path.into() },
                _ => io_err(path, "create", e),
            })?;
        let built = (|| {
            lock(&file, path, Access::ReadWrite)?;
            let populate = match backing {
                Backing::Reserved => {
                    reserve(&file, path, size)?;
                    Populate::Now
                }
                Backing::Sparse => {
                    file.set_len(size).map_err(|e| io_err(path, "set_len", e))?;
                    Populate::OnTouch
                }
            };
            let region = Self::map(
                file,
                path,
                size,
                RegionKind::File,
                populate,
                Access::ReadWrite,
            )?;
            region.write_header(size);
            Ok(region)
        })();
        if built.is_err() {
            let _ = std::fs::remove_file(path);
        }
        built
    }

    /// Creates a region of `size` bytes in `dir` with a unique name; the file is
    /// removed when the region is dropped.
    pub fn create_temp_in(dir: impl AsRef<Path>, size: u64) -> Result<Region> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = dir.as_ref();
        reclaim_abandoned_temps(dir);
        let pid = std::process::id();
        // A process killed before it removed its temporary region leaves the name
        // behind, and process ids are reused: take the next number until one is free.
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(format!("{TEMP_PREFIX}{pid}-{n}{TEMP_SUFFIX}"));
            match Self::create(&path, size) {
                Err(Error::Exists { .. }) if n < 1 << 20 => continue,
                Err(e) => return Err(e),
                Ok(mut region) => {
                    region.remove_on_drop = true;
                    return Ok(region);
                }
            }
        }
    }

    /// A temporary region in `/dev/shm`, the embedded default.
    pub fn create_temp(size: u64) -> Result<Region> {
        Self::create_temp_in("/dev/shm", size)
    }

    /// Opens an existing region (file or devdax device) and holds it exclusively.
    pub fn open(path: impl AsRef<Path>) -> Result<Region> {
        Self::open_as(path.as_ref(), Access::ReadWrite)
    }

    /// Opens an existing region for reading only: the file is opened read-only (so a
    /// read-only image file, or one on a read-only mount, can be checked), mapped
    /// without write permission, and held shared — other readers may open it too, a
    /// writer may not. A store through [`Pmem`] panics, naming the region.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Region> {
        Self::open_as(path.as_ref(), Access::ReadOnly)
    }

    fn open_as(path: &Path, access: Access) -> Result<Region> {
        let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => Error::NotFound { path: path.into() },
            _ => io_err(path, "stat", e),
        })?;
        let (kind, actual) = if meta.file_type().is_char_device() {
            (RegionKind::DevDax, devdax_size(path, meta.rdev())?)
        } else if meta.is_file() {
            (RegionKind::File, meta.len())
        } else {
            return Err(Error::BadHeader {
                path: path.into(),
                reason: "not a regular file or a DAX character device".into(),
            });
        };
        if actual < MIN_REGION {
            return Err(Error::BadHeader {
                path: path.into(),
                reason: format!("{actual} bytes is too small to hold a region header"),
            });
        }
        check_size(actual)?;
        let file = match access {
            Access::ReadWrite => open_rw(path)?,
            Access::ReadOnly => File::open(path).map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => Error::NotFound { path: path.into() },
                _ => io_err(path, "open", e),
            })?,
        };
        lock(&file, path, access)?;
        if kind == RegionKind::File && access == Access::ReadWrite {
            back_holes(&file, path, actual)?;
        }
        let region = Self::map(file, path, actual, kind, Populate::OnTouch, access)?;
        region.check_header(actual)?;
        Ok(region)
    }

    /// Makes the existing file (or devdax device) at `path` a new, empty region,
    /// whatever its header says — damaged, of another version, or none — and holds
    /// it: the force of `mkfs --force`. `size` 0 keeps the file's size; another size
    /// grows or shrinks the file to it. The file's blocks are reserved (or, in DRAM,
    /// checked) as at [`Region::open`].
    pub fn overwrite(path: impl AsRef<Path>, size: u64) -> Result<Region> {
        let path = path.as_ref();
        let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => Error::NotFound { path: path.into() },
            _ => io_err(path, "stat", e),
        })?;
        if meta.file_type().is_char_device() {
            return Self::format_devdax(path, size);
        }
        if !meta.is_file() {
            return Err(Error::BadHeader {
                path: path.into(),
                reason: "not a regular file or a DAX character device".into(),
            });
        }
        let size = if size == 0 { meta.len() } else { size };
        check_size(size)?;
        let file = open_rw(path)?;
        lock(&file, path, Access::ReadWrite)?;
        if size != meta.len() {
            file.set_len(size).map_err(|e| io_err(path, "set_len", e))?;
        }
        back_holes(&file, path, size)?;
        let region = Self::map(
            file,
            path,
            size,
            RegionKind::File,
            Populate::Now,
            Access::ReadWrite,
        )?;
        region.write_header(size);
        Ok(region)
    }

    fn format_devdax(path: &Path, size: u64) -> Result<Region> {
        let meta = std::fs::metadata(path).map_err(|e| io_err(path, "stat", e))?;
        let actual = devdax_size(path, meta.rdev())?;
        if size != 0 && size != actual {
            return Err(Error::BadSize {
                size,
                reason: format!("device DAX regions take the whole device ({actual} bytes)"),
            });
        }
        check_size(actual)?;
        let file = open_rw(path)?;
        lock(&file, path, Access::ReadWrite)?;
        let region = Self::map(
            file,
            path,
            actual,
            RegionKind::DevDax,
            Populate::OnTouch,
            Access::ReadWrite,
        )?;
        region.write_header(actual);
        Ok(region)
    }

    fn map(
        file: File,
        path: &Path,
        len: u64,
        kind: RegionKind,
        populate: Populate,
        access: Access,
    ) -> Result<Region> {
        let map_len = usize::try_from(len).map_err(|_| Error::BadSize {
            size: len,
            reason: "larger than the address space".into(),
        })?;
        let fd = file.as_raw_fd();
        let prot = match access {
            Access::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
            Access::ReadOnly => libc::PROT_READ,
        };
        let populate = match populate {
            Populate::Now => libc::MAP_POPULATE,
            Populate::OnTouch => 0,
        };
        // SAFETY: mapping a file we hold open; the kernel picks the address. The result
        // is checked against MAP_FAILED before use.
        let try_map = |flags: i32| unsafe {
            let p = libc::mmap(std::ptr::null_mut(), map_len, prot, flags, fd, 0);
            if p == libc::MAP_FAILED {
                Err(io::Error::last_os_error())
            } else {
                Ok(p as *mut u8)
            }
        };
        let map_err = |source| Error::Map {
            path: path.into(),
            len,
            source,
        };
        // A file is mapped with MAP_SYNC where its file system is DAX that can give it
        // (read-only too: what the mapping then says about durability is what a
        // writer's mapping of the same file gets); elsewhere the kernel refuses the
        // flag (EOPNOTSUPP; older kernels say EINVAL) and the file is mapped shared.
        let (map, mapping, durability) = match kind {
            RegionKind::DevDax => (
                try_map(libc::MAP_SHARED).map_err(map_err)?,
                Mapping::DevDax,
                Durability::CpuFlush,
            ),
            RegionKind::File => {
                match try_map(libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC | populate) {
                    Ok(p) => (p, Mapping::MapSync, Durability::CpuFlush),
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) => {
                        let p = try_map(libc::MAP_SHARED | populate).map_err(map_err)?;
                        (p, Mapping::Shared, fs_durability(&file))
                    }
                    Err(e) => return Err(map_err(e)),
                }
            }
        };
        Ok(Region {
            map,
            map_len,
            path: path.into(),
            kind,
            mapping,
            durability,
            remove_on_drop: false,
            writable: access == Access::ReadWrite,
            dirty: AtomicBool::new(false),
            sync_lock: Mutex::new(()),
            syncs: AtomicU64::new(0),
            sync_error: AtomicU64::new(0),
            file,
            key: None,
        })
        .map(|mut r| {
            if access == Access::ReadWrite && crate::pkey::wanted_by_env() {
                // Where keys are missing the region stays as it is; `protection`
                // says so.
                let _ = r.protect();
            }
            r
        })
    }

    /// Tags the mapping with the process's protection key (see [`crate::pkey`]):
    /// from now on only this region's own operations reach its memory, and a store
    /// through any other pointer faults (SIGSEGV, `SEGV_PKUERR`). Returns the key, or
    /// why the region cannot be protected (no `pku` or `ospke`, no key left, opened
    /// read-only).
    pub fn protect(&mut self) -> std::result::Result<u32, String> {
        if let Some(k) = self.key {
            return Ok(k);
        }
        if !self.writable {
            return Err("the region is open read-only".into());
        }
        let key = crate::pkey::key()?;
        // SAFETY: the whole mapping, which this region owns; every access to it goes
        // through this module's methods, which open the key from now on.
        unsafe {
            crate::pkey::tag(
                self.map,
                self.map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                key,
            )
        }
        .map_err(|e| format!("pkey_mprotect: {e}"))?;
        self.key = Some(key);
        Ok(key)
    }

    /// The protection key the region is tagged with, if it is protected.
    pub fn protection(&self) -> Option<u32> {
        self.key
    }

    /// Access to the mapping for one operation of this thread, if it is protected.
    #[inline]
    pub(crate) fn open_key(&self) -> Option<crate::pkey::Open> {
        self.key.map(crate::pkey::open)
    }

    fn header_bytes(&self) -> [u8; HEADER_USED] {
        let _open = self.open_key();
        let mut h = [0u8; HEADER_USED];
        // SAFETY: the mapping is at least MIN_REGION bytes, more than HEADER_USED.
        unsafe { persist::copy_out(h.as_mut_ptr(), self.map, HEADER_USED) };
        h
    }

    fn write_header(&self, region_len: u64) {
        let mut h = [0u8; HEADER_USED];
        h[MAGIC_OFF..VERSION_OFF].copy_from_slice(&MAGIC);
        h[VERSION_OFF..HDR_LEN_OFF].copy_from_slice(&VERSION.to_le_bytes());
        h[HDR_LEN_OFF..REGION_LEN_OFF].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        h[REGION_LEN_OFF..CSUM_OFF].copy_from_slice(&region_len.to_le_bytes());
        let csum = crc32c::crc32c(&h[..CSUM_OFF]);
        h[CSUM_OFF..].copy_from_slice(&csum.to_le_bytes());
        let _open = self.open_key();
        // SAFETY: the header lies inside the mapping (len >= MIN_REGION), which this
        // open holds exclusively.
        unsafe {
            std::ptr::write_bytes(self.map, 0, HEADER_LEN as usize);
            std::ptr::copy_nonoverlapping(h.as_ptr(), self.map, HEADER_USED);
            persist::flush(self.map, HEADER_LEN as usize);
        }
        self.note_dirty();
        Pmem::fence(self);
    }

    fn check_header(&self, actual: u64) -> Result<()> {
        let h = self.header_bytes();
        let bad = |reason: String| Error::BadHeader {
            path: self.path.clone(),
            reason,
        };
        if h[MAGIC_OFF..VERSION_OFF] != MAGIC {
            return Err(bad("not an easyio region (no region header magic)".into()));
        }
        let u32_at = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().unwrap());
        let stored = u32_at(CSUM_OFF);
        if stored != crc32c::crc32c(&h[..CSUM_OFF]) {
            return Err(bad("region header checksum mismatch (corrupted)".into()));
        }
        let version = u32_at(VERSION_OFF);
        if version != VERSION {
            return Err(bad(format!(
                "region header version {version}, this build reads {VERSION}"
            )));
        }
        let hdr_len = u32_at(HDR_LEN_OFF) as u64;
        if hdr_len != HEADER_LEN {
            return Err(bad(format!(
                "region header length {hdr_len}, expected {HEADER_LEN}"
            )));
        }
        let claimed = u64::from_le_bytes(h[REGION_LEN_OFF..CSUM_OFF].try_into().unwrap());
        if claimed > actual {
            return Err(Error::Truncated {
                path: self.path.clone(),
                claimed,
                actual,
            });
        }
        if claimed < MIN_REGION {
            return Err(bad(format!("region header claims only {claimed} bytes")));
        }
        Ok(())
    }

    /// Where the region lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What backs the region.
    pub fn kind(&self) -> RegionKind {
        self.kind
    }

    /// How the region is mapped: device DAX, `MAP_SYNC` or shared.
    pub fn mapping(&self) -> Mapping {
        self.mapping
    }

    /// Total mapped bytes, header included.
    pub fn mapped_len(&self) -> u64 {
        self.map_len as u64
    }

    /// Writes every dirty page of the region back to storage now, whatever its
    /// backing (fences already do this on [`Durability::PageCache`]). A device DAX
    /// device has no pages to write back (and no `fsync`: the kernel answers EINVAL):
    /// there this is a fence.
    pub fn sync(&self) -> Result<()> {
        if self.mapping == Mapping::DevDax {
            persist::fence();
            return Ok(());
        }
        let _serial = self.sync_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.dirty.store(false, Ordering::SeqCst);
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.file
            .sync_data()
            .map_err(|e| io_err(&self.path, "write back to disk", e))
    }

    /// Syncs to disk issued so far by fences and [`Region::sync`] (zero on tmpfs and
    /// DAX, where a fence needs none).
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Address of usable offset `off`, for handing to a copy device that writes by
    /// address. Callers must not store through it themselves: stores go through
    /// [`Pmem`] so that they can be traced.
    pub fn device_addr(&self, off: u64, len: u64) -> *mut u8 {
        check_range(off, len, self.len());
        self.check_writable(off);
        // A device may write there: the next fence must reach the disk.
        self.note_dirty();
        self.at(off)
    }

    /// Panics on a store into a region opened read-only (the mapping would fault).
    #[inline]
    #[track_caller]
    fn check_writable(&self, off: u64) {
        assert!(
            self.writable,
            "region {} is open read-only: store at offset {off}",
            self.path.display()
        );
    }

    /// Notes that a write-back or copy happened, for the next fence to sync; a
    /// no-op unless the region is in a page cache.
    #[inline]
    fn note_dirty(&self) {
        if self.durability == Durability::PageCache {
            // SeqCst: the stores before this are visible before a sync that clears the
            // flag can start, so that sync covers them.
            self.dirty.store(true, Ordering::SeqCst);
        }
    }

    /// The page-cache half of a fence: writes back to disk whatever was noted dirty
    /// since the last sync. A fence that finds another sync running waits for it, as
    /// that sync may have taken this thread's flag.
    #[cold]
    fn sync_dirty(&self) {
        let _serial = self.sync_lock.lock().unwrap_or_else(|e| e.into_inner());
        if !self.dirty.swap(false, Ordering::SeqCst) {
            return;
        }
        self.syncs.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.file.sync_data() {
            // Retry at the next fence; report the first failure to whoever asks.
            self.dirty.store(true, Ordering::SeqCst);
            let errno = e.raw_os_error().unwrap_or(libc::EIO) as u64;
            let _ = self
                .sync_error
                .compare_exchange(0, errno, Ordering::SeqCst, Ordering::SeqCst);
        }
    }

    #[inline]
    fn at(&self, off: u64) -> *mut u8 {
        // SAFETY: callers bounds-check `off` against len(), so the pointer stays inside
        // the mapping or one past its end (HEADER_LEN + off <= map_len), for an empty
        // access at the end.
        unsafe { self.map.add((HEADER_LEN + off) as usize) }
    }

    #[inline]
    fn word(&self, off: u64) -> &AtomicU64 {
        check_word(off, self.len());
        // SAFETY: in bounds and 8-aligned (the mapping is page-aligned and HEADER_LEN is
        // a multiple of 8); AtomicU64 has the layout of u64 and the mapping lives as long
        // as `self`.
        unsafe { &*(self.at(off) as *const AtomicU64) }
    }
}

impl Pmem for Region {
    fn len(&self) -> u64 {
        self.map_len as u64 - HEADER_LEN
    }

    fn durability(&self) -> Durability {
        self.durability
    }

    fn write(&self, off: u64, src: &[u8]) {
        let _open = self.open_key();
        check_range(off, src.len() as u64, self.len());
        self.check_writable(off);
        // SAFETY: bounds checked; `src` is ordinary memory, never inside the mapping
        // (a `&[u8]` into the mapping cannot be obtained from this API).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.at(off), src.len()) }
    }

    fn store_u64(&self, off: u64, val: u64) {
        let _open = self.open_key();
        self.check_writable(off);
        self.word(off).store(val, Ordering::Release);
    }

    fn load_u64(&self, off: u64) -> u64 {
        let _open = self.open_key();
        self.word(off).load(Ordering::Acquire)
    }

    fn read(&self, off: u64, dst: &mut [u8]) {
        let _open = self.open_key();
        check_range(off, dst.len() as u64, self.len());
        // SAFETY: bounds checked; `dst` is an exclusive borrow outside the mapping.
        unsafe { persist::copy_out(dst.as_mut_ptr(), self.at(off), dst.len()) }
    }

    fn flush(&self, off: u64, len: u64) {
        let _open = self.open_key();
        check_range(off, len, self.len());
        // SAFETY: bounds checked.
        unsafe { persist::flush(self.at(off), len as usize) }
        self.note_dirty();
    }

    fn fence(&self) {
        persist::fence();
        if self.durability == Durability::PageCache {
            self.sync_dirty();
        }
    }

    fn copy_nt(&self, off: u64, src: &[u8]) {
        let _open = self.open_key();
        check_range(off, src.len() as u64, self.len());
        self.check_writable(off);
        // SAFETY: bounds checked; `src` lies outside the mapping.
        unsafe { persist::copy_nt(self.at(off), src.as_ptr(), src.len()) }
        self.note_dirty();
    }

    fn copy_nt_sealed(&self, off: u64, src: &[u8], seal: &mut crate::seal::Seal) {
        check_range(off, src.len() as u64, self.len());
        let dst = self.at(off);
        let fused = persist::best_copy() == persist::CopyKind::Avx512
            && (dst as usize | src.len()).is_multiple_of(64);
        if !fused {
            self.copy_nt(off, src);
            return seal.update(src);
        }
        let _open = self.open_key();
        self.check_writable(off);
        // SAFETY: AVX-512F present (best_copy); bounds checked; `dst` is 64-byte
        // aligned and `src` lies outside the mapping.
        unsafe { crate::seal::copy_nt_sealed_avx512(dst, src.as_ptr(), src.len(), seal) }
        self.note_dirty();
    }

    fn take_sync_error(&self) -> Option<Error> {
        let errno = self.sync_error.swap(0, Ordering::SeqCst);
        (errno != 0).then(|| {
            io_err(
                &self.path,
                "write back to disk",
                io::Error::from_raw_os_error(errno as i32),
            )
        })
    }

    fn device_base(&self) -> Option<*mut u8> {
        Some(self.at(0))
    }

    fn protection_key(&self) -> Option<u32> {
        self.key
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping we created; no references into it
        // outlive `self` (the API hands out copies and offsets only).
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.map_len) };
        if self.remove_on_drop {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("path", &self.path)
            .field("kind", &self.kind)
            .field("len", &self.len())
            .field("durability", &self.durability)
            .finish()
    }
}

fn check_size(size: u64) -> Result<()> {
    let reason = if size == 0 {
        "it is zero".to_string()
    } else if !size.is_multiple_of(PAGE_SIZE) {
        format!("it is not a multiple of the page size ({PAGE_SIZE} bytes)")
    } else if size < MIN_REGION {
        format!("a region needs at least {MIN_REGION} bytes (header plus one page)")
    } else {
        return Ok(());
    };
    Err(Error::BadSize { size, reason })
}

fn open_rw(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => Error::NotFound { path: path.into() },
            _ => io_err(path, "open", e),
        })
}

/// Name of a temporary region: prefix, creator's pid, a number, suffix.
const TEMP_PREFIX: &str = "easyio-";
const TEMP_SUFFIX: &str = ".region";

/// Removes the temporary regions in `dir` that their creator left behind when it was
/// killed: named as [`Region::create_temp_in`] names them, created by a process that no
/// longer exists, and not held by anyone (every open region is `flock`ed). Best effort:
/// anything unexpected leaves the file alone.
fn reclaim_abandoned_temps(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(TEMP_PREFIX)?.strip_suffix(TEMP_SUFFIX))
            .and_then(|rest| rest.split('-').next()?.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let path = entry.path();
        // Held (by a process whose id we cannot see, say): not abandoned.
        if let Ok(file) = open_rw(&path) {
            if lock(&file, &path, Access::ReadWrite).is_ok() {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}

/// Makes sure the host file system can back every page of an image file that has
/// holes (made with `truncate`, or copied sparse): a page is allocated when first
/// touched through the mapping, and a full file system answers that touch with
/// SIGBUS, not an error. On a disk file system the holes are reserved now
/// (`fallocate`, cheap: no data is written). In DRAM (tmpfs) reserving would take the
/// memory for the whole image up front, so the free space is checked instead: a sparse
/// image there is a deliberate choice (a large test image, say), and only a file
/// system that fills up while it is open can still raise SIGBUS.
fn back_holes(file: &File, path: &Path, len: u64) -> Result<()> {
    let meta = file.metadata().map_err(|e| io_err(path, "stat", e))?;
    let allocated = meta.blocks() * 512;
    if allocated >= len {
        return Ok(());
    }
    let missing = len - allocated;
    if fs_durability(file) != Durability::Dram {
        return reserve(file, path, len).map_err(|e| match e.errno() {
            libc::ENOSPC => Error::Holes {
                path: path.into(),
                missing,
                available: fs_available(file),
            },
            _ => e,
        });
    }
    let available = fs_available(file);
    if available < missing {
        return Err(Error::Holes {
            path: path.into(),
            missing,
            available,
        });
    }
    Ok(())
}

/// Bytes an unprivileged writer can still allocate on the file's file system.
fn fs_available(file: &File) -> u64 {
    rustix::fs::fstatvfs(file).map_or(0, |st| st.f_bavail.saturating_mul(st.f_frsize))
}

fn fs_durability(file: &File) -> Durability {
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: fstatfs fills the struct on success; we read it only then.
    let f_type = unsafe {
        if libc::fstatfs(file.as_raw_fd(), st.as_mut_ptr()) != 0 {
            return Durability::PageCache;
        }
        st.assume_init().f_type
    };
    match f_type {
        TMPFS_MAGIC | HUGETLBFS_MAGIC => Durability::Dram,
        _ => Durability::PageCache,
    }
}

/// Size of a device DAX device, from sysfs.
fn devdax_size(path: &Path, rdev: u64) -> Result<u64> {
    let sys = format!(
        "/sys/dev/char/{}:{}/size",
        libc::major(rdev),
        libc::minor(rdev)
    );
    let text = std::fs::read_to_string(&sys).map_err(|e| Error::BadHeader {
        path: path.into(),
        reason: format!("character device is not device DAX ({sys}: {e})"),
    })?;
    text.trim().parse().map_err(|_| Error::BadHeader {
        path: path.into(),
        reason: format!("unreadable device size in {sys}: {text:?}"),
    })
}

/// Removes a region file; refuses to touch anything that is not a region, or one in use.
pub fn remove(path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let region = Region::open(path)?;
    if region.kind == RegionKind::DevDax {
        return Err(Error::BadHeader {
            path: path.into(),
            reason: "a device DAX region cannot be removed".into(),
        });
    }
    std::fs::remove_file(path).map_err(|e| io_err(path, "remove", e))
}
