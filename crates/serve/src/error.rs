//! Why a server could not serve, or a client's call failed.

use std::io;

/// Errors of the server and of clients; [`Error::errno`] is what a C caller sees.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file system refused the call, with this errno.
    #[error("{}", io::Error::from_raw_os_error(*.0))]
    Fs(i32),
    /// The server is gone (killed, stopped, or it closed this connection): this call
    /// and every later one of the client fail; connect again once it is back.
    #[error("the easyio server is gone: {0}")]
    Disconnected(io::Error),
    /// The server answered something this client does not understand.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// An operating-system call failed.
    #[error("{what}: {source}")]
    Os {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: io::Error,
    },
}

impl Error {
    /// The errno this error stands for: the file system's own, `ENOTCONN` once the
    /// server is gone, `EPROTO` for a protocol error.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Fs(e) => *e,
            Error::Disconnected(_) => libc::ENOTCONN,
            Error::Protocol(_) => libc::EPROTO,
            Error::Os { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        }
    }

    pub(crate) fn os(what: impl Into<String>, source: io::Error) -> Error {
        Error::Os {
            what: what.into(),
            source,
        }
    }
}

/// A result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
