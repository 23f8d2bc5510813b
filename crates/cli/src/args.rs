//! Usage errors: a bad or missing argument, or values that do not fit together. They
//! exit with [`USAGE`], distinct from the errno of a failed operation. The checks of
//! single values are `bench::args`, run by the parser before any work starts.

pub use bench::args::size;

/// Exit status of a usage error: a bad or missing argument (BSD's `EX_USAGE`; no
/// errno easyio reports has this value).
pub const USAGE: i32 = 64;

/// A usage error found after parsing (values that do not fit together).
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Returns a [`UsageError`].
macro_rules! usage {
    ($($t:tt)*) => {
        return Err(anyhow::Error::new($crate::args::UsageError(format!($($t)*))))
    };
}
pub(crate) use usage;
