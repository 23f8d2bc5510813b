//! Files: descriptors, open flags, copy-on-write writes, reads, truncate (opening is in
//! `open`, attributes in `attr`).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock};
use smallvec::SmallVec;

use crate::alloc::Extent;
use crate::commit::Staged;
use crate::epoch::ReadGuard;
use crate::error::{Error, Result};
use crate::inode::{FileKind, Inode, InodeState};
use crate::layout::BLOCK_SIZE;
use crate::log::{attr, Entry};
use crate::{now_ns, FileSystem, MAX_FILE_SIZE};
use mover::{Client, Pending, ReadPiece, WritePiece};
use parking_lot::{RwLockReadGuard, RwLockWriteGuard};

/// Bytes of a file in one place: (length, region offset or `None` for a hole).
pub type Segment = (usize, Option<u64>);

/// An open file descriptor of a mounted file system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fd(pub u32);

/// `open` flags: the `O_*` values of Linux, validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFlags(pub i32);

impl OpenFlags {
    /// Open for reading.
    pub const RDONLY: OpenFlags = OpenFlags(libc::O_RDONLY);
    /// Open for writing.
    pub const WRONLY: OpenFlags = OpenFlags(libc::O_WRONLY);
    /// Open for reading and writing.
    pub const RDWR: OpenFlags = OpenFlags(libc::O_RDWR);
    /// Create the file if the name is free.
    pub const CREAT: OpenFlags = OpenFlags(libc::O_CREAT);
    /// With `CREAT`: fail with EEXIST if the name is taken.
    pub const EXCL: OpenFlags = OpenFlags(libc::O_EXCL);
    /// Truncate a regular file opened for writing to 0 bytes.
    pub const TRUNC: OpenFlags = OpenFlags(libc::O_TRUNC);
    /// Every write goes to the end of the file.
    pub const APPEND: OpenFlags = OpenFlags(libc::O_APPEND);
    /// A final symbolic link is ELOOP instead of followed.
    pub const NOFOLLOW: OpenFlags = OpenFlags(libc::O_NOFOLLOW);
    /// The path must name a directory (ENOTDIR).
    pub const DIRECTORY: OpenFlags = OpenFlags(libc::O_DIRECTORY);
    /// A handle that names an inode without opening it for I/O (`O_PATH`): usable as
    /// the directory of `*at` calls, for `fstat`, and with `AT_EMPTY_PATH`.
    pub const PATH: OpenFlags = OpenFlags(libc::O_PATH);
    /// An unnamed file in the directory the path names (`O_TMPFILE`, which includes
    /// `O_DIRECTORY`); `linkat` can name it unless `O_EXCL` was given.
    pub const TMPFILE: OpenFlags = OpenFlags(libc::O_TMPFILE);

    /// Flags accepted; others are refused with EINVAL rather than silently ignored.
    /// `O_CLOEXEC`, `O_LARGEFILE` and `O_NOCTTY` are accepted and have no effect here.
    const KNOWN: i32 = libc::O_ACCMODE
        | libc::O_CREAT
        | libc::O_EXCL
        | libc::O_TRUNC
        | libc::O_APPEND
        | libc::O_NOFOLLOW
        | libc::O_DIRECTORY
        | libc::O_PATH
        | libc::O_TMPFILE
        | libc::O_CLOEXEC
        | libc::O_LARGEFILE
        | libc::O_NOCTTY;

    /// Whether every bit of `f` is set.
    pub fn has(self, f: OpenFlags) -> bool {
        self.0 & f.0 == f.0
    }

    /// Whether the flags may be used, and if so whether they open for reading and
    /// for writing.
    pub fn validate(self) -> Result<(bool, bool)> {
        if self.0 & !Self::KNOWN != 0 {
            return Err(Error::Invalid(format!(
                "unsupported open flags {:#o}",
                self.0 & !Self::KNOWN
            )));
        }
        // Linux (since 6.4) refuses O_CREAT with O_DIRECTORY (and so with O_TMPFILE,
        // which carries its bit) before anything else.
        if self.has(OpenFlags::CREAT) && self.0 & libc::O_DIRECTORY != 0 {
            return Err(Error::Invalid("O_CREAT with O_DIRECTORY".into()));
        }
        if self.has(OpenFlags::PATH) {
            // Linux ignores every other flag but O_DIRECTORY, O_NOFOLLOW, O_CLOEXEC.
            return Ok((false, false));
        }
        match self.0 & libc::O_ACCMODE {
            libc::O_RDONLY => Ok((true, false)),
            libc::O_WRONLY => Ok((false, true)),
            libc::O_RDWR => Ok((true, true)),
            _ => Err(Error::Invalid(
                "access mode must be O_RDONLY, O_WRONLY or O_RDWR".into(),
            )),
        }
    }
}

impl std::ops::BitOr for OpenFlags {
    type Output = OpenFlags;
    fn bitor(self, rhs: OpenFlags) -> OpenFlags {
        OpenFlags(self.0 | rhs.0)
    }
}

/// Origin of an `lseek`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Whence {
    /// From the start of the file.
    Set,
    /// From the current position.
    Cur,
    /// From the end of the file.
    End,
    /// `SEEK_DATA`: the first data at or after the offset (see `crate::space`).
    Data,
    /// `SEEK_HOLE`: the first hole at or after the offset; the end of the file is one.
    Hole,
}

/// An open file description.
pub(crate) struct OpenFile {
    pub(crate) inode: Arc<Inode>,
    /// Neither readable nor writable: an `O_PATH` handle.
    pub(crate) readable: bool,
    pub(crate) writable: bool,
    pub(crate) append: bool,
    pub(crate) pos: Mutex<u64>,
    /// The channel manager's client this handle's copies belong to.
    pub(crate) client: Client,
    /// Opened for writing by a caller without root's privileges: a write clears the
    /// file's setuid/setgid bits, as Linux's `file_remove_privs`.
    pub(crate) drop_privs: bool,
}

impl OpenFile {
    pub(crate) fn inode(&self) -> &Arc<Inode> {
        &self.inode
    }
    pub(crate) fn readable(&self) -> bool {
        self.readable
    }
    pub(crate) fn writable(&self) -> bool {
        self.writable
    }
    pub(crate) fn append(&self) -> bool {
        self.append
    }
    pub(crate) fn client(&self) -> Client {
        self.client
    }
}

/// Ids of descriptor tables, one per mount: a thread's last lookup ([`LAST_FILE`]) names its table.
static TABLE_IDS: AtomicU64 = AtomicU64::new(1);

/// A thread's last descriptor lookup: (table id, generation, descriptor, open file).
type LastFile = (u64, u64, u32, Weak<OpenFile>);

thread_local! {
    /// This thread's last descriptor lookup: (table id, generation, descriptor, open
    /// file). Weak, so a closed file is not kept by a thread that looked it up.
    static LAST_FILE: RefCell<Option<LastFile>> = const { RefCell::new(None) };
}

/// The open files of a mount by descriptor. A thread that calls on one descriptor
/// again and again (a read or write loop) finds it in its last lookup, valid while
/// the table's generation is unchanged, without taking the table's lock — whose
/// word threads on different CPUs would otherwise pass between them on every call.
pub(crate) struct FdTable {
    pub(crate) files: RwLock<Vec<Option<Arc<OpenFile>>>>,
    id: u64,
    /// Bumped by every open and close, under the write lock.
    generation: AtomicU64,
}

impl Default for FdTable {
    fn default() -> FdTable {
        FdTable {
            files: RwLock::new(Vec::new()),
            id: TABLE_IDS.fetch_add(1, Ordering::Relaxed),
            generation: AtomicU64::new(0),
        }
    }
}

impl FdTable {
    /// The open file of `fd`.
    fn get(&self, fd: Fd) -> Result<Arc<OpenFile>> {
        let generation = self.generation.load(Ordering::Acquire);
        let hit = LAST_FILE.try_with(|last| match &*last.borrow() {
            Some((id, g, f, file)) if (*id, *g, *f) == (self.id, generation, fd.0) => {
                file.upgrade()
            }
            _ => None,
        });
        if let Ok(Some(file)) = hit {
            return Ok(file);
        }
        let file = self
            .files
            .read()
            .get(fd.0 as usize)
            .and_then(Clone::clone)
            .ok_or(Error::BadFd)?;
        let _ = LAST_FILE.try_with(|last| {
            *last.borrow_mut() = Some((self.id, generation, fd.0, Arc::downgrade(&file)));
        });
        Ok(file)
    }

    /// Gives `file` the lowest free descriptor.
    pub(crate) fn insert(&self, file: Arc<OpenFile>) -> Fd {
        let mut fds = self.files.write();
        let slot = fds.iter().position(Option::is_none).unwrap_or_else(|| {
            fds.push(None);
            fds.len() - 1
        });
        fds[slot] = Some(file);
        self.generation.fetch_add(1, Ordering::Release);
        Fd(slot as u32)
    }

    /// Takes the open file of `fd` out of the table.
    fn take(&self, fd: Fd) -> Result<Arc<OpenFile>> {
        let mut fds = self.files.write();
        let file = fds.get_mut(fd.0 as usize).and_then(Option::take);
        self.generation.fetch_add(1, Ordering::Release);
        file.ok_or(Error::BadFd)
    }
}

impl FileSystem {
    /// What every write of `len` bytes through open file `f` does first: clears the
    /// file's setuid/setgid bits when `f` was opened by a caller without root's
    /// privileges (Linux's `file_remove_privs`).
    pub(crate) fn before_write(&self, f: &OpenFile, len: usize) -> Result<()> {
        if f.drop_privs && len > 0 {
            self.drop_privs_on_write(&f.inode)?;
        }
        Ok(())
    }

    pub(crate) fn file(&self, fd: Fd) -> Result<Arc<OpenFile>> {
        self.fds.get(fd)
    }

    /// Closes a descriptor; an unlinked file is freed with its last descriptor.
    pub fn close(&self, fd: Fd) -> Result<()> {
        let file = self.fds.take(fd)?;
        self.drop_open(&file.inode);
        Ok(())
    }

    pub(crate) fn drop_open(&self, inode: &Arc<Inode>) {
        let mut st = self.write_state(inode);
        if inode.opens.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.release_if_unused(inode, &mut st);
        }
    }

    /// Reads at the descriptor's position and advances it.
    pub fn read(&self, fd: Fd, buf: &mut [u8]) -> Result<usize> {
        let f = self.file(fd)?;
        if !f.readable {
            return Err(Error::BadFd);
        }
        let mut pos = f.pos.lock();
        let n = self.read_inode(&f.inode, *pos, buf, f.client)?;
        *pos += n as u64;
        Ok(n)
    }

    /// Reads at `off` without moving the position.
    pub fn pread(&self, fd: Fd, buf: &mut [u8], off: u64) -> Result<usize> {
        let f = self.file(fd)?;
        if !f.readable {
            return Err(Error::BadFd);
        }
        self.read_inode(&f.inode, off, buf, f.client)
    }

    /// Writes at the descriptor's position (the end with `O_APPEND`) and advances it.
    /// Durable when it returns.
    pub fn write(&self, fd: Fd, buf: &[u8]) -> Result<usize> {
        let f = self.file(fd)?;
        if !f.writable {
            return Err(Error::BadFd);
        }
        self.before_write(&f, buf.len())?;
        let mut pos = f.pos.lock();
        let at = if f.append { None } else { Some(*pos) };
        let end = self.write_inode(&f.inode, at, buf, f.client)?;
        // As in Linux, a write of nothing leaves the position alone, even with
        // O_APPEND.
        if !buf.is_empty() {
            *pos = end;
        }
        Ok(buf.len())
    }

    /// Writes at `off` without moving the position (at the end with `O_APPEND`, as
    /// Linux does). Durable when it returns.
    pub fn pwrite(&self, fd: Fd, buf: &[u8], off: u64) -> Result<usize> {
        let f = self.file(fd)?;
        if !f.writable {
            return Err(Error::BadFd);
        }
        self.before_write(&f, buf.len())?;
        let at = if f.append { None } else { Some(off) };
        self.write_inode(&f.inode, at, buf, f.client)?;
        Ok(buf.len())
    }

    /// Moves the descriptor's position.
    pub fn lseek(&self, fd: Fd, off: i64, whence: Whence) -> Result<u64> {
        let f = self.file(fd)?;
        let mut pos = f.pos.lock();
        let base = match whence {
            Whence::Set => 0,
            Whence::Cur => *pos as i64,
            Whence::End => f.inode.state.read().size as i64,
            Whence::Data | Whence::Hole => {
                *pos = self.seek_data_hole(&f.inode, off, whence == Whence::Hole)?;
                return Ok(*pos);
            }
        };
        let new = base
            .checked_add(off)
            .filter(|&n| n >= 0)
            .ok_or_else(|| Error::Invalid("seek before the start of the file".into()))?;
        *pos = new as u64;
        Ok(*pos)
    }

    /// Nothing to write — every operation is durable when it returns — but the
    /// descriptor is checked, and a failure of the disk under a page-cache region to
    /// take an earlier write is reported here, as `fsync` does.
    pub fn fsync(&self, fd: Fd) -> Result<()> {
        self.file(fd)?;
        self.pm.fence();
        self.sync_result()
    }

    /// Copy-on-write write of `buf` at `at` (`None`: at the end). Returns the offset
    /// just past the data written, once the data is durable.
    pub(crate) fn write_inode(
        &self,
        inode: &Arc<Inode>,
        at: Option<u64>,
        buf: &[u8],
        client: Client,
    ) -> Result<u64> {
        let t0 = self
            .mover
            .wants_latency(client)
            .then(std::time::Instant::now);
        let _naive = self.lock_across_wait.then(|| inode.io_lock.lock());
        // SAFETY: `buf` and the returned page buffers live until the wait right after,
        // which returns, `Ok` or `Err`, only once the copy is over.
        let started = unsafe { self.start_write_inode(inode, at, buf, client)? };
        self.mover.wait(started.pending)?;
        if let Some(t0) = t0 {
            self.mover.note_latency(client, t0.elapsed());
        }
        Ok(started.end)
    }

    /// The orderless write (EASYIO §4.2): under the inode lock, start the data copy,
    /// append and commit the entry carrying its SN, and release the lock — without
    /// waiting for the copy, which the caller does next.
    ///
    /// # Safety
    /// `buf` must stay valid and unmodified until `pending` of the result is done.
    pub(crate) unsafe fn start_write_inode(
        &self,
        inode: &Arc<Inode>,
        at: Option<u64>,
        buf: &[u8],
        client: Client,
    ) -> Result<StartedWrite> {
        let mut st = self.lock_settled(inode)?;
        match st.kind {
            FileKind::Dir => return Err(Error::IsDir),
            FileKind::File => {}
            _ => return Err(Error::Invalid("write to a file that is not regular".into())),
        }
        let off = at.unwrap_or(st.size);
        if buf.is_empty() {
            return Ok(StartedWrite {
                end: off,
                pending: Pending::Done,
                _pages: Vec::new(),
            });
        }
        // Settled: no copy of an earlier write runs, so the log may be compacted (a
        // compacted log carries no SN; see `maybe_clean`).
        self.maybe_clean(inode, &mut st);
        // SAFETY: forwarded from our caller.
        let (staged, pending, pages) =
            unsafe { self.stage_data(inode.ino, &mut st, off, buf, now_ns(), client)? };
        // Declared after `pages`: a panic below waits for the copy before freeing them.
        let running = Unwaited::new(&*self.mover, pending);
        let sealed = staged.sealed;
        let displaced = self.commit_one(&mut st, staged);
        if sealed {
            // The sealed write's commit: its data and entry durable at once. The DRAM
            // state was applied first, under the lock held until after this fence,
            // so that its stores run while the data streams out: a store after the
            // fence waits until the data is written. The displaced blocks are retired
            // only after it, once the entry that stops naming them is durable.
            self.close_stage();
        }
        st.last_write = pending;
        self.retire_after(pending, displaced);
        Ok(StartedWrite {
            end: off + buf.len() as u64,
            pending: running.hand_on(),
            _pages: pages,
        })
    }

    /// Level 2 of the two-level lock for writers: the inode write-locked with no copy of
    /// an earlier write still running. The level-1 lock is never held while waiting.
    pub(crate) fn lock_settled<'a>(
        &self,
        inode: &'a Arc<Inode>,
    ) -> Result<RwLockWriteGuard<'a, InodeState>> {
        loop {
            let mut st = self.write_state(inode);
            let p = st.last_write;
            if self.mover.is_done(p) {
                st.last_write = Pending::Done;
                return Ok(st);
            }
            drop(st);
            self.mover.wait(p)?;
        }
    }

    /// Allocates new blocks for the pages `buf` touches at `off`, fills them — the
    /// untouched parts of partial pages from the old blocks, bytes past the old size as
    /// zeros — through the mover, and stages the write entries carrying the copy's SN.
    /// Nothing is committed. Returns the merged partial pages, which must outlive the
    /// copy. A sealed write ([`Staged::sealed`]) is returned unfenced: the caller's
    /// [`FileSystem::close_stage`] commits it.
    ///
    /// # Safety
    /// `buf` must stay valid and unmodified until the returned copy is done.
    pub(crate) unsafe fn stage_data(
        &self,
        ino: u64,
        st: &mut InodeState,
        off: u64,
        buf: &[u8],
        now: i64,
        client: Client,
    ) -> Result<(Staged, Pending, Vec<Vec<u8>>)> {
        let end = off
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or(Error::FileTooBig)?;
        let (p0, p1) = (off / BLOCK_SIZE, end.div_ceil(BLOCK_SIZE));
        let extents = self.alloc_blocks(p1 - p0)?;
        // Inline for writes of up to 64 KiB: the write path allocates nothing it can
        // keep on the stack.
        let blocks: SmallVec<[u64; 16]> = extents
            .iter()
            .flat_map(|e| e.start..e.start + e.len)
            .collect();
        // Partial first and last pages are merged in DRAM; whole pages go straight
        // from `buf`.
        let head_partial =
            !off.is_multiple_of(BLOCK_SIZE) || (end < p1 * BLOCK_SIZE && p1 - p0 == 1);
        let tail_partial = !end.is_multiple_of(BLOCK_SIZE) && (p1 - p0 > 1 || !head_partial);
        let head_buf = head_partial.then(|| self.merged_page(st, p0, off, buf));
        let tail_buf = tail_partial.then(|| self.merged_page(st, p1 - 1, off, buf));
        // One extent copied by this thread: the entry is sealed with its data's seal
        // and commits itself under staging's fence (no tail store).
        let mut seal = (extents.len() == 1 && self.mover.mode() == mover::Mode::Cpu)
            .then(pmem::seal::Seal::new);
        let pending = {
            let pieces = write_pieces(
                &blocks,
                (p0, p1),
                off,
                buf,
                head_buf.as_deref(),
                tail_buf.as_deref(),
            );
            // SAFETY: `buf` per our caller; the merged pages are returned to the caller,
            // who keeps them until the copy is done (moving a Vec keeps its heap buffer),
            // and until then a panic waits for the copy before they are freed (`running`).
            // The fence that closes staging (below) also covers the CPU's copies.
            unsafe { self.start_data_copy(client, &pieces, seal.as_mut()) }
        };
        let pages: Vec<Vec<u8>> = head_buf.into_iter().chain(tail_buf).collect();
        // Declared after `pages`, so dropped (waiting) before them on a panic.
        let running = Unwaited::new(&*self.mover, pending);
        if pending == Pending::Failed {
            // Nothing copies into the new blocks any more and nothing was committed: the
            // file keeps its old content. Entries staged early lie past the tail, where
            // the next staging overwrites them.
            for x in extents {
                self.blocks.free(x);
            }
            return Err(Error::Io {
                source: mover::Error::CopyFailed,
            });
        }
        // After the data: the entry's line is written with a non-temporal store, so
        // there is no line to fetch while the data streams out, and the one fence
        // that closes staging covers both.
        let staged = match seal {
            Some(seal) => {
                let e = write_entry(st, p0, extents[0], end, now, 0);
                self.stage_sealed_unfenced(ino, st, e, seal.finish())
            }
            None => self.stage_write_entries(ino, st, p0, &extents, end, now, pending),
        };
        match staged {
            Ok(mut staged) => {
                // A sealed write's fence is its commit, issued by the caller once the
                // DRAM state is applied (see `start_write_inode`).
                if !staged.sealed {
                    self.close_stage();
                }
                staged.new_data = extents;
                Ok((staged, running.hand_on(), pages))
            }
            Err(e) => {
                self.close_stage();
                // The copy may still be running into these blocks: let it finish first.
                drop(running);
                for x in extents {
                    self.blocks.free(x);
                }
                Err(e)
            }
        }
    }

    /// [`Self::stage_data`] for small data written at offset 0 by this thread (symlink
    /// targets): nothing is left pending.
    pub(crate) fn stage_cpu_data(
        &self,
        ino: u64,
        st: &mut InodeState,
        data: &[u8],
        now: i64,
    ) -> Result<Staged> {
        let n = (data.len() as u64).div_ceil(BLOCK_SIZE);
        let extents = self.alloc_blocks(n)?;
        let mut at = 0usize;
        for e in &extents {
            for b in e.start..e.start + e.len {
                let chunk = &data[at..(at + BLOCK_SIZE as usize).min(data.len())];
                self.pm.copy_nt(b * BLOCK_SIZE, chunk);
                at += chunk.len();
            }
        }
        let staged =
            self.stage_write_entries(ino, st, 0, &extents, data.len() as u64, now, Pending::Done);
        self.close_stage();
        match staged {
            Ok(mut staged) => {
                staged.new_data = extents;
                Ok(staged)
            }
            Err(e) => {
                extents.iter().for_each(|&x| self.blocks.free(x));
                Err(e)
            }
        }
    }

    /// Stages one write entry per extent of new blocks for pages from `p0`, without the
    /// closing fence (the caller records the extents as the staged data, and fences).
    #[allow(clippy::too_many_arguments)]
    fn stage_write_entries(
        &self,
        ino: u64,
        st: &mut InodeState,
        p0: u64,
        extents: &[Extent],
        end: u64,
        now: i64,
        pending: Pending,
    ) -> Result<Staged> {
        let sn = if crate::fault::active(crate::fault::Fault::AsyncEntryWithoutSn) {
            0
        } else {
            pending.raw()
        };
        let mut entries = Vec::with_capacity(extents.len());
        let mut pg = p0;
        for &e in extents {
            entries.push(write_entry(st, pg, e, end, now, sn));
            pg += e.len;
        }
        self.stage_unfenced(ino, st, entries)
    }

    /// Starts the copies of a write's `pieces` through the mover, or — with `seal` —
    /// copies them on this thread, adding them to the seal in order, unfenced.
    ///
    /// # Safety
    /// As for [`mover::Mover::start_write_unfenced`].
    unsafe fn start_data_copy(
        &self,
        client: Client,
        pieces: &[mover::WritePiece<'_>],
        seal: Option<&mut pmem::seal::Seal>,
    ) -> Pending {
        let Some(seal) = seal else {
            // SAFETY: forwarded from our caller.
            return unsafe { self.mover.start_write_unfenced(client, pieces) };
        };
        for p in pieces {
            self.pm.copy_nt_sealed(p.dst, p.src, seal);
        }
        Pending::Done
    }

    /// Gives back the data blocks of a staged write that will not be committed.
    pub(crate) fn release_staged_data(&self, staged: &Staged) {
        for &x in &staged.new_data {
            self.blocks.free(x);
        }
    }

    /// Page `pg` as it will be after writing `buf` at `off`.
    fn merged_page(&self, st: &InodeState, pg: u64, off: u64, buf: &[u8]) -> Vec<u8> {
        let mut page = vec![0u8; BLOCK_SIZE as usize];
        let start = pg * BLOCK_SIZE;
        if let Some(b) = st.pages.get(pg) {
            let valid = st.size.saturating_sub(start).min(BLOCK_SIZE) as usize;
            self.pm.read(b * BLOCK_SIZE, &mut page[..valid]);
        }
        let lo = off.max(start);
        let hi = (off + buf.len() as u64).min(start + BLOCK_SIZE);
        page[(lo - start) as usize..(hi - start) as usize]
            .copy_from_slice(&buf[(lo - off) as usize..(hi - off) as usize]);
        page
    }

    /// Reads up to `buf.len()` bytes at `off`; holes read as zeros.
    pub(crate) fn read_inode(
        &self,
        inode: &Arc<Inode>,
        off: u64,
        buf: &mut [u8],
        client: Client,
    ) -> Result<usize> {
        let t0 = self
            .mover
            .wants_latency(client)
            .then(std::time::Instant::now);
        let _naive = self.lock_across_wait.then(|| inode.io_lock.lock());
        // SAFETY: `buf` stays borrowed, and the guard kept, until the wait right after,
        // which returns, `Ok` or `Err`, only once the copy is over.
        let (n, pending, guard) = unsafe { self.start_read_inode(inode, off, buf, client)? };
        let r = self.mover.wait(pending);
        drop(guard);
        r?;
        if let Some(t0) = t0 {
            self.mover.note_latency(client, t0.elapsed());
        }
        Ok(n)
    }

    /// Starts a read: waits (level 2) for the latest write's copy, looks the blocks up
    /// under the inode's read lock, registers with the epoch so the blocks stay
    /// allocated, releases the lock and starts the copy. A read never delays a later
    /// write: writes never touch blocks a reader may still copy from.
    ///
    /// # Safety
    /// `buf` must stay valid and untouched until the returned copy is done, and the
    /// guard must be kept until then.
    pub(crate) unsafe fn start_read_inode(
        &self,
        inode: &Arc<Inode>,
        off: u64,
        buf: &mut [u8],
        client: Client,
    ) -> Result<(usize, Pending, ReadGuard<'_>)> {
        let (n, segs, guard) = {
            let st = self.settled_for_read(inode)?;
            if off >= st.size || buf.is_empty() {
                return Ok((0, Pending::Done, self.epoch.pin()));
            }
            let n = (st.size - off).min(buf.len() as u64) as usize;
            let segs = segments(&st.pages, off, n as u64);
            (n, segs, self.epoch.pin())
        };
        let mut pieces = Vec::with_capacity(segs.len());
        let mut rest = &mut buf[..n];
        for (len, src) in segs {
            let (this, tail) = rest.split_at_mut(len);
            rest = tail;
            match src {
                Some(src) => pieces.push(ReadPiece { src, dst: this }),
                None => this.fill(0),
            }
        }
        // SAFETY: forwarded from our caller.
        let pending = unsafe { self.mover.start_read_for(client, &mut pieces) };
        Ok((n, pending, guard))
    }

    /// Where bytes `[off, off + len)` of file `ino` lie in the region, for a reader
    /// in another process that copies them from its own read-only mapping: the
    /// file's size, then (length, region offset or `None` for a hole) pieces in file
    /// order, clipped to the size. Waits for the latest write's copy first, as a read
    /// does. Trusted (no permission check). The blocks stay the file's data only
    /// while a registration of that reader in the epoch (see
    /// [`FileSystem::set_external_readers`]) made before this call covers them.
    pub fn map_inode(&self, ino: u64, off: u64, len: u64) -> Result<(u64, Vec<Segment>)> {
        let inode = self.inode(ino)?;
        let st = self.settled_for_read(&inode)?;
        let n = st.size.saturating_sub(off).min(len);
        Ok((st.size, segments(&st.pages, off, n)))
    }

    /// The inode's state under its read lock, once the copy of its latest write is
    /// done (a read never sees a block whose copy is still running); `EISDIR` for a
    /// directory.
    fn settled_for_read<'i>(&self, inode: &'i Inode) -> Result<RwLockReadGuard<'i, InodeState>> {
        loop {
            let st = inode.state.read();
            if st.kind == FileKind::Dir {
                return Err(Error::IsDir);
            }
            if self.mover.is_done(st.last_write) {
                return Ok(st);
            }
            let p = st.last_write;
            drop(st);
            self.mover.wait(p)?;
        }
    }

    pub(crate) fn truncate_inode(&self, inode: &Arc<Inode>, len: u64) -> Result<()> {
        if len > MAX_FILE_SIZE {
            return Err(Error::FileTooBig);
        }
        let mut st = self.lock_settled(inode)?;
        match st.kind {
            FileKind::Dir => return Err(Error::IsDir),
            FileKind::File => {}
            _ => {
                return Err(Error::Invalid(
                    "truncate of a file that is not regular".into(),
                ))
            }
        }
        let now = now_ns();
        let mut entries = Vec::new();
        let mut cow: Vec<Extent> = Vec::new();
        // Shrinking into the middle of a page: copy that page with its tail zeroed, so
        // bytes past the size are always zero on the region and a later grow exposes
        // no stale data.
        let pg = len / BLOCK_SIZE;
        if len < st.size && !len.is_multiple_of(BLOCK_SIZE) {
            if let Some(old) = st.pages.get(pg) {
                let mut page = vec![0u8; BLOCK_SIZE as usize];
                self.pm
                    .read(old * BLOCK_SIZE, &mut page[..(len % BLOCK_SIZE) as usize]);
                cow = self.alloc_blocks(1)?;
                // One page, copied by this thread: nothing left pending under the lock.
                self.pm.copy_persist(cow[0].start * BLOCK_SIZE, &page);
                entries.push(Entry::Write {
                    pgoff: pg,
                    block: cow[0].start,
                    npages: 1,
                    size: st.size,
                    mtime: now,
                    sn: 0,
                });
            }
        }
        entries.push(Entry::Attr {
            mask: attr::SIZE | attr::MTIME | attr::CTIME,
            mode: 0,
            uid: 0,
            gid: 0,
            size: len,
            atime: 0,
            mtime: now,
            ctime: now,
        });
        let staged = match self.stage(inode.ino, &mut st, entries) {
            Ok(s) => s,
            Err(e) => {
                cow.into_iter().for_each(|x| self.blocks.free(x));
                return Err(e);
            }
        };
        let displaced = self.commit_one(&mut st, staged);
        self.retire(displaced);
        self.maybe_clean(inode, &mut st);
        Ok(())
    }
}

/// A write whose entry is committed and whose copy may still be running.
/// A started copy that nobody waits for yet: waited out if dropped, so that an early
/// return or a panic cannot free the buffers it reads while it runs.
struct Unwaited<'a> {
    mover: &'a dyn mover::Mover,
    pending: Option<Pending>,
}

impl<'a> Unwaited<'a> {
    fn new(mover: &'a dyn mover::Mover, pending: Pending) -> Unwaited<'a> {
        Unwaited {
            mover,
            pending: Some(pending),
        }
    }

    /// Hands the copy on to a caller that will wait for it.
    fn hand_on(mut self) -> Pending {
        self.pending.take().expect("handed on once")
    }
}

impl Drop for Unwaited<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.pending.take() {
            // Whether it failed is reported elsewhere; only that it is over matters.
            let _ = self.mover.wait(p);
        }
    }
}

pub(crate) struct StartedWrite {
    /// Offset just past the data written.
    pub end: u64,
    pub pending: Pending,
    /// Merged partial pages the copy reads from.
    pub _pages: Vec<Vec<u8>>,
}

/// The write entry for pages from `pgoff` now in the blocks of `e`, for a write
/// ending at `end` at time `now`, with SN `sn`.
fn write_entry(st: &InodeState, pgoff: u64, e: Extent, end: u64, now: i64, sn: u64) -> Entry {
    Entry::Write {
        pgoff,
        block: e.start,
        npages: e.len as u32,
        size: st.size.max(end),
        mtime: now,
        sn,
    }
}

/// The copies of one write: the merged partial first and last pages (`head`, `tail`,
/// present when partial) and, between them, runs of whole pages of `buf` that land in
/// contiguous blocks, one piece per run. `blocks[i]` is the new block of page `p0 + i`.
// Inlined into `stage_data`: as a call, returning the SmallVec by value cost `async`
// 4 KiB overwrites (DWOL) about a fifth of their throughput.
#[inline(always)]
fn write_pieces<'a>(
    blocks: &[u64],
    (p0, p1): (u64, u64),
    off: u64,
    buf: &'a [u8],
    head: Option<&'a [u8]>,
    tail: Option<&'a [u8]>,
) -> SmallVec<[WritePiece<'a>; 4]> {
    let mut pieces: SmallVec<[WritePiece<'a>; 4]> = SmallVec::new();
    let last_whole = if tail.is_some() { p1 - 1 } else { p1 };
    let mut p = p0;
    while p < p1 {
        let dst = blocks[(p - p0) as usize] * BLOCK_SIZE;
        let partial = match (head, tail) {
            (Some(h), _) if p == p0 => Some(h),
            (_, Some(t)) if p == p1 - 1 => Some(t),
            _ => None,
        };
        if let Some(src) = partial {
            pieces.push(WritePiece { dst, src });
            p += 1;
            continue;
        }
        let mut q = p + 1;
        while q < last_whole && blocks[(q - p0) as usize] == blocks[(q - p0 - 1) as usize] + 1 {
            q += 1;
        }
        let from = (p * BLOCK_SIZE - off) as usize;
        let to = (q * BLOCK_SIZE - off) as usize;
        pieces.push(WritePiece {
            dst,
            src: &buf[from..to],
        });
        p = q;
    }
    pieces
}

/// Where bytes `[off, off + n)` of a file lie: (length, region offset or `None` for a
/// hole) pieces in file order, contiguous blocks merged.
fn segments(pages: &crate::index::PageIndex, off: u64, n: u64) -> Vec<Segment> {
    let mut segs: Vec<Segment> = Vec::new();
    let mut pos = off;
    let end = off + n;
    while pos < end {
        let pg = pos / BLOCK_SIZE;
        let in_page = pos % BLOCK_SIZE;
        let len = (BLOCK_SIZE - in_page).min(end - pos);
        let src = pages.get(pg).map(|b| b * BLOCK_SIZE + in_page);
        match (segs.last_mut(), src) {
            (Some((l, Some(prev))), Some(s)) if *prev + *l as u64 == s => *l += len as usize,
            (Some((l, None)), None) => *l += len as usize,
            _ => segs.push((len as usize, src)),
        }
        pos += len;
    }
    segs
}
