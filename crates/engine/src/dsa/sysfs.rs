//! Discovery of DSA work queues usable from user space, from the idxd driver's sysfs.
//!
//! The driver lists devices and queues under `/sys/bus/dsa/devices/`: `dsaX` and
//! `wqX.Y`. A queue is usable here when its `type` is `user` and its `state` is
//! `enabled`; its character device is `/dev/dsa/wqX.Y`. `mode` says `dedicated` or
//! `shared`; `size`, `max_batch_size` and `max_transfer_size` give its limits.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The idxd driver's bus directory.
pub const SYSFS_DSA: &str = "/sys/bus/dsa/devices";
/// Where the driver creates user work-queue device nodes.
pub const DEV_DSA: &str = "/dev/dsa";

/// A user-mode work queue found in sysfs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WqInfo {
    /// `wqX.Y`.
    pub name: String,
    /// `dsaX`.
    pub device: String,
    /// Shared (ENQCMD) rather than dedicated (MOVDIR64B).
    pub shared: bool,
    /// Queue entries.
    pub size: usize,
    /// Largest batch.
    pub max_batch: usize,
    /// Largest transfer.
    pub max_transfer: u64,
    /// The character device to open.
    pub dev_path: PathBuf,
}

impl WqInfo {
    /// One line for people.
    pub fn describe(&self) -> String {
        format!(
            "{} on {} ({}, {} entries, batch <= {}, transfer <= {} bytes)",
            self.name,
            self.device,
            if self.shared { "shared" } else { "dedicated" },
            self.size,
            self.max_batch,
            self.max_transfer
        )
    }

    /// The sysfs directory of the queue's device.
    pub fn device_sysfs(&self) -> PathBuf {
        Path::new(SYSFS_DSA).join(&self.device)
    }
}

/// Every enabled user-mode work queue, or why there is none: the message says what
/// was looked for and what was found.
pub fn discover() -> Result<Vec<WqInfo>> {
    discover_in(Path::new(SYSFS_DSA), Path::new(DEV_DSA))
}

fn discover_in(sysfs: &Path, dev: &Path) -> Result<Vec<WqInfo>> {
    let looked = format!(
        "looked for enabled work queues of type \"user\" in {} (wq*/type, wq*/state) \
         and their device nodes in {}",
        sysfs.display(),
        dev.display()
    );
    let unavailable = |found: String| Error::DsaUnavailable(format!("{looked}; {found}"));
    let entries = std::fs::read_dir(sysfs).map_err(|e| {
        unavailable(format!(
            "{} cannot be read ({e}): no idxd driver loaded or no DSA device on this machine",
            sysfs.display()
        ))
    })?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("wq"))
        .collect();
    names.sort();
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    for name in &names {
        let dir = sysfs.join(name);
        let attr = |a: &str| {
            std::fs::read_to_string(dir.join(a))
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        let num = |a: &str| attr(a).parse::<u64>().unwrap_or(0);
        let (ty, state) = (attr("type"), attr("state"));
        if ty != "user" || state != "enabled" {
            skipped.push(format!("{name} (type {ty:?}, state {state:?})"));
            continue;
        }
        let dev_path = dev.join(name);
        if !dev_path.exists() {
            skipped.push(format!("{name} (no {})", dev_path.display()));
            continue;
        }
        let device = name
            .trim_start_matches("wq")
            .split('.')
            .next()
            .map(|d| format!("dsa{d}"))
            .unwrap_or_default();
        found.push(WqInfo {
            name: name.clone(),
            device,
            shared: attr("mode") == "shared",
            size: num("size") as usize,
            max_batch: num("max_batch_size") as usize,
            max_transfer: num("max_transfer_size"),
            dev_path,
        });
    }
    if found.is_empty() {
        let what = if names.is_empty() {
            "no work queues are configured".to_string()
        } else {
            format!("none usable: {}", skipped.join(", "))
        };
        return Err(unavailable(what));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_reads_queue_attributes_and_explains_absence() {
        let root = std::env::temp_dir().join(format!("easyio-dsa-sysfs-{}", std::process::id()));
        let (sys, dev) = (root.join("sys"), root.join("dev"));
        let err = discover_in(&sys, &dev).unwrap_err().to_string();
        assert!(
            err.contains("cannot be read") && err.contains("\"user\""),
            "{err}"
        );
        for (wq, ty, state, mode) in [
            ("wq0.0", "user", "enabled", "dedicated"),
            ("wq0.1", "kernel", "enabled", "shared"),
            ("wq1.0", "user", "enabled", "shared"),
        ] {
            let d = sys.join(wq);
            std::fs::create_dir_all(&d).unwrap();
            for (a, v) in [
                ("type", ty),
                ("state", state),
                ("mode", mode),
                ("size", "16"),
                ("max_batch_size", "32"),
                ("max_transfer_size", "2097152"),
            ] {
                std::fs::write(d.join(a), format!("{v}\n")).unwrap();
            }
        }
        std::fs::create_dir_all(&dev).unwrap();
        let err = discover_in(&sys, &dev).unwrap_err().to_string();
        assert!(
            err.contains("none usable") && err.contains("wq0.1"),
            "{err}"
        );
        std::fs::write(dev.join("wq0.0"), b"").unwrap();
        std::fs::write(dev.join("wq1.0"), b"").unwrap();
        let wqs = discover_in(&sys, &dev).unwrap();
        assert_eq!(wqs.len(), 2);
        assert_eq!(
            (wqs[0].device.as_str(), wqs[0].shared, wqs[0].size),
            ("dsa0", false, 16)
        );
        assert_eq!(
            (wqs[1].device.as_str(), wqs[1].shared, wqs[1].max_batch),
            ("dsa1", true, 32)
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
