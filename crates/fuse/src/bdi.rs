//! The kernel's limit on the dirty pages of a mount with the writeback cache.
//!
//! The kernel gives each FUSE mount a backing device (`/sys/class/bdi/MAJ:MIN/`, the
//! mount's device number) that may hold 1 % of the machine's dirty limit
//! (`max_ratio` 1), enforced even while the machine as a whole is far below its own
//! (`strict_limit` 1): a server that is not trusted cannot pin much of the memory in
//! dirty pages only it can write back. With the writeback cache this throttles every
//! writer of the mount (they wait in `balance_dirty_pages` for the server's writes).
//! A server run by root is trusted as much as the kernel's other file systems, whose
//! devices have neither limit; there [`relax`] sets `strict_limit` 0 and `max_ratio`
//! [`DEFAULT_MAX_RATIO`] (or the mount's `bdi_max_ratio=N`).

use std::io;
use std::path::{Path, PathBuf};

/// The share (per cent) of the machine's dirty limit the mount's device may hold once
/// relaxed, unless `-o bdi_max_ratio=N` says otherwise. Without `strict_limit` the
/// share only counts once the whole machine is over its own free-run threshold
/// (halfway between `dirty_background_ratio` and `dirty_ratio`); measured, 1, 20, 50
/// and 100 ran `easyio bench fuse --writeback-cache` alike. Half keeps a stalled
/// server from holding every other writer of the machine up.
pub(crate) const DEFAULT_MAX_RATIO: u32 = 50;

/// The `-o` option that sets the share: `bdi_max_ratio=N`, N from 1 to 100.
pub(crate) const MAX_RATIO_OPTION: &str = "bdi_max_ratio=";

/// The sysfs directory of the backing device whose number is `dev` (`major:minor`).
pub(crate) fn dir_of(dev: &str) -> PathBuf {
    Path::new("/sys/class/bdi").join(dev)
}

/// Reads one knob of the device at `dir`, for the log.
fn read(dir: &Path, knob: &str) -> String {
    std::fs::read_to_string(dir.join(knob)).map_or_else(|_| "?".into(), |s| s.trim().into())
}

/// Writes `value` to one knob of the device at `dir`.
fn write(dir: &Path, knob: &str, value: u32) -> io::Result<()> {
    let path = dir.join(knob);
    std::fs::write(&path, value.to_string())
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// Sets `strict_limit` 0 and `max_ratio` `max_ratio` on the backing device of the
/// mount whose device number is `dev` (`None`: not found), as root (`root`); returns
/// the line for the mount's log, which says what was set or why nothing was.
pub(crate) fn relax(dev: Option<&str>, max_ratio: u32, root: bool) -> String {
    let Some(dev) = dev else {
        return "writeback cache: the kernel's dirty-page limit of this mount was left as it is (its device number was not found in /proc/self/mountinfo)".into();
    };
    let dir = dir_of(dev);
    let was = format!(
        "strict_limit {}, max_ratio {}",
        read(&dir, "strict_limit"),
        read(&dir, "max_ratio")
    );
    let kept = |why: String| {
        format!("writeback cache: the kernel's dirty-page limit of this mount was left as it is ({was} in {}): {why}; writers wait for write-back once the mount holds that share of the dirty limit", dir.display())
    };
    if !root {
        return kept("only root may change it".into());
    }
    if !dir.join("strict_limit").exists() {
        return kept("this kernel has no strict_limit knob".into());
    }
    match write(&dir, "strict_limit", 0).and_then(|()| write(&dir, "max_ratio", max_ratio)) {
        Ok(()) => format!(
            "writeback cache: the kernel's dirty-page limit of this mount ({}) relaxed to strict_limit {}, max_ratio {} (was {was})",
            dir.display(),
            read(&dir, "strict_limit"),
            read(&dir, "max_ratio")
        ),
        Err(e) => kept(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_device_or_user_is_said_and_nothing_is_written() {
        assert!(relax(None, 50, true).contains("not found"));
        // A device that does not exist: nothing to write, and the line says why.
        let line = relax(Some("0:999999"), 50, true);
        assert!(line.contains("left as it is"), "{line}");
        assert!(line.contains("no strict_limit knob"), "{line}");
        let line = relax(Some("0:999999"), 50, false);
        assert!(line.contains("only root"), "{line}");
    }
}
