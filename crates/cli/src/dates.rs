//! Times as people read them: `stat`'s full local time with nanoseconds and zone, as
//! `stat(1)` prints it, and `ls -l`'s short form.

use std::time::{SystemTime, UNIX_EPOCH};

/// How far from now `ls -l` shows a time of day instead of the year (coreutils: about
/// six months, half of a 365.2425-day year).
const RECENT_NS: i64 = 31_556_952 / 2 * 1_000_000_000;

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// A broken-down local time.
struct Local {
    year: i32,
    /// 0 to 11.
    month: usize,
    day: i32,
    hour: i32,
    min: i32,
    sec: i32,
    /// Seconds east of UTC.
    offset: i64,
}

/// The local time (as the TZ variable or /etc/localtime says) of `secs` since the
/// epoch; `None` if the C library cannot represent it. (`time_t` is 64 bits on every
/// target this builds for.)
fn local(secs: libc::time_t) -> Option<Local> {
    // SAFETY: `tm` is plain data for which all zero bytes are a valid value.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to live locals of the right types; localtime_r is the
    // reentrant form and writes only into `tm`.
    let ok = unsafe { !libc::localtime_r(&secs, &mut tm).is_null() };
    ok.then(|| Local {
        year: tm.tm_year + 1900,
        month: usize::try_from(tm.tm_mon).unwrap_or(0).min(11),
        day: tm.tm_mday,
        hour: tm.tm_hour,
        min: tm.tm_min,
        sec: tm.tm_sec,
        offset: tm.tm_gmtoff,
    })
}

/// Splits nanoseconds since the epoch into whole seconds and the nanoseconds after.
fn split(ns: i64) -> (i64, i64) {
    (ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000))
}

/// `2026-11-27 09:57:01.123456789 +0000`, as `stat(1)` prints a time.
pub fn full(ns: i64) -> String {
    let (secs, frac) = split(ns);
    let Some(t) = local(secs) else {
        return format!("{ns} ns since the epoch");
    };
    let sign = if t.offset < 0 { '-' } else { '+' };
    let off = t.offset.abs() / 60;
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{frac:09} {sign}{:02}{:02}",
        t.year,
        t.month + 1,
        t.day,
        t.hour,
        t.min,
        t.sec,
        off / 60,
        off % 60
    )
}

/// `Nov 27 09:57` for a time within about six months of `now_ns`, else `Nov 27  2025`,
/// as `ls -l` prints a time.
pub fn short(ns: i64, now_ns: i64) -> String {
    let Some(t) = local(split(ns).0) else {
        return format!("{ns:>12}");
    };
    let month = MONTHS[t.month];
    if (now_ns - RECENT_NS..=now_ns).contains(&ns) {
        format!("{month} {:>2} {:02}:{:02}", t.day, t.hour, t.min)
    } else {
        format!("{month} {:>2}  {:>4}", t.day, t.year)
    }
}

/// Now, in nanoseconds since the epoch.
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
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
