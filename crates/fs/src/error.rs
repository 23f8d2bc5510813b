//! The file system's error type: one variant per POSIX failure, each mapped to its errno.

/// Result of file system operations.
pub type Result<T> = std::result::Result<T, Error>;

/// Why a file system operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No such file or directory (ENOENT).
    #[error("no such file or directory")]
    NotFound,
    /// The name is taken (EEXIST).
    #[error("file exists")]
    Exists,
    /// A component that must be a directory is not (ENOTDIR).
    #[error("not a directory")]
    NotDir,
    /// A directory where it cannot be one (EISDIR).
    #[error("is a directory")]
    IsDir,
    /// A directory that must be empty is not (ENOTEMPTY).
    #[error("directory not empty")]
    NotEmpty,
    /// A name over [`crate::MAX_NAME`] bytes (ENAMETOOLONG).
    #[error("file name too long (the limit is {} bytes)", crate::MAX_NAME)]
    NameTooLong,
    /// A whole path (or a symbolic link's target) over [`crate::MAX_PATH`]: the same
    /// errno as a long name, but the message names the limit that was hit.
    #[error("path too long (the limit is {} bytes)", crate::MAX_PATH)]
    PathTooLong,
    /// The data pool is full (ENOSPC).
    #[error("no space left in the region")]
    NoSpace,
    /// Every inode is in use (ENOSPC).
    #[error("no free inodes left")]
    NoInodes,
    /// Not an open descriptor, or not open for that (EBADF).
    #[error("bad file descriptor")]
    BadFd,
    /// An argument the call does not take (EINVAL).
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// More than [`crate::MAX_SYMLINK_HOPS`] symbolic links, or one where none may be (ELOOP).
    #[error("too many levels of symbolic links")]
    Loop,
    /// Not allowed to anyone but root or the owner, or not at all (EPERM).
    #[error("operation not permitted: {0}")]
    NotPermitted(&'static str),
    /// More than [`crate::MAX_LINKS`] links (EMLINK).
    #[error("too many links")]
    TooManyLinks,
    /// Past [`crate::MAX_FILE_SIZE`] (EFBIG).
    #[error("file too large")]
    FileTooBig,
    /// The caller's credentials do not allow the access (EACCES).
    #[error("permission denied")]
    Access,
    /// A special file (FIFO, socket, device) opened for I/O: its I/O belongs to the
    /// door in front of the file system (the kernel for FUSE, libc for the shim).
    #[error("no such device or address: special files are not opened for I/O here")]
    NoDevice,
    /// The operation, a flag combination (e.g. `O_EXCL` on a directory) or an
    /// attribute namespace that is not supported.
    #[error("operation not supported: {0}")]
    NotSupported(&'static str),
    /// The image is damaged where the call looked (EUCLEAN).
    #[error("corrupted file system: {0}")]
    Corrupt(String),
    /// The file system is mounted read-only (asked for, or because mount found damage
    /// it cannot repair).
    #[error("read-only file system")]
    ReadOnly,
    /// The region failed: its errno.
    #[error(transparent)]
    Region(#[from] pmem::Error),
    /// The data mover or copy engine could not be set up (mount, format, options).
    #[error("data mover: {0}")]
    Mover(#[source] mover::Error),
    /// Moving file data failed: the copy engine failed, or a delegation thread died
    /// under the copy. The operation changed nothing a reader can see; no copy of it
    /// runs any more.
    #[error("I/O error moving file data")]
    Io {
        /// What the mover or engine reported.
        #[source]
        source: mover::Error,
    },
    /// The extended attribute asked for does not exist.
    #[error("no such extended attribute")]
    NoData,
    /// The caller's buffer is too small for the answer, or an extended attribute's name
    /// is empty or over [`crate::xattr::MAX_XATTR_NAME`] bytes (as Linux reports both).
    #[error("result out of range: {0}")]
    Range(&'static str),
    /// An extended attribute's value (or the list of names) is over the Linux limit.
    #[error("argument list too long: {0}")]
    TooBig(&'static str),
    /// `SEEK_DATA`/`SEEK_HOLE` at or beyond the end of the file, or no data after it.
    #[error("no such device or address (offset at or past the end of the data)")]
    NoSuchOffset,
    /// The call was made by another process for this one (a server answering a
    /// client) and failed there with this errno.
    #[error("{}", std::io::Error::from_raw_os_error(*.0))]
    Errno(i32),
}

impl From<mover::Error> for Error {
    /// A failed copy is an I/O error; anything else is a setup error of the mover.
    fn from(e: mover::Error) -> Error {
        match e {
            mover::Error::Engine(_) | mover::Error::CopyFailed => Error::Io { source: e },
            mover::Error::UnknownMode(_) | mover::Error::Config(_) => Error::Mover(e),
        }
    }
}

impl Error {
    /// The errno of this error, for the C ABI, the shim and exit codes.
    pub fn errno(&self) -> i32 {
        match self {
            Error::NotFound => libc::ENOENT,
            Error::Exists => libc::EEXIST,
            Error::NotDir => libc::ENOTDIR,
            Error::IsDir => libc::EISDIR,
            Error::NotEmpty => libc::ENOTEMPTY,
            Error::NameTooLong | Error::PathTooLong => libc::ENAMETOOLONG,
            Error::NoSpace | Error::NoInodes => libc::ENOSPC,
            Error::BadFd => libc::EBADF,
            Error::Invalid(_) => libc::EINVAL,
            Error::Loop => libc::ELOOP,
            Error::NotPermitted(_) => libc::EPERM,
            Error::TooManyLinks => libc::EMLINK,
            Error::FileTooBig => libc::EFBIG,
            Error::Access => libc::EACCES,
            Error::NoDevice => libc::ENXIO,
            Error::NotSupported(_) => libc::EOPNOTSUPP,
            Error::Corrupt(_) => libc::EUCLEAN,
            Error::ReadOnly => libc::EROFS,
            Error::Region(e) => e.errno(),
            Error::Mover(e) => e.errno(),
            Error::Io { .. } => libc::EIO,
            Error::NoData => libc::ENODATA,
            Error::Range(_) => libc::ERANGE,
            Error::TooBig(_) => libc::E2BIG,
            Error::NoSuchOffset => libc::ENXIO,
            Error::Errno(e) => *e,
        }
    }
}
