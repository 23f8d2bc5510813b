//! Times as people read them: `stat`'s full local time with nanoseconds and zone, as
//! `stat(1)` prints it, and `ls -l`'s short form. The local zone is what TZ or
//! /etc/localtime says, as for the C library.

use chrono::{DateTime, Local, Utc};

/// How far from now `ls -l` shows a time of day instead of the year (coreutils: about
/// six months, half of a 365.2425-day year).
const RECENT_NS: i64 = 31_556_952 / 2 * 1_000_000_000;

/// `ns` nanoseconds since the epoch, in the local zone.
fn local(ns: i64) -> DateTime<Local> {
    DateTime::from_timestamp_nanos(ns).with_timezone(&Local)
}

/// `2026-11-27 09:57:01.123456789 +0000`, as `stat(1)` prints a time.
pub fn full(ns: i64) -> String {
    local(ns).format("%Y-%m-%d %H:%M:%S%.9f %z").to_string()
}

/// `Nov 27 09:57` for a time within about six months of `now_ns`, else `Nov 27  2025`,
/// as `ls -l` prints a time.
pub fn short(ns: i64, now_ns: i64) -> String {
    let recent = (now_ns - RECENT_NS..=now_ns).contains(&ns);
    let form = if recent { "%b %e %H:%M" } else { "%b %e  %Y" };
    local(ns).format(form).to_string()
}

/// Now, in nanoseconds since the epoch.
pub fn now_ns() -> i64 {
    Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_stat_and_ls_print_them() {
        // The zone is the process's: only the parts that do not depend on it are fixed.
        let t = 1_795_773_421_123_456_789; // 2026-11-27 09:57:01.123456789 UTC
        let f = full(t);
        assert_eq!(f.len(), "2026-11-27 09:57:01.123456789 +0000".len(), "{f}");
        assert!(f.contains(":01.123456789 "), "{f}");
        let recent = short(t, t + 1_000_000_000);
        assert_eq!(recent.len(), "Nov 27 09:57".len(), "{recent}");
        let old = short(t, t + 2 * RECENT_NS);
        assert!(old.ends_with(" 2026"), "{old}");
        assert!(full(-1).starts_with("1969-12-31 ") || full(-1).starts_with("1970-01-01 "));
    }
}
