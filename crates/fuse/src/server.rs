//! The request handlers: each one a call of the `fs` handle API as the caller.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fs::{Fd, FileSystem, OpenFlags as FsFlags, SetAttr, Stat, Whence};
use fuser::{
    AccessFlags, BsdFileFlags, Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::attr::{
    create_open_flags, file_attr, file_open_flags, file_type, negative, time, ATTR_TTL,
    DIR_OPEN_FLAGS, ENTRY_TTL, NEGATIVE_TTL,
};
use crate::buffers::ReadBuffers;
use crate::inval::{self, Invalidator};
use crate::lookups::LookupCounts;
use crate::options::Options;
use crate::uthreads::{HandlerStats, Uthreads};

// FUSE names the root inode 1, and inode numbers are passed through unchanged.
const _: () = assert!(fs::ROOT_INO == 1);

/// The open flags passed on to the file system: the access mode and those that change
/// what a descriptor does. The kernel handles the others (`O_CREAT` and `O_EXCL` come
/// as `create`, `O_NONBLOCK`, `O_SYNC` and `O_DIRECT` change nothing here: every write
/// is durable when it returns).
const PASSED_FLAGS: i32 = libc::O_ACCMODE | libc::O_TRUNC | libc::O_APPEND;

/// How many `FLUSH` requests the kernel sent, for inspection while the mount runs: at
/// most one, answered `ENOSYS` so that the kernel sends no more (see
/// [`Server`]'s `flush`).
#[derive(Clone, Default)]
pub struct Flushes(Arc<AtomicU64>);

impl Flushes {
    /// The `FLUSH` requests received so far.
    pub fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The FUSE file system: the `fs` file system, the lookup counts and, in `async` mode,
/// the uthreads that serve reads, writes and fsyncs.
pub struct Server {
    fs: Arc<FileSystem>,
    lookups: LookupCounts,
    /// Invalidates what the kernel caches when another door changes the image.
    inval: Arc<Invalidator>,
    buffers: Arc<ReadBuffers>,
    uthreads: Option<Uthreads>,
    writeback_cache: bool,
    /// Directories are opened and released without a request (`FUSE_NO_OPENDIR_SUPPORT`,
    /// if the kernel offers it): the first `opendir` is answered `ENOSYS`, and the kernel
    /// sends no more, nor any `releasedir`. A directory handle holds nothing here: the
    /// kernel checked the opener's permission, and a listing goes by inode and cookie.
    no_opendir: bool,
    /// How opened files are served: through the kernel's page cache unless the options
    /// ask for `FOPEN_DIRECT_IO`.
    open_flags: FopenFlags,
    /// How the handle a `create` opens is served (see [`create_open_flags`]).
    create_flags: FopenFlags,
    /// `FLUSH` requests received.
    flushes: Flushes,
}

/// An `fs` error as the errno the kernel passes on.
fn errno(e: &fs::Error) -> Errno {
    Errno::from_i32(e.errno())
}

/// A name the `fs` crate takes: names that are not UTF-8 cannot be stored.
fn name(n: &OsStr) -> Result<&str, Errno> {
    n.to_str().ok_or(Errno::EINVAL)
}

fn fd(fh: FileHandle) -> Fd {
    Fd(fh.0 as u32)
}

impl Server {
    /// A server for `fs` whose handlers all run on the threads that read requests,
    /// serving files through the kernel's page cache.
    pub fn new(fs: Arc<FileSystem>) -> Server {
        let lookups = LookupCounts::default();
        Server {
            fs,
            inval: Invalidator::new(lookups.clone()),
            lookups,
            buffers: Arc::default(),
            uthreads: None,
            writeback_cache: false,
            no_opendir: false,
            open_flags: file_open_flags(true, false),
            create_flags: create_open_flags(true, false),
            flushes: Flushes::default(),
        }
    }

    /// A server for `fs` as `opts` say: reads, writes and fsyncs as uthreads of a
    /// runtime of [`Options::uthread_workers`](crate::Options::uthread_workers)
    /// workers if that is not zero, and the kernel's writeback cache if asked for.
    pub fn with_options(fs: Arc<FileSystem>, opts: &Options) -> std::io::Result<Server> {
        let uthreads = match opts.uthread_workers {
            0 => None,
            n => Some(Uthreads::new(n)?),
        };
        Ok(Server {
            uthreads,
            writeback_cache: opts.writeback_cache(),
            open_flags: file_open_flags(opts.page_cache(), opts.writeback_cache()),
            create_flags: create_open_flags(opts.page_cache(), opts.writeback_cache()),
            ..Server::new(fs)
        })
    }

    /// The uthread handlers' counters, if handlers run as uthreads.
    pub fn handler_stats(&self) -> Option<HandlerStats> {
        self.uthreads.as_ref().map(Uthreads::stats)
    }

    /// Runs `handler` in a uthread if the server has them, else here.
    fn dispatch(&self, handler: impl FnOnce() + Send + 'static) {
        match &self.uthreads {
            Some(u) => u.run(handler),
            None => handler(),
        }
    }

    /// The flags an open passes to the file system. With the writeback cache the
    /// kernel places `O_APPEND` writes itself (at the size it keeps), so the flag is
    /// left to it.
    fn open_flags(&self, flags: i32) -> FsFlags {
        let mut f = flags & PASSED_FLAGS;
        if self.writeback_cache {
            f &= !libc::O_APPEND;
        }
        FsFlags(f)
    }

    /// The lookup counts, which outlive the server for inspection.
    pub fn lookups(&self) -> LookupCounts {
        self.lookups.clone()
    }

    /// The count of `FLUSH` requests, which outlives the server for inspection.
    pub fn flushes(&self) -> Flushes {
        self.flushes.clone()
    }

    /// The invalidator of the kernel's caches.
    pub(crate) fn invalidator(&self) -> Arc<Invalidator> {
        self.inval.clone()
    }

    /// How long the kernel may keep a reply built since [`Invalidator::changes`] was
    /// `since`: `ttl`, or zero if another door changed the image meanwhile (the reply
    /// may say what the change replaced, and reach the kernel after the change's
    /// invalidation).
    fn ttl(&self, since: u64, ttl: Duration) -> Duration {
        if self.inval.changes() == since {
            ttl
        } else {
            Duration::ZERO
        }
    }

    /// How long the kernel may keep the attributes of `st` it is given with an entry,
    /// `first` if it did not hold the inode: a directory the kernel did not hold gets
    /// them for no time, and asks again at its next use. A change of it through another
    /// door racing this reply could find nothing to invalidate while the reply is on its
    /// way; for a file the invalidation of its name covers that, but invalidating a
    /// directory's entry would also detach whatever is mounted below it.
    fn entry_attr_ttl(st: &Stat, first: bool, ttl: Duration) -> Duration {
        if first && st.kind == fs::FileKind::Dir {
            Duration::ZERO
        } else {
            ttl
        }
    }

    /// Replies with the entry `name` of directory `dir`, which the kernel then holds one
    /// more lookup of; the reply was built since [`Invalidator::changes`] was `since`.
    fn entry(&self, (dir, name): (u64, &str), since: u64, r: fs::Result<Stat>, reply: ReplyEntry) {
        match r {
            Ok(st) => {
                let first = self.lookups.add(&st, dir, name);
                let ttl = self.ttl(since, ENTRY_TTL);
                let attr_ttl = Self::entry_attr_ttl(&st, first, ttl);
                let (a, g) = (file_attr(&st), Generation(st.generation));
                reply.entry_with_ttls(&attr_ttl, &ttl, &a, g);
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn attr(r: fs::Result<Stat>, reply: ReplyAttr) {
        match r {
            Ok(st) => reply.attr(&ATTR_TTL, &file_attr(&st)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn empty(r: fs::Result<()>, reply: ReplyEmpty) {
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// `setattr`: a size change through an open handle is an `ftruncate` of it (allowed
    /// by the handle's access mode, not the file's mode bits); the rest one `setattr`.
    fn set(&self, req: &Request, ino: u64, fh: Option<FileHandle>, a: SetAttr) -> fs::Result<Stat> {
        let cred = crate::cred::of(req, 0);
        let user = self.fs.as_user(&cred);
        let mut a = a;
        if let (Some(size), Some(fh)) = (a.size, fh) {
            self.fs
                .watched_reshape(ino, size, || user.ftruncate(fd(fh), size))?;
            a.size = None;
        }
        if a == SetAttr::default() {
            return user.getattr(ino);
        }
        match a.size {
            Some(size) => self.fs.watched_reshape(ino, size, || user.setattr(ino, &a)),
            None => user.setattr(ino, &a),
        }
    }

    /// Creates `name` in `parent` and opens it, as `open(O_CREAT)` from a handle on the
    /// directory.
    fn create_open(
        &self,
        req: &Request,
        parent: u64,
        name: &str,
        (mode, umask, flags): (u32, u32, i32),
    ) -> fs::Result<(Stat, Fd)> {
        let dir = self
            .fs
            .open_ino(parent, FsFlags::PATH | FsFlags::DIRECTORY)?;
        let cred = crate::cred::of(req, umask);
        let user = self.fs.as_user(&cred);
        let f = self.open_flags(flags) | FsFlags(flags & libc::O_EXCL | libc::O_CREAT);
        // A file that exists (created since the kernel looked) is truncated by
        // `O_TRUNC`: its readers elsewhere must know (see `fs::DataChanges`).
        let existing = match flags & libc::O_TRUNC {
            0 => None,
            _ => user.fstatat(Some(dir), name, 0).ok().map(|st| st.ino),
        };
        let r = match existing {
            Some(ino) => self
                .fs
                .watched_reshape(ino, 0, || user.openat(Some(dir), name, f, mode)),
            None => user.openat(Some(dir), name, f, mode),
        };
        let _ = self.fs.close(dir);
        let fd = r?;
        match self.fs.fstat(fd) {
            Ok(st) => Ok((st, fd)),
            Err(e) => {
                let _ = self.fs.close(fd);
                Err(e)
            }
        }
    }

    /// Opens inode `ino` for the caller (`O_TRUNC` truncates even a file opened
    /// read-only, as Linux does; the `fs` crate checks write permission for it).
    fn open_as(&self, req: &Request, ino: u64, flags: i32) -> fs::Result<Fd> {
        let cred = crate::cred::of(req, 0);
        let open = || self.fs.as_user(&cred).open_ino(ino, self.open_flags(flags));
        match flags & libc::O_TRUNC {
            0 => open(),
            _ => self.fs.watched_reshape(ino, 0, open),
        }
    }

    fn xattr_reply(r: fs::Result<Vec<u8>>, size: u32, reply: ReplyXattr) {
        match r {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() > size as usize => reply.error(Errno::ERANGE),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// The value of an attribute (or the list of names) read into a buffer of the size
    /// the `fs` crate says it needs.
    fn read_sized(mut get: impl FnMut(&mut [u8]) -> fs::Result<usize>) -> fs::Result<Vec<u8>> {
        let n = get(&mut [])?;
        let mut buf = vec![0; n];
        let n = get(&mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// The entries of directory `ino`, open as handle `fh`, after cookie `offset`: by
    /// inode when directories are opened without a request (`fh` is then 0). A
    /// directory removed through another door lists as empty, as a removed directory
    /// does through a descriptor.
    fn listing(&self, ino: u64, fh: FileHandle, offset: u64) -> fs::Result<Vec<fs::DirEntryAt>> {
        if !self.no_opendir {
            return self.fs.readdir_fd(fd(fh), offset);
        }
        match self.fs.readdir_ino(ino, offset) {
            Err(e) if e.errno() == libc::ENOENT => Ok(Vec::new()),
            r => r,
        }
    }

    /// The attributes of a readdirplus entry, and one lookup of it for the kernel.
    fn plus_entry(&self, dir: u64, name: &str) -> Option<Stat> {
        self.fs.lookup(dir, name).ok()
    }
}

impl Filesystem for Server {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // O_TRUNC in `open` (one call, checked as the opener), readdirplus, lookups in
        // one directory in parallel, and the file system (not the kernel) clearing
        // setuid/setgid on writes, truncates and chowns. Each only if the kernel has it.
        for f in [
            InitFlags::FUSE_ATOMIC_O_TRUNC,
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_READDIRPLUS_AUTO,
            InitFlags::FUSE_PARALLEL_DIROPS,
            // Shared mappings of files opened without the page cache (Linux 6.6+).
            InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP,
            // Symlink targets kept by the kernel: a symlink never changes (a new one
            // under the same name is a new inode), and a change through another door
            // drops the inode's pages with it.
            InitFlags::FUSE_CACHE_SYMLINKS,
        ] {
            let _ = config.add_capabilities(f);
        }
        // The second version of "the server clears setuid/setgid" spares every write a
        // round trip: under the first, the kernel asks for `security.capability` before
        // each one. The fs clears the bits itself from the opener's credentials, which
        // is what the kernel's kill flags on write, setattr and open would ask for.
        if config
            .add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2)
            .is_err()
        {
            let _ = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV);
        }
        self.no_opendir = config
            .add_capabilities(InitFlags::FUSE_NO_OPENDIR_SUPPORT)
            .is_ok();
        // A kernel that cannot map a file served without the page cache refuses a
        // shared mapping of it (ENODEV): there, a creating handle keeps the cache too.
        if !config
            .capabilities()
            .contains(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP)
        {
            self.create_flags = self.open_flags;
        }
        if self.writeback_cache {
            config
                .add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE)
                .map_err(|_| std::io::Error::other("the kernel offers no FUSE writeback cache"))?;
        }
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEntry) {
        inval::handling();
        let Ok(n) = name(n) else {
            return reply.error(Errno::ENOENT);
        };
        let cred = crate::cred::of(req, 0);
        let since = self.inval.changes();
        match self.fs.as_user(&cred).lookup(parent.0, n) {
            // A negative entry: the kernel answers ENOENT itself until it times out,
            // or until the name is made (here, or through another door: invalidated).
            Err(e) if e.errno() == libc::ENOENT => {
                let ttl = self.ttl(since, NEGATIVE_TTL);
                reply.entry(&ttl, &negative(), Generation(0));
            }
            r => self.entry((parent.0, n), since, r, reply),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        inval::handling();
        self.lookups.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        inval::handling();
        let r = match fh {
            Some(fh) => self.fs.fstat(fd(fh)).or_else(|_| self.fs.getattr(ino.0)),
            None => self.fs.getattr(ino.0),
        };
        Self::attr(r, reply);
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        inval::handling();
        let a = SetAttr {
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(time),
            mtime: mtime.map(time),
        };
        Self::attr(self.set(req, ino.0, fh, a), reply);
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        inval::handling();
        match self.fs.readlink_ino(ino.0) {
            Ok(t) => reply.data(t.as_bytes()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        inval::handling();
        let Ok(n) = name(n) else {
            return reply.error(Errno::EINVAL);
        };
        let cred = crate::cred::of(req, umask);
        let since = self.inval.changes();
        let r = self
            .fs
            .as_user(&cred)
            .mknod_in(parent.0, n, mode, rdev as u64);
        self.entry((parent.0, n), since, r, reply);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        inval::handling();
        let Ok(n) = name(n) else {
            return reply.error(Errno::EINVAL);
        };
        let cred = crate::cred::of(req, umask);
        let since = self.inval.changes();
        let r = self.fs.as_user(&cred).mkdir_in(parent.0, n, mode);
        self.entry((parent.0, n), since, r, reply);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        inval::handling();
        let Ok(n) = name(n) else {
            return reply.error(Errno::ENOENT);
        };
        let cred = crate::cred::of(req, 0);
        Self::empty(self.fs.as_user(&cred).unlink_in(parent.0, n), reply);
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        inval::handling();
        let Ok(n) = name(n) else {
            return reply.error(Errno::ENOENT);
        };
        let cred = crate::cred::of(req, 0);
        Self::empty(self.fs.as_user(&cred).rmdir_in(parent.0, n), reply);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        inval::handling();
        let (Ok(n), Some(t)) = (name(link_name), target.to_str()) else {
            return reply.error(Errno::EINVAL);
        };
        let cred = crate::cred::of(req, 0);
        let since = self.inval.changes();
        let r = self.fs.as_user(&cred).symlink_in(parent.0, n, t);
        self.entry((parent.0, n), since, r, reply);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        inval::handling();
        let (Ok(n), Ok(nn)) = (name(n), name(newname)) else {
            return reply.error(Errno::EINVAL);
        };
        let cred = crate::cred::of(req, 0);
        let r = self
            .fs
            .as_user(&cred)
            .rename_in(parent.0, n, newparent.0, nn, flags.bits());
        Self::empty(r, reply);
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        inval::handling();
        let Ok(nn) = name(newname) else {
            return reply.error(Errno::EINVAL);
        };
        let cred = crate::cred::of(req, 0);
        let since = self.inval.changes();
        let r = self.fs.as_user(&cred).link_ino(ino.0, newparent.0, nn);
        self.entry((newparent.0, nn), since, r, reply);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        inval::handling();
        // A truncation by a caller other than root clears setuid/setgid (see `write`).
        let kills = flags.0 & libc::O_TRUNC != 0
            && req.uid() != 0
            && self
                .fs
                .getattr(ino.0)
                .is_ok_and(|st| privileged_mode(st.mode));
        let r = self.open_as(req, ino.0, flags.0);
        if kills {
            self.inval.attrs_now(ino.0);
        }
        match r {
            Ok(fd) => reply.opened(FileHandle(fd.0 as u64), self.open_flags),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        inval::handling();
        let (fs, fill_pages) = (self.fs.clone(), self.writeback_cache);
        let buffers = self.buffers.clone();
        self.dispatch(move || {
            let mut buf = buffers.take(size as usize);
            match read_at(&fs, (ino.0, fh), &mut buf, offset, fill_pages) {
                Ok(n) => reply.data(&buf[..n]),
                Err(e) => reply.error(errno(&e)),
            }
            buffers.give_back(buf);
        });
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        inval::handling();
        // A writer without CAP_FSETID: the fs clears setuid/setgid, which the kernel
        // must then forget it cached.
        let kills = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID)
            && self
                .fs
                .fstat(fd(fh))
                .is_ok_and(|st| privileged_mode(st.mode));
        // An appending write through the page cache: the kernel placed it at the size it
        // holds, the fs appends at the file's end. If another door grew the file since,
        // the kernel's pages of the range are not what the file holds there.
        let appending = flags.0 & libc::O_APPEND != 0;
        let misplaced = appending
            && !self.writeback_cache
            && self.fs.fstat(fd(fh)).is_ok_and(|st| st.size != offset);
        let inval = (kills || misplaced).then(|| self.inval.clone());
        let written = move |r: fs::Result<usize>, reply: ReplyWrite| {
            if let Some(inval) = inval {
                if kills {
                    inval.attrs_now(ino.0);
                }
                if misplaced {
                    inval.pages_later(ino.0);
                }
            }
            match r {
                Ok(n) => reply.written(n as u32),
                Err(e) => reply.error(errno(&e)),
            }
        };
        // An appending handle writes at the end, whatever the offset.
        let at = (!appending).then_some(offset);
        let len = data.len() as u64;
        let Some(u) = &self.uthreads else {
            let r = self
                .fs
                .watched_write(ino.0, at, len, || self.fs.pwrite(fd(fh), data, offset));
            return written(r, reply);
        };
        // The request's buffer is the reader thread's: the uthread gets a copy, in a
        // reused buffer.
        let (fs, buffers) = (self.fs.clone(), self.buffers.clone());
        let mut copy = buffers.take(data.len());
        copy.copy_from_slice(data);
        u.run(move || {
            let r = fs.watched_write(ino.0, at, len, || fs.pwrite(fd(fh), &copy, offset));
            buffers.give_back(copy);
            written(r, reply)
        });
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        inval::handling();
        self.flushes.0.fetch_add(1, Ordering::Relaxed);
        // Nothing is buffered here: every write was durable when it was answered. The
        // kernel sends `FLUSH` only with the writeback cache (`FOPEN_NOFLUSH` otherwise),
        // and then only after it has written the file's dirty pages back and had every
        // write answered; `ENOSYS` makes it stop sending it (`no_flush`) while keeping
        // that writeback at each `close`, which is what makes a closed file durable.
        // No lock is held here for it to release (the kernel keeps the locks).
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        inval::handling();
        Self::empty(self.fs.close(fd(fh)), reply);
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _ds: bool, reply: ReplyEmpty) {
        inval::handling();
        let fs = self.fs.clone();
        self.dispatch(move || Self::empty(fs.fsync(fd(fh)), reply));
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        inval::handling();
        if self.no_opendir {
            return reply.error(Errno::ENOSYS);
        }
        let cred = crate::cred::of(req, 0);
        let flags = FsFlags::RDONLY | FsFlags::DIRECTORY;
        match self.fs.as_user(&cred).open_ino(ino.0, flags) {
            Ok(fd) => reply.opened(FileHandle(fd.0 as u64), DIR_OPEN_FLAGS),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        inval::handling();
        let entries = match self.listing(ino.0, fh, offset) {
            Ok(v) => v,
            Err(e) => return reply.error(errno(&e)),
        };
        for e in entries {
            let kind = file_type(e.entry.kind.unwrap_or(fs::FileKind::File));
            if reply.add(INodeNo(e.entry.ino), e.offset, kind, &e.entry.name) {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        inval::handling();
        let since = self.inval.changes();
        let entries = match self.listing(ino.0, fh, offset) {
            Ok(v) => v,
            Err(e) => return reply.error(errno(&e)),
        };
        for e in entries {
            let dots = matches!(e.entry.name.as_str(), "." | "..");
            let st = if dots {
                self.fs.getattr(e.entry.ino).ok()
            } else {
                self.plus_entry(ino.0, &e.entry.name)
            };
            // An entry removed since the listing, or unreadable, is left out.
            let Some(st) = st else { continue };
            // The kernel takes a lookup of every entry but `.` and `..`.
            let first = !dots && self.lookups.add(&st, ino.0, &e.entry.name);
            let (a, g) = (file_attr(&st), Generation(st.generation));
            // One timeout for the entry and its attributes (see `entry_attr_ttl`).
            let ttl = Self::entry_attr_ttl(&st, first, self.ttl(since, ENTRY_TTL));
            if reply.add(INodeNo(st.ino), e.offset, &e.entry.name, &ttl, &a, g) {
                // Not sent: the kernel takes no lookup of it.
                if !dots {
                    self.lookups.forget(st.ino, 1);
                }
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        inval::handling();
        Self::empty(self.fs.close(fd(fh)), reply);
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, _ds: bool, reply: ReplyEmpty) {
        inval::handling();
        let r = match self.no_opendir {
            // Every change is durable when it returns: a descriptor only reports a
            // failure of a disk under a page-cache region.
            true => self
                .fs
                .open_ino(ino.0, FsFlags::RDONLY | FsFlags::DIRECTORY)
                .and_then(|d| {
                    let r = self.fs.fsync(d);
                    let _ = self.fs.close(d);
                    r
                }),
            false => self.fs.fsync(fd(fh)),
        };
        Self::empty(r, reply);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        inval::handling();
        match self.fs.statfs() {
            Ok(s) => reply.statfs(
                s.blocks,
                s.bfree,
                s.bavail,
                s.files,
                s.ffree,
                s.bsize as u32,
                s.namelen as u32,
                s.bsize as u32,
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        n: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        inval::handling();
        let Ok(n) = name(n) else {
            return reply.error(Errno::EOPNOTSUPP);
        };
        let r = self.fs.setxattr_ino(ino.0, n, value, flags);
        Self::empty(r, reply);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, n: &OsStr, size: u32, reply: ReplyXattr) {
        inval::handling();
        let Ok(n) = name(n) else {
            return reply.error(Errno::ENODATA);
        };
        let r = Self::read_sized(|buf| self.fs.getxattr_ino(ino.0, n, buf));
        Self::xattr_reply(r, size, reply);
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        inval::handling();
        let r = Self::read_sized(|buf| self.fs.listxattr_ino(ino.0, buf));
        Self::xattr_reply(r, size, reply);
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        inval::handling();
        let Ok(n) = name(n) else {
            return reply.error(Errno::ENODATA);
        };
        Self::empty(self.fs.removexattr_ino(ino.0, n), reply);
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        inval::handling();
        // Sent only without `default_permissions`: the mode bits, as Linux checks them.
        let r = self
            .fs
            .as_user(&crate::cred::of(req, 0))
            .access_ino(ino.0, mask.bits() & 7);
        Self::empty(r, reply);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        inval::handling();
        let Ok(n) = name(n) else {
            return reply.error(Errno::EINVAL);
        };
        let since = self.inval.changes();
        match self.create_open(req, parent.0, n, (mode, umask, flags)) {
            Ok((st, fd)) => {
                self.lookups.add(&st, parent.0, n);
                let (a, g) = (file_attr(&st), Generation(st.generation));
                let ttl = self.ttl(since, ENTRY_TTL);
                reply.created(&ttl, &a, g, FileHandle(fd.0 as u64), self.create_flags);
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        inval::handling();
        let r = self
            .fs
            .watched_reshape(ino.0, 0, || self.fs.fallocate(fd(fh), mode, offset, length));
        Self::empty(r, reply);
    }

    fn lseek(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        inval::handling();
        let whence = match whence {
            libc::SEEK_SET => Whence::Set,
            libc::SEEK_CUR => Whence::Cur,
            libc::SEEK_END => Whence::End,
            libc::SEEK_DATA => Whence::Data,
            libc::SEEK_HOLE => Whence::Hole,
            _ => return reply.error(Errno::EINVAL),
        };
        match self.fs.lseek(fd(fh), offset, whence) {
            Ok(off) => reply.offset(off as i64),
            Err(e) => reply.error(errno(&e)),
        }
    }
}

/// Reads file handle `fh` of inode `ino` at `offset`. With the writeback cache
/// (`fill_pages`) the kernel also reads through a handle open only for writing, to fill
/// the rest of a page a write covers in part (a program cannot: `read(2)` refuses such
/// a descriptor before asking the server); those reads go through a descriptor the
/// server opens for reading, as it would read the page itself.
fn read_at(
    fs: &FileSystem,
    (ino, fh): (u64, FileHandle),
    buf: &mut [u8],
    offset: u64,
    fill_pages: bool,
) -> fs::Result<usize> {
    match fs.pread(fd(fh), buf, offset) {
        Err(fs::Error::BadFd) if fill_pages => {
            let reader = fs.open_ino(ino, FsFlags::RDONLY)?;
            let r = fs.pread(reader, buf, offset);
            let _ = fs.close(reader);
            r
        }
        r => r,
    }
}

/// Whether a file of `mode` has a bit a write of an unprivileged caller clears.
fn privileged_mode(mode: u32) -> bool {
    mode & (libc::S_ISUID | libc::S_ISGID) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_first_given_has_its_attributes_for_no_time() {
        let st = |ino, kind| Stat {
            ino,
            generation: 1,
            kind,
            mode: 0o644,
            nlink: 1,
            uid: 0,
            gid: 0,
            rdev: 0,
            size: 0,
            blocks: 0,
            blksize: 4096,
            atime_ns: 0,
            mtime_ns: 0,
            ctime_ns: 0,
        };
        let dir = st(6, fs::FileKind::Dir);
        let ttl = Duration::from_secs(10);
        assert_eq!(Server::entry_attr_ttl(&dir, true, ttl), Duration::ZERO);
        assert_eq!(Server::entry_attr_ttl(&dir, false, ttl), ttl);
        let file = st(5, fs::FileKind::File);
        assert_eq!(Server::entry_attr_ttl(&file, true, ttl), ttl);
    }
}
