//! The errors of opening, creating and mapping a region, each with the errno it maps to.

use std::io;
use std::path::PathBuf;

/// Result of region operations.
pub type Result<T> = std::result::Result<T, Error>;

/// Why a region could not be opened, created or mapped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The path names no file or device.
    #[error("region {}: no such file or device", path.display())]
    NotFound { path: PathBuf },

    /// `create` was asked for a path that already exists.
    #[error("region {}: already exists (remove it first, or open it instead)", path.display())]
    Exists { path: PathBuf },

    /// A size that is zero, not a multiple of the page size, or too small to hold anything.
    #[error("region size {size} is invalid: {reason}")]
    BadSize { size: u64, reason: String },

    /// The file or device is smaller than the size recorded in its header.
    #[error(
        "region {}: it is {actual} bytes but its header claims {claimed} (truncated or wrong file)",
        path.display()
    )]
    Truncated {
        path: PathBuf,
        claimed: u64,
        actual: u64,
    },

    /// The header is missing, of another version, or fails its checksum.
    #[error("region {}: {reason}", path.display())]
    BadHeader { path: PathBuf, reason: String },

    /// An image file with holes that its host file system has no room to fill: its
    /// pages would fail (SIGBUS) when first written.
    #[error(
        "region {}: {missing} bytes of the image are unallocated (a sparse file) and its file \
         system has only {available} bytes free: free space there, or copy the image \
         somewhere with room",
        path.display()
    )]
    Holes {
        path: PathBuf,
        missing: u64,
        available: u64,
    },

    /// Another open (in this or another process) holds the region.
    #[error("region {}: in use by {holder}", path.display())]
    Busy { path: PathBuf, holder: String },

    /// The kernel refused to map the file or device.
    #[error("region {}: cannot map {len} bytes: {source}", path.display())]
    Map {
        path: PathBuf,
        len: u64,
        source: io::Error,
    },

    /// Any other system call failed.
    #[error("region {}: {op}: {source}", path.display())]
    Io {
        path: PathBuf,
        op: &'static str,
        source: io::Error,
    },
}

impl Error {
    /// The errno this error corresponds to, for the C ABI and for exit codes.
    pub fn errno(&self) -> i32 {
        match self {
            Error::NotFound { .. } => libc::ENOENT,
            Error::Exists { .. } => libc::EEXIST,
            Error::BadSize { .. } => libc::EINVAL,
            Error::Truncated { .. } | Error::BadHeader { .. } => libc::EUCLEAN,
            Error::Busy { .. } => libc::EBUSY,
            Error::Holes { .. } => libc::ENOSPC,
            Error::Map { source, .. } | Error::Io { source, .. } => {
                source.raw_os_error().unwrap_or(libc::EIO)
            }
        }
    }
}
