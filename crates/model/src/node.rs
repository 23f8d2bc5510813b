//! Inodes of the model: what each kind holds, and the attributes `stat` reports.

use std::collections::BTreeMap;

use crate::{Data, Id, PAGE};

/// The type of an inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A named pipe.
    Fifo,
    /// A Unix-domain socket.
    Socket,
    /// A character device.
    CharDev,
    /// A block device.
    BlockDev,
}

impl Kind {
    /// The `S_IFMT` bits of the kind.
    pub fn mode_bits(self) -> u32 {
        match self {
            Kind::File => libc::S_IFREG,
            Kind::Dir => libc::S_IFDIR,
            Kind::Symlink => libc::S_IFLNK,
            Kind::Fifo => libc::S_IFIFO,
            Kind::Socket => libc::S_IFSOCK,
            Kind::CharDev => libc::S_IFCHR,
            Kind::BlockDev => libc::S_IFBLK,
        }
    }

    /// The kind whose `S_IFMT` bits `mode` carries (`None` for an unknown type).
    pub fn from_mode(mode: u32) -> Option<Kind> {
        [
            Kind::File,
            Kind::Dir,
            Kind::Symlink,
            Kind::Fifo,
            Kind::Socket,
            Kind::CharDev,
            Kind::BlockDev,
        ]
        .into_iter()
        .find(|k| k.mode_bits() == mode & libc::S_IFMT)
    }

    /// Whether the kind is one of the special files `mknod` makes (no data).
    pub fn is_special(self) -> bool {
        matches!(
            self,
            Kind::Fifo | Kind::Socket | Kind::CharDev | Kind::BlockDev
        )
    }
}

/// What an inode holds.
#[derive(Clone, Debug)]
pub enum Body {
    /// A regular file's bytes.
    File(Data),
    /// A directory's entries and its parent (itself for the root).
    Dir {
        /// Name → inode, sorted.
        children: BTreeMap<String, Id>,
        /// The directory `..` names.
        parent: Id,
    },
    /// A symbolic link's target.
    Symlink(String),
    /// A FIFO, socket or device: no data, a device number for devices.
    Special {
        /// Which special file.
        kind: Kind,
        /// Device number (0 for FIFOs and sockets, as Linux stores them).
        rdev: u64,
    },
}

/// One inode.
#[derive(Clone, Debug)]
pub struct Node {
    /// Its contents.
    pub body: Body,
    /// Permission bits, `0o7777` at most.
    pub perm: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Directory entries naming it (non-directories; a directory's count is derived).
    pub links: u32,
    /// A directory that was removed, kept while a descriptor holds it.
    pub dead: bool,
    /// An `O_TMPFILE` file that `linkat` may still give a name (Linux's `I_LINKABLE`).
    pub linkable: bool,
    /// Access time in nanoseconds since the epoch, if known: `None` after a call that
    /// sets it to "now" (a test learns the value the file system chose).
    pub atime: Option<i64>,
    /// Modification time, as [`Node::atime`].
    pub mtime: Option<i64>,
    /// Extended attributes: full name (with its namespace prefix) → value.
    pub xattrs: BTreeMap<String, Vec<u8>>,
}

impl Node {
    pub(crate) fn new(body: Body, perm: u32, uid: u32, gid: u32) -> Node {
        let links = u32::from(!matches!(body, Body::Dir { .. }));
        Node {
            body,
            perm: perm & 0o7777,
            uid,
            gid,
            links,
            dead: false,
            linkable: false,
            atime: None,
            mtime: None,
            xattrs: BTreeMap::new(),
        }
    }

    /// The inode's type.
    pub fn kind(&self) -> Kind {
        match &self.body {
            Body::File(_) => Kind::File,
            Body::Dir { .. } => Kind::Dir,
            Body::Symlink(_) => Kind::Symlink,
            Body::Special { kind, .. } => *kind,
        }
    }

    /// Size as `stat` reports it: bytes of a file, bytes of a symbolic link's target,
    /// 0 for a directory (a file system's own choice; tmpfs counts entries) or a special
    /// file.
    pub fn size(&self) -> u64 {
        match &self.body {
            Body::File(d) => d.size(),
            Body::Symlink(t) => t.len() as u64,
            _ => 0,
        }
    }

    /// 512-byte blocks of a regular file's allocated pages; `None` for a symbolic link
    /// (where the target is kept is each file system's choice); 0 for the rest.
    pub fn blocks(&self) -> Option<u64> {
        match &self.body {
            Body::File(d) => Some(d.pages() * (PAGE / 512)),
            Body::Symlink(_) => None,
            _ => Some(0),
        }
    }

    /// Device number of a device, 0 otherwise.
    pub fn rdev(&self) -> u64 {
        match self.body {
            Body::Special { rdev, .. } => rdev,
            _ => 0,
        }
    }

    /// The file's data (`None` if not a regular file).
    pub fn data(&self) -> Option<&Data> {
        match &self.body {
            Body::File(d) => Some(d),
            _ => None,
        }
    }
}

/// The attributes `stat` reports that the model knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stat {
    /// The model inode.
    pub id: Id,
    /// Type.
    pub kind: Kind,
    /// Type and permission bits (`st_mode`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Link count.
    pub nlink: u32,
    /// Size ([`Node::size`]).
    pub size: u64,
    /// 512-byte blocks ([`Node::blocks`]).
    pub blocks: Option<u64>,
    /// Device number.
    pub rdev: u64,
}
