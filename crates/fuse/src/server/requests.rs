//! The request handlers: each one a call of the `fs` handle API as the caller.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use fs::{FileSystem, OpenFlags as FsFlags, SetAttr, Whence};
use fuser::{
    AccessFlags, BsdFileFlags, Errno, FileHandle, Filesystem, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use super::{errno, fd, name, Server};
use crate::attr::{file_attr, file_type, negative, time, DIR_OPEN_FLAGS, ENTRY_TTL, NEGATIVE_TTL};
use crate::inval;

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
        // Through io_uring, the data is read straight into the ring entry's buffer.
        let ring = crate::uring::reply_buffer(size as usize);
        self.dispatch(move || {
            if let Some(mut ring) = ring {
                let buf = ring.as_mut_slice();
                return match read_at(&fs, (ino.0, fh), buf, offset, fill_pages) {
                    Ok(n) => reply.data(&buf[..n]),
                    Err(e) => reply.error(errno(&e)),
                };
            }
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
