//! The FUSE server: the state its request handlers share and the replies they make
//! through; the handlers themselves are in [`requests`].

mod requests;

use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fs::{Fd, FileSystem, OpenFlags as FsFlags, SetAttr, Stat};
use fuser::{
    Errno, FileHandle, FopenFlags, Generation, ReplyAttr, ReplyEmpty, ReplyEntry, ReplyXattr,
    Request,
};

use crate::attr::{create_open_flags, file_attr, file_open_flags, ATTR_TTL, ENTRY_TTL};
use crate::buffers::ReadBuffers;
use crate::inval::Invalidator;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_first_given_has_its_attributes_for_no_time() {
        let st = crate::lookups::test_stat;
        let dir = st(6, fs::FileKind::Dir);
        let ttl = Duration::from_secs(10);
        assert_eq!(Server::entry_attr_ttl(&dir, true, ttl), Duration::ZERO);
        assert_eq!(Server::entry_attr_ttl(&dir, false, ttl), ttl);
        let file = st(5, fs::FileKind::File);
        assert_eq!(Server::entry_attr_ttl(&file, true, ttl), ttl);
    }
}
