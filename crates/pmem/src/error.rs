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
    NotFound {
        /// The path asked for.
        path: PathBuf,
    },

    /// `create` was asked for a path that already exists.
    #[error("region {}: already exists (remove it first, or open it instead)", path.display())]
    Exists {
        /// The path that exists.
        path: PathBuf,
    },

    /// A size that is zero, not a multiple of the page size, or too small to hold anything.
    #[error("region size {size} is invalid: {reason}")]
    BadSize {
        /// The size asked for, in bytes.
        size: u64,
        /// What is wrong with it.
        reason: String,
    },

    /// The file or device is smaller than the size recorded in its header.
    #[error(
        "region {}: it is {actual} bytes but its header claims {claimed} (truncated or wrong file)",
        path.display()
    )]
    Truncated {
        /// The region's file or device.
        path: PathBuf,
        /// Bytes the header records.
        claimed: u64,
        /// Bytes the file or device has.
        actual: u64,
    },

    /// The header is missing, of another version, or fails its checksum.
    #[error("region {}: {reason}", path.display())]
    BadHeader {
        /// The region's file or device.
        path: PathBuf,
        /// What is wrong with the header.
        reason: String,
    },

    /// An image file with holes that its host file system has no room to fill: its
    /// pages would fail (SIGBUS) when first written.
    #[error(
        "region {}: {missing} bytes of the image are unallocated (a sparse file) and its file \
         system has only {available} bytes free: free space there, or copy the image \
         somewhere with room",
        path.display()
    )]
    Holes {
        /// The image file.
        path: PathBuf,
        /// Bytes of the image without blocks.
        missing: u64,
        /// Bytes free on its file system.
        available: u64,
    },

    /// Another open (in this or another process) holds the region.
    #[error("region {}: in use by {holder}", path.display())]
    Busy {
        /// The region's file or device.
        path: PathBuf,
        /// Who holds it (its pid, when known).
        holder: String,
    },

    /// The kernel refused to map the file or device.
    #[error("region {}: cannot map {len} bytes: {source}", path.display())]
    Map {
        /// The region's file or device.
        path: PathBuf,
        /// Bytes asked to map.
        len: u64,
        /// The kernel's answer.
        source: io::Error,
    },

    /// Any other system call failed.
    #[error("region {}: {op}: {source}", path.display())]
    Io {
        /// The region's file or device.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The kernel's answer.
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

/// An I/O error of `op` on `path`.
pub(crate) fn io_err(path: &std::path::Path, op: &'static str, source: io::Error) -> Error {
    Error::Io {
        path: path.into(),
        op,
        source,
    }
}
