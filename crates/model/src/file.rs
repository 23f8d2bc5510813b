//! Open files: descriptors, reads and writes, seeking, truncation, `fallocate`.

use crate::{Body, Data, Fd, Id, Kind, Model, MAX_HOPS, NAME_MAX, R, ROOT};

/// `fallocate` mode bit: allocate without changing the size.
pub const FALLOC_KEEP_SIZE: u32 = 1;
/// `fallocate` mode bit: free the range (needs [`FALLOC_KEEP_SIZE`]).
pub const FALLOC_PUNCH_HOLE: u32 = 2;

/// The access mode of an open file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// `O_RDONLY`.
    Read,
    /// `O_WRONLY`.
    Write,
    /// `O_RDWR`.
    ReadWrite,
}

impl Access {
    fn read(self) -> bool {
        self != Access::Write
    }

    fn write(self) -> bool {
        self != Access::Read
    }
}

/// The flags of an `open` call the model knows, and the mode of a created file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenSpec {
    /// Access mode.
    pub access: Access,
    /// `O_CREAT`.
    pub creat: bool,
    /// `O_EXCL`.
    pub excl: bool,
    /// `O_TRUNC`.
    pub trunc: bool,
    /// `O_APPEND`.
    pub append: bool,
    /// `O_DIRECTORY`.
    pub directory: bool,
    /// `O_NOFOLLOW`.
    pub nofollow: bool,
    /// `O_TMPFILE`: the path names a directory; an unnamed file is made in it.
    pub tmpfile: bool,
    /// Permission bits of a created file (before the umask).
    pub mode: u32,
}

impl OpenSpec {
    /// `open(path, access)` with no other flag.
    pub fn new(access: Access) -> OpenSpec {
        OpenSpec {
            access,
            creat: false,
            excl: false,
            trunc: false,
            append: false,
            directory: false,
            nofollow: false,
            tmpfile: false,
            mode: 0,
        }
    }
}

/// An open file description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenFile {
    /// The inode.
    pub id: Id,
    /// Access mode.
    pub access: Access,
    /// `O_APPEND`.
    pub append: bool,
    /// File offset.
    pub pos: u64,
}

/// `lseek`'s `whence`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Whence {
    /// `SEEK_SET`.
    Set,
    /// `SEEK_CUR`.
    Cur,
    /// `SEEK_END`.
    End,
    /// `SEEK_DATA`: the next offset inside data.
    Data,
    /// `SEEK_HOLE`: the next offset inside a hole (or the end).
    Hole,
}

impl Model {
    /// The open file `fd`, or `EBADF`.
    pub fn fd(&self, fd: Fd) -> R<&OpenFile> {
        self.fds
            .get(fd as usize)
            .and_then(Option::as_ref)
            .ok_or(libc::EBADF)
    }

    fn fd_mut(&mut self, fd: Fd) -> &mut OpenFile {
        self.fds[fd as usize].as_mut().expect("checked open")
    }

    /// Every open descriptor, lowest first.
    pub fn open_fds(&self) -> Vec<(Fd, OpenFile)> {
        (0..self.fds.len())
            .filter_map(|i| Some((i as Fd, self.fds[i].clone()?)))
            .collect()
    }

    fn alloc_fd(&mut self, f: OpenFile) -> Fd {
        let slot = match self.fds.iter().position(Option::is_none) {
            Some(s) => s,
            None => {
                self.fds.push(None);
                self.fds.len() - 1
            }
        };
        self.fds[slot] = Some(f);
        slot as Fd
    }

    fn data_mut(&mut self, id: Id) -> &mut Data {
        match &mut self.node_mut(id).body {
            Body::File(d) => d,
            _ => panic!("model inode {id} is not a regular file"),
        }
    }

    /// `open(path, flags, mode)`: the lowest free descriptor. Opening a special file is
    /// `ENXIO` here (a socket's answer on Linux; what a FIFO or a device does is its
    /// driver's business, which callers leave out).
    pub fn open(&mut self, path: &str, f: &OpenSpec) -> R<Fd> {
        if f.creat && f.directory {
            return Err(libc::EINVAL);
        }
        let (id, created) = if f.tmpfile {
            (self.open_tmpfile(path, f)?, true)
        } else if f.creat {
            self.open_creat(path, f)?
        } else {
            (self.resolve(path, !f.nofollow)?, false)
        };
        self.may_open(id, f)?;
        // Linux truncates a regular file whatever the access mode (`O_RDONLY | O_TRUNC`
        // too); other kinds ignore the flag.
        if f.trunc && !created && self.node(id).kind() == Kind::File {
            self.truncate_id(id, 0)?;
        }
        Ok(self.alloc_fd(OpenFile {
            id,
            access: f.access,
            append: f.append,
            pos: 0,
        }))
    }

    /// The checks of `open` on the inode found, in Linux's order (`do_open`, then
    /// `may_open`).
    fn may_open(&self, id: Id, f: &OpenSpec) -> R<()> {
        let kind = self.node(id).kind();
        if f.creat && kind == Kind::Dir {
            return Err(libc::EISDIR);
        }
        // O_TMPFILE carries O_DIRECTORY's bit: it applies to the path, not the file.
        if f.directory && !f.tmpfile && kind != Kind::Dir {
            return Err(libc::ENOTDIR);
        }
        match kind {
            Kind::Symlink => Err(libc::ELOOP),
            Kind::Dir if f.access.write() || f.trunc => Err(libc::EISDIR),
            k if k.is_special() => Err(libc::ENXIO),
            _ => Ok(()),
        }
    }

    /// `O_TMPFILE`: an unnamed file in the directory `path` names.
    fn open_tmpfile(&mut self, path: &str, f: &OpenSpec) -> R<Id> {
        if f.creat || !f.access.write() {
            return Err(libc::EINVAL);
        }
        let dir = self.resolve(path, !f.nofollow)?;
        if !self.is_dir(dir) {
            return Err(libc::ENOTDIR);
        }
        let perm = f.mode & 0o7777 & !self.cfg.umask;
        let id = self.new_node(Body::File(Data::default()), perm, Some(dir));
        let n = self.node_mut(id);
        n.links = 0;
        n.linkable = !f.excl;
        Ok(id)
    }

    /// `O_CREAT`: the name is looked up from the path, then from the target of each
    /// symbolic link that leads nowhere (from the link's directory); the last missing
    /// name is created, as `open(2)` creates a dangling link's target.
    fn open_creat(&mut self, path: &str, f: &OpenSpec) -> R<(Id, bool)> {
        Self::check_path(path)?;
        let (mut base, mut rel, mut hops) = (ROOT, path.to_string(), 0usize);
        loop {
            let p = self.walk_parent(base, &rel, &mut hops)?;
            if p.name.is_empty() {
                return Ok((p.dir, false));
            }
            // A trailing slash (in the path or in a link's target) with O_CREAT is
            // refused before the name is looked up.
            if p.slash {
                return Err(libc::EISDIR);
            }
            if p.name.len() > NAME_MAX {
                return Err(libc::ENAMETOOLONG);
            }
            let Some(child) = self.children(p.dir).get(&p.name).copied() else {
                let perm = f.mode & 0o7777 & !self.cfg.umask;
                let id = self.new_node(Body::File(Data::default()), perm, Some(p.dir));
                self.children_mut(p.dir).insert(p.name.clone(), id);
                self.touch_dir(p.dir);
                return Ok((id, true));
            };
            if f.excl {
                return Err(libc::EEXIST);
            }
            let Body::Symlink(target) = &self.node(child).body else {
                return Ok((child, false));
            };
            if f.nofollow {
                return Err(libc::ELOOP);
            }
            hops += 1;
            if hops > MAX_HOPS {
                return Err(libc::ELOOP);
            }
            base = if target.starts_with('/') { ROOT } else { p.dir };
            rel = target.clone();
        }
    }

    /// `close`: an unnamed file goes with its last descriptor.
    pub fn close(&mut self, fd: Fd) -> R<()> {
        let f = self
            .fds
            .get_mut(fd as usize)
            .and_then(Option::take)
            .ok_or(libc::EBADF)?;
        self.gc(f.id);
        Ok(())
    }

    /// Closes every descriptor, as an unmount or a crash does.
    pub fn close_all(&mut self) {
        for (fd, _) in self.open_fds() {
            self.close(fd).expect("open descriptor");
        }
        self.fds.clear();
    }

    fn read_at(&self, id: Id, off: u64, len: usize) -> R<Vec<u8>> {
        match &self.node(id).body {
            Body::Dir { .. } => Err(libc::EISDIR),
            Body::File(d) => Ok(d.read(off, len)),
            _ => Err(libc::EINVAL),
        }
    }

    /// `read` of up to `len` bytes at the file offset, which advances.
    pub fn read(&mut self, fd: Fd, len: usize) -> R<Vec<u8>> {
        let f = self.fd(fd)?.clone();
        if !f.access.read() {
            return Err(libc::EBADF);
        }
        let out = self.read_at(f.id, f.pos, len)?;
        self.fd_mut(fd).pos += out.len() as u64;
        Ok(out)
    }

    /// `pread`.
    pub fn pread(&self, fd: Fd, off: u64, len: usize) -> R<Vec<u8>> {
        let f = self.fd(fd)?;
        if !f.access.read() {
            return Err(libc::EBADF);
        }
        self.read_at(f.id, off, len)
    }

    /// Stores `buf` at `off` in file `id`: the new end.
    fn write_at(&mut self, id: Id, off: u64, buf: &[u8]) -> R<u64> {
        if buf.is_empty() {
            return Ok(off);
        }
        let end = off + buf.len() as u64;
        if end > self.cfg.max_file {
            return Err(libc::EFBIG);
        }
        self.node_mut(id).mtime = None;
        self.data_mut(id).write(off, buf);
        Ok(end)
    }

    /// `write` at the file offset (at the end with `O_APPEND`); the offset advances.
    pub fn write(&mut self, fd: Fd, buf: &[u8]) -> R<usize> {
        let f = self.fd(fd)?.clone();
        if !f.access.write() {
            return Err(libc::EBADF);
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let at = if f.append { self.size(f.id) } else { f.pos };
        let end = self.write_at(f.id, at, buf)?;
        self.fd_mut(fd).pos = end;
        Ok(buf.len())
    }

    /// `pwrite` at `off` (at the end with `O_APPEND`, as Linux does); the offset stays.
    pub fn pwrite(&mut self, fd: Fd, buf: &[u8], off: u64) -> R<usize> {
        let f = self.fd(fd)?.clone();
        if !f.access.write() {
            return Err(libc::EBADF);
        }
        let at = if f.append { self.size(f.id) } else { off };
        self.write_at(f.id, at, buf)?;
        Ok(buf.len())
    }

    /// Size of inode `id` ([`crate::Node::size`]).
    pub fn size(&self, id: Id) -> u64 {
        self.node(id).size()
    }

    /// `lseek`: the new offset. `SEEK_DATA`/`SEEK_HOLE` follow tmpfs (page granular;
    /// `ENXIO` at or past the end); on a directory they are `EINVAL`.
    pub fn lseek(&mut self, fd: Fd, off: i64, whence: Whence) -> R<u64> {
        let f = self.fd(fd)?.clone();
        let new = match whence {
            Whence::Set => off,
            Whence::Cur => f.pos as i64 + off,
            Whence::End => self.size(f.id) as i64 + off,
            Whence::Data | Whence::Hole => {
                let Body::File(d) = &self.node(f.id).body else {
                    return Err(libc::EINVAL);
                };
                let off = u64::try_from(off).map_err(|_| libc::ENXIO)?;
                let at = if whence == Whence::Data {
                    d.seek_data(off)?
                } else {
                    d.seek_hole(off)?
                };
                at as i64
            }
        };
        if new < 0 {
            return Err(libc::EINVAL);
        }
        self.fd_mut(fd).pos = new as u64;
        Ok(new as u64)
    }

    pub(crate) fn truncate_id(&mut self, id: Id, len: u64) -> R<()> {
        match self.node(id).kind() {
            Kind::File => {}
            Kind::Dir => return Err(libc::EISDIR),
            _ => return Err(libc::EINVAL),
        }
        if len > self.cfg.max_file {
            return Err(libc::EFBIG);
        }
        self.data_mut(id).truncate(len);
        self.node_mut(id).mtime = None;
        Ok(())
    }

    /// `truncate(path, len)`.
    pub fn truncate(&mut self, path: &str, len: u64) -> R<()> {
        let id = self.resolve(path, true)?;
        self.truncate_id(id, len)
    }

    /// `ftruncate`: a descriptor not open for writing is `EINVAL`.
    pub fn ftruncate(&mut self, fd: Fd, len: u64) -> R<()> {
        let f = self.fd(fd)?.clone();
        if !f.access.write() {
            return Err(libc::EINVAL);
        }
        self.truncate_id(f.id, len)
    }

    /// `fallocate(fd, mode, off, len)` with mode 0, [`FALLOC_KEEP_SIZE`], or
    /// [`FALLOC_PUNCH_HOLE`] | [`FALLOC_KEEP_SIZE`], checked in Linux's order.
    pub fn fallocate(&mut self, fd: Fd, mode: u32, off: i64, len: i64) -> R<()> {
        let f = self.fd(fd)?.clone();
        if off < 0 || len <= 0 {
            return Err(libc::EINVAL);
        }
        if mode & !(FALLOC_KEEP_SIZE | FALLOC_PUNCH_HOLE) != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if mode & FALLOC_PUNCH_HOLE != 0 && mode & FALLOC_KEEP_SIZE == 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if !f.access.write() {
            return Err(libc::EBADF);
        }
        match self.node(f.id).kind() {
            Kind::File => {}
            Kind::Dir => return Err(libc::EISDIR),
            Kind::Fifo => return Err(libc::ESPIPE),
            _ => return Err(libc::ENODEV),
        }
        let (off, len) = (off as u64, len as u64);
        if off
            .checked_add(len)
            .is_none_or(|end| end > self.cfg.max_file)
        {
            return Err(libc::EFBIG);
        }
        self.node_mut(f.id).mtime = None;
        let d = self.data_mut(f.id);
        if mode & FALLOC_PUNCH_HOLE != 0 {
            d.punch(off, len);
        } else {
            d.allocate(off, len, mode & FALLOC_KEEP_SIZE != 0);
        }
        Ok(())
    }
}
