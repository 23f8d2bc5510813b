//! The region's lock: `flock` on the file or device, exclusive for a writable open and
//! shared for a read-only one, tried again for a moment when refused, and the name of
//! the process that holds it when it stays refused.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::error::{io_err, Error, Result};

/// Whether an open may store into the region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    ReadWrite,
    ReadOnly,
}

/// Takes the region's exclusive lock. `flock` locks belong to the open file
/// description, so a second open in the same process conflicts too, and the kernel
/// drops the lock when the holder dies.
///
/// A refused lock is tried again for up to [`LOCK_GRACE`]: a process that spawns a
/// program while it holds a region lends its descriptor to the child until the child's
/// `exec` closes it (close-on-exec), so a lock released just before can still be held
/// for that moment by a child that never meant to hold it.
pub(crate) fn lock(file: &File, path: &Path, access: Access) -> Result<()> {
    use rustix::fs::{flock, FlockOperation};
    let how = match access {
        Access::ReadWrite => FlockOperation::NonBlockingLockExclusive,
        Access::ReadOnly => FlockOperation::NonBlockingLockShared,
    };
    let start = std::time::Instant::now();
    let mut deadline = start + LOCK_GRACE;
    let holder = loop {
        match flock(file, how) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::WOULDBLOCK) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            Err(rustix::io::Errno::WOULDBLOCK) => {
                let holder = file
                    .metadata()
                    .ok()
                    .and_then(|m| lock_holder(m.dev(), m.ino()));
                // A server the shim started on demand ends by itself once its last
                // client is gone: the command that follows a shimmed one waits for it.
                let auto = matches!(&holder, Some((_, comm)) if comm == AUTO_SERVER);
                if !auto || deadline >= start + AUTO_SERVER_GRACE {
                    break holder.map(|(name, _)| name);
                }
                deadline = start + AUTO_SERVER_GRACE;
            }
            Err(e) => return Err(io_err(path, "flock", e.into())),
        }
    };
    let holder = holder.unwrap_or_else(|| "another open of this region".into());
    Err(Error::Busy {
        path: path.into(),
        holder,
    })
}

/// How long a refused region lock is tried again before the open fails with
/// [`Error::Busy`].
const LOCK_GRACE: std::time::Duration = std::time::Duration::from_millis(100);
/// How long a region held by a server the shim started on demand is tried again: such a
/// server ends by itself a moment after its last client (more under load).
const AUTO_SERVER_GRACE: std::time::Duration = std::time::Duration::from_secs(10);
/// The name such a server gives its process (`comm`).
const AUTO_SERVER: &str = "easyio-serve";

/// Finds the process holding a `flock` on (dev, ino) in `/proc/locks`: how to name it,
/// and its `comm`.
fn lock_holder(dev: u64, ino: u64) -> Option<(String, String)> {
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let want = format!("{major:02x}:{minor:02x}:{ino}");
    let pid = locks.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // "1: FLOCK ADVISORY WRITE <pid> <maj:min:ino> 0 EOF"
        (f.len() >= 6 && f[1] == "FLOCK" && f[5] == want).then(|| f[4].to_string())
    })?;
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let me = if pid == std::process::id().to_string() {
        ", this process"
    } else {
        ""
    };
    let comm = comm.trim();
    Some((format!("pid {pid} ({comm}{me})"), comm.to_string()))
}
