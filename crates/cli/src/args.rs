//! Checks of command-line values, run by the argument parser before any work starts:
//! every number has a range, NaN and infinities are refused, and a failure is a usage
//! error (exit status [`USAGE`]), distinct from the errno of a failed operation.

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

/// A byte size with an optional K, M, G or T suffix, at least one byte.
pub fn size(s: &str) -> Result<u64, String> {
    match crate::files::parse_size(s) {
        Ok(0) => Err("a size must be at least one byte".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{e:#}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_have_a_range() {
        assert_eq!(size("4K"), Ok(4096));
        assert!(size("0").is_err());
        assert!(size("1Q").is_err());
    }
}
