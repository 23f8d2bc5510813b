//! Checks of command-line values, run by the argument parser before any work starts:
//! every number has a range, NaN and infinities are refused, and a failure is a usage
//! error (the command exits 64), distinct from the errno of a failed operation. Sizes
//! are `command::args::size`.

use clap::builder::RangedU64ValueParser;

/// Longest run a benchmark accepts for one configuration, in seconds.
pub const MAX_SECONDS: f64 = 3600.0;
/// Largest `--scale` of `bench app`: 16× EASYIO Table 1 is ~400 MiB of JPEG inputs.
pub const MAX_SCALE: f64 = 16.0;
/// Highest `--rate` of `bench qos`, requests per second.
pub const MAX_RATE: f64 = 1e6;
/// Largest microsecond value (`--compute-us`, `--target-us`): ten seconds.
pub const MAX_MICROS: f64 = 1e7;
/// Longest measurement round or time window, in milliseconds.
pub const MAX_MILLIS: u64 = 60_000;
/// Most threads or uthreads per worker a benchmark starts.
pub const MAX_THREADS: u64 = 1024;
/// Largest single I/O of `bench micro`.
pub const MAX_IO: u64 = 1 << 30;

/// A finite number in `(low, high]` (or `[low, high]` if `low_inclusive`).
fn number(s: &str, low: f64, low_inclusive: bool, high: f64) -> Result<f64, String> {
    let x: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number"))?;
    if !x.is_finite() {
        return Err(format!("{s} is not a finite number"));
    }
    let above = if low_inclusive { x >= low } else { x > low };
    if !above || x > high {
        let open = if low_inclusive { '[' } else { '(' };
        return Err(format!("{s} is out of range {open}{low}, {high}]"));
    }
    Ok(x)
}

/// Seconds of a run: `(0, 3600]`.
pub fn seconds(s: &str) -> Result<f64, String> {
    number(s, 0.0, false, MAX_SECONDS)
}

/// A size multiple of `bench app`: `(0, 16]`.
pub fn scale(s: &str) -> Result<f64, String> {
    number(s, 0.0, false, MAX_SCALE)
}

/// Requests per second: `(0, 1e6]`.
pub fn rate(s: &str) -> Result<f64, String> {
    number(s, 0.0, false, MAX_RATE)
}

/// Microseconds, zero allowed: `[0, 1e7]`.
pub fn micros(s: &str) -> Result<f64, String> {
    number(s, 0.0, true, MAX_MICROS)
}

/// Microseconds, more than zero: `(0, 1e7]`.
pub fn positive_micros(s: &str) -> Result<f64, String> {
    number(s, 0.0, false, MAX_MICROS)
}

/// Milliseconds of a round or window: `1..=60000`.
pub fn millis() -> RangedU64ValueParser<u64> {
    RangedU64ValueParser::new().range(1..=MAX_MILLIS)
}

/// A thread count: `1..=1024`.
pub fn threads() -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::new().range(1..=MAX_THREADS)
}

/// An I/O size: one byte to 1 GiB.
pub fn io_size(s: &str) -> Result<u64, String> {
    let n = command::args::size(s)?;
    if n > MAX_IO {
        return Err(format!("{s} is larger than 1G"));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_have_ranges() {
        assert_eq!(seconds("1.5"), Ok(1.5));
        for bad in ["0", "-1", "nan", "inf", "-inf", "3601", "x", ""] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(micros("0"), Ok(0.0));
        assert!(positive_micros("0").is_err());
        assert!(scale("17").is_err());
        assert!(rate("NaN").is_err());
        assert_eq!(io_size("4K"), Ok(4096));
        assert!(io_size("0").is_err());
        assert!(io_size("2G").is_err());
    }
}
