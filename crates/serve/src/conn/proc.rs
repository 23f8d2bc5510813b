//! What `/proc` says of a client's process: whether it runs, its parent, and its
//! credentials.

use fs::Cred;

/// Whether process `pid` runs (a zombie does not).
pub(super) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 1..];
            rest.split_whitespace().next().map(|state| state != "Z")
        })
        .unwrap_or(false)
}

/// The parent of process `pid`.
pub(super) fn parent_of(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The file-system credentials process `pid` has now, as the kernel says
/// (`/proc/PID/status`: the fourth, file-system, ids of `Uid:` and `Gid:`, and
/// `Groups:`), with `umask`. ESRCH if the process cannot be read.
pub(super) fn credentials_of(pid: u32, umask: u32) -> fs::Result<Cred> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|_| fs::Error::Errno(libc::ESRCH))?;
    let line = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.split_whitespace().filter_map(|n| n.parse::<u32>().ok()))
    };
    let fs_id = |key: &str| {
        line(key)
            .and_then(|mut ids| ids.nth(3))
            .ok_or(fs::Error::Errno(libc::ESRCH))
    };
    Ok(Cred {
        uid: fs_id("Uid:")?,
        gid: fs_id("Gid:")?,
        groups: line("Groups:").map(Iterator::collect).unwrap_or_default(),
        umask,
    })
}
