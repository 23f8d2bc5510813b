//! The credentials of a request: uid and gid from the FUSE header, supplementary
//! groups from `/proc/PID/status` of the calling process when it can be read (the
//! kernel sends no groups), and the umask the kernel sends with creating requests.
//!
//! Root's groups are not read: root passes every check a group could pass, so
//! they change nothing, and reading `/proc/PID/status` (the kernel formats the
//! whole file) was the largest part of the server's own time for a lookup.

use fs::Cred;
use fuser::Request;

/// Who makes `req`, creating with `umask`.
pub(crate) fn of(req: &Request, umask: u32) -> Cred {
    Cred {
        uid: req.uid(),
        gid: req.gid(),
        groups: if req.uid() == 0 {
            Vec::new()
        } else {
            groups(req.pid())
        },
        umask: umask & 0o777,
    }
}

/// The supplementary groups of process `pid`; none if it is gone or unknown (pid 0:
/// a request the kernel makes on its own, or from another pid namespace).
fn groups(pid: u32) -> Vec<u32> {
    if pid == 0 {
        return Vec::new();
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    parse_groups(&status)
}

/// The `Groups:` line of a `/proc/PID/status` text.
fn parse_groups(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_of_a_status_text() {
        let s = "Name:\tsh\nUid:\t1000\t1000\t1000\t1000\nGroups:\t4 24 27 \nVmPeak:\t1 kB\n";
        assert_eq!(parse_groups(s), vec![4, 24, 27]);
        assert_eq!(parse_groups("Groups:\t\n"), Vec::<u32>::new());
        assert_eq!(parse_groups("Name: x\n"), Vec::<u32>::new());
    }

    #[test]
    fn groups_of_this_process_are_read() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        assert!(status.contains("Groups:"));
        let _ = groups(std::process::id());
    }
}
