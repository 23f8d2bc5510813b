//! Usage errors: a bad or missing argument, or values that do not fit together. They
//! exit with [`USAGE`], distinct from the errno of a failed operation. Single values
//! are checked by the argument parser before any work starts ([`size`] here, the
//! benchmarks' ranges in `bench::args`).

use anyhow::Context;

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

/// `msg` as a [`UsageError`].
pub fn usage_error(msg: String) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg))
}

/// Returns a [`UsageError`] made as `format!` makes a string.
#[macro_export]
macro_rules! usage {
    ($($t:tt)*) => {
        return Err($crate::args::usage_error(format!($($t)*)))
    };
}

/// A byte size with an optional K, M, G or T suffix, at least one byte.
pub fn size(s: &str) -> Result<u64, String> {
    match parse_size(s) {
        Ok(0) => Err("a size must be at least one byte".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{e:#}")),
    }
}

/// Parses a size like `256M`, `1G`, `4096`.
pub fn parse_size(s: &str) -> anyhow::Result<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let mult = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => anyhow::bail!("size {s:?}: unknown suffix {c:?} (use K, M, G or T)"),
            };
            (&s[..i], mult)
        }
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .with_context(|| format!("size {s:?} is not a number"))?;
    n.checked_mul(mult)
        .with_context(|| format!("size {s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("256M").unwrap(), 256 << 20);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("abc").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert_eq!(size("4K"), Ok(4096));
        assert!(size("0").is_err());
    }
}
