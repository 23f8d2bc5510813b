//! Mounting: the session that serves requests until the file system is
//! unmounted (on the caller's thread or, [`Background`], on one of its own), and
//! unmounting.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fs::FileSystem;
use fuser::{Config, MountOption, SessionACL};

use crate::inval::Invalidator;
use crate::lookups::LookupCounts;
use crate::options::{Options, WRITEBACK_CACHE};
use crate::server::{Flushes, Server};
use crate::uring::{RingStats, TransportChoice, UringTransport};
use crate::uthreads::HandlerStats;
use std::os::fd::AsFd;

/// The `fuser` configuration of `opts`: `default_permissions` (see
/// [`kernel_checks`]), `fsname=easyio`, `subtype=easyio` unless `opts` names others,
/// and the passed-through options.
fn config(opts: &Options) -> Config {
    config_as(opts, rustix::process::getuid().is_root())
}

/// Whether the kernel checks the mode bits itself (`default_permissions`) on a mount
/// made by root (`root`) with the session's `acl`. It must wherever a process other than
/// root can reach the mount: the kernel answers path walks through the entries it
/// caches without asking the server, so only its own check stops a caller at a
/// directory it may not search. A mount by root without `allow_other` or `allow_root`
/// is reached only by processes whose user and group ids are all root's (the kernel
/// refuses every other), which pass every check a mode bit makes but the execution of
/// a file with none of the `x` bits, which the kernel checks either way; there the
/// server's checks (as the caller, on every request) are the only ones, and the kernel
/// no longer fetches a directory's attributes again after each change in it to check
/// them (one `getattr` per file created or removed). Asked for explicitly
/// (`-o default_permissions`), it is always on.
pub(crate) fn kernel_checks(opts: &Options, root: bool, acl: SessionACL) -> bool {
    !root || acl != SessionACL::Owner || opts.extra.iter().any(|o| o == "default_permissions")
}

/// [`config`] for a mount made by root (`root`) or by another user.
fn config_as(opts: &Options, root: bool) -> Config {
    let mut c = Config::default();
    let mut m = Vec::new();
    let named = |p: &str| opts.extra.iter().any(|o| o.starts_with(p));
    if !named("fsname=") {
        m.push(MountOption::FSName("easyio".into()));
    }
    if !named("subtype=") {
        m.push(MountOption::Subtype("easyio".into()));
    }
    if opts.read_only {
        m.push(MountOption::RO);
    }
    for o in &opts.extra {
        let opt = match o.as_str() {
            "default_permissions" | "rw" | WRITEBACK_CACHE => continue,
            x if x.starts_with(crate::bdi::MAX_RATIO_OPTION) => continue,
            "allow_other" => {
                c.acl = SessionACL::All;
                continue;
            }
            "allow_root" => {
                c.acl = SessionACL::RootAndOwner;
                continue;
            }
            "ro" if opts.read_only => continue,
            "ro" => MountOption::RO,
            "nosuid" => MountOption::NoSuid,
            "nodev" => MountOption::NoDev,
            "noexec" => MountOption::NoExec,
            "noatime" => MountOption::NoAtime,
            "sync" => MountOption::Sync,
            "dirsync" => MountOption::DirSync,
            "suid" | "dev" | "exec" | "atime" | "async" => continue,
            x if x.starts_with("fsname=") => MountOption::FSName(x[7..].into()),
            x if x.starts_with("subtype=") => MountOption::Subtype(x[8..].into()),
            x => MountOption::CUSTOM(x.into()),
        };
        m.push(opt);
    }
    if kernel_checks(opts, root, c.acl) {
        m.insert(0, MountOption::DefaultPermissions);
    }
    c.mount_options = m;
    c.n_threads = Some(opts.threads.max(1));
    c.clone_fd = opts.threads > 1;
    c.io_uring = opts.transport != TransportChoice::Dev;
    c
}

/// Entries of each FUSE-over-io_uring queue: requests one queue holds at once. A
/// queue's thread handles its requests one after the other, so two suffice (one being
/// handled, one waiting); with uthread handlers, replies come later from the
/// runtime's workers and more requests are in flight.
fn ring_depth(opts: &Options) -> usize {
    if opts.uthread_workers > 0 {
        16
    } else {
        2
    }
}

/// A mounted file system, serving nothing until [`Mount::run`].
pub struct Mount {
    session: fuser::Session<Server>,
    lookups: LookupCounts,
    inval: Arc<Invalidator>,
    inval_thread: std::thread::JoinHandle<()>,
    handler_stats: Option<HandlerStats>,
    flushes: Flushes,
    mountpoint: PathBuf,
    /// The FUSE-over-io_uring transport, if the kernel granted it.
    uring: Option<UringTransport>,
    /// What was done to the kernel's dirty-page limit of the mount (writeback cache).
    dirty_limit: Option<String>,
}

impl Mount {
    /// Mounts `fs` at `mountpoint` (the kernel's handshake included: the mount is up
    /// when this returns).
    pub fn new(fs: Arc<FileSystem>, mountpoint: &Path, opts: &Options) -> io::Result<Mount> {
        let max_ratio = opts.bdi_max_ratio()?;
        // The path the mount table will show, resolved before mounting: once mounted,
        // resolving it would ask the server, which serves nothing until `run`.
        let at = opts
            .writeback_cache()
            .then(|| std::fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.into()));
        let server = Server::with_options(fs.clone(), opts)?;
        let lookups = server.lookups();
        let handler_stats = server.handler_stats();
        let flushes = server.flushes();
        let inval = server.invalidator();
        let session = fuser::Session::new(server, mountpoint, &config(opts))?;
        let uring = if session.over_io_uring() {
            let device = session.as_fd().try_clone_to_owned()?;
            Some(
                UringTransport::new(device, session.max_payload(), ring_depth(opts))
                    .late_replies(opts.uthread_workers > 0),
            )
        } else if opts.transport == TransportChoice::Uring {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "the kernel did not grant FUSE over io_uring ({})",
                    crate::daemon::uring_note(crate::kernel_offers_uring())
                ),
            ));
        } else {
            None
        };
        let dirty_limit = at.map(|at| {
            let dev = crate::control::device_of(&at);
            crate::bdi::relax(
                dev.as_deref(),
                max_ratio,
                rustix::process::geteuid().is_root(),
            )
        });
        // From here on, every change made through another door of this process is
        // invalidated in the kernel's caches.
        let inval_thread = inval.start(session.notifier())?;
        fs.set_inode_changes(inval.clone());
        Ok(Mount {
            session,
            lookups,
            inval,
            inval_thread,
            handler_stats,
            flushes,
            mountpoint: mountpoint.to_path_buf(),
            uring,
            dirty_limit,
        })
    }

    /// With the writeback cache, what was done to the kernel's limit on the mount's
    /// dirty pages (see `bdi.rs`), for the log; `None` without it.
    pub fn dirty_limit(&self) -> Option<&str> {
        self.dirty_limit.as_deref()
    }

    /// The transport requests come through, for the log: FUSE over io_uring (its
    /// queues) or `/dev/fuse`.
    pub fn transport(&self) -> String {
        match &self.uring {
            Some(_) => format!(
                "transport FUSE over io_uring ({} queues, one per CPU, of {} entries, each served by a thread on its CPU; one thread reads /dev/fuse for forgets)",
                crate::uring::possible_cpus(),
                self.uring.as_ref().map_or(0, UringTransport::depth)
            ),
            None => format!(
                "transport /dev/fuse ({})",
                crate::daemon::uring_note(crate::kernel_offers_uring())
            ),
        }
    }

    /// The uthread handlers' counters, if [`Options::uthread_workers`] is not zero.
    pub fn handler_stats(&self) -> Option<HandlerStats> {
        self.handler_stats.clone()
    }

    /// The invalidations of the kernel's caches, for inspection while the mount runs.
    pub fn invalidator(&self) -> Arc<Invalidator> {
        self.inval.clone()
    }

    /// The kernel's lookup counts, for inspection while the mount runs.
    pub fn lookups(&self) -> LookupCounts {
        self.lookups.clone()
    }

    /// The `FLUSH` requests the kernel sent, for inspection while the mount runs.
    pub fn flushes(&self) -> Flushes {
        self.flushes.clone()
    }

    /// The FUSE-over-io_uring transport's counters, if the kernel granted it.
    pub fn ring_stats(&self) -> Option<Arc<RingStats>> {
        self.uring.as_ref().map(UringTransport::stats)
    }

    /// Where it is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Serves requests until the file system is unmounted (`umount`, `fusermount3 -u`,
    /// [`unmount`]); every request read is answered before this returns. The server,
    /// and with it its reference to the `fs` file system, is dropped by then.
    ///
    /// A connection the kernel reports aborted (`ECONNABORTED` from `/dev/fuse`) is an
    /// end like `ENODEV`: it is what a reader may see when the last file open on a
    /// lazily unmounted mount is closed; no request can arrive after it either way.
    pub fn run(self) -> io::Result<()> {
        let r = match self.uring {
            Some(mut t) => self.session.run_with_transport(&mut t),
            None => self.session.run(),
        };
        self.inval.close();
        let _ = self.inval_thread.join();
        match r {
            Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => Ok(()),
            other => other,
        }
    }
}

/// A mount served on a thread of its own ([`Mount::spawn`]), beside what else the
/// process serves (`easyio serve --mount`).
pub struct Background {
    mountpoint: PathBuf,
    thread: std::thread::JoinHandle<io::Result<()>>,
}

impl Mount {
    /// Serves requests on a thread of its own, named `easyio-fuse`, until
    /// [`Background::stop`] or another unmount.
    pub fn spawn(self) -> io::Result<Background> {
        let mountpoint = self.mountpoint.clone();
        let thread = std::thread::Builder::new()
            .name("easyio-fuse".into())
            .spawn(move || self.run())?;
        Ok(Background { mountpoint, thread })
    }
}

impl Background {
    /// Unmounts lazily (the mount point is free at once; the session ends once the
    /// last file open on it is closed) and waits for the session to end.
    pub fn stop(self) -> io::Result<()> {
        if !self.thread.is_finished() {
            unmount(&self.mountpoint, true)?;
        }
        self.thread
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the FUSE thread panicked")))
    }
}

/// Unmounts the FUSE file system at `mountpoint`: `umount2(2)` (lazily if `lazy`: the
/// name goes at once, the server ends when the last file open on it is closed), or,
/// refused that (not root), `fusermount3 -u [-z]`.
pub fn unmount(mountpoint: &Path, lazy: bool) -> io::Result<()> {
    use rustix::mount::UnmountFlags;
    let flags = if lazy {
        UnmountFlags::DETACH
    } else {
        UnmountFlags::empty()
    };
    match rustix::mount::unmount(mountpoint, flags) {
        Ok(()) => return Ok(()),
        Err(rustix::io::Errno::PERM) => {}
        Err(e) => return Err(e.into()),
    }
    let mut cmd = std::process::Command::new("fusermount3");
    cmd.arg("-u");
    if lazy {
        cmd.arg("-z");
    }
    let out = cmd.arg(mountpoint).output().map_err(|e| {
        io::Error::new(e.kind(), format!("fusermount3 (Debian package fuse3): {e}"))
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::parse_options;

    #[test]
    fn options_are_split_and_mapped() {
        assert_eq!(parse_options("allow_other,,ro"), vec!["allow_other", "ro"]);
        let opts = Options {
            extra: parse_options("allow_other,nosuid,fsname=img,max_read=65536"),
            ..Options::default()
        };
        let c = config(&opts);
        assert_eq!(c.acl, SessionACL::All);
        assert!(c.mount_options.contains(&MountOption::DefaultPermissions));
        assert!(config_as(&opts, true)
            .mount_options
            .contains(&MountOption::DefaultPermissions));
        assert!(c.mount_options.contains(&MountOption::NoSuid));
        assert!(c.mount_options.contains(&MountOption::FSName("img".into())));
        assert!(!c
            .mount_options
            .contains(&MountOption::FSName("easyio".into())));
        assert!(c
            .mount_options
            .contains(&MountOption::Subtype("easyio".into())));
        assert!(c
            .mount_options
            .contains(&MountOption::CUSTOM("max_read=65536".into())));
        assert!(!opts.writeback_cache());
    }

    #[test]
    fn the_kernel_checks_modes_unless_only_root_reaches_the_mount() {
        let has = |extra: &str, root| {
            let opts = Options {
                extra: parse_options(extra),
                ..Options::default()
            };
            config_as(&opts, root)
                .mount_options
                .contains(&MountOption::DefaultPermissions)
        };
        assert!(!has("nosuid", true));
        assert!(has("nosuid", false));
        assert!(has("allow_other", true));
        assert!(has("allow_root", true));
        assert!(has("default_permissions", true));
    }

    #[test]
    fn writeback_cache_is_the_servers_option_not_the_kernels() {
        let opts = Options {
            extra: parse_options("nosuid,writeback_cache"),
            ..Options::default()
        };
        assert!(opts.writeback_cache());
        let c = config(&opts);
        assert!(!c
            .mount_options
            .iter()
            .any(|o| matches!(o, MountOption::CUSTOM(x) if x.contains("writeback"))));
        let ratio = Options {
            extra: parse_options("writeback_cache,bdi_max_ratio=30"),
            ..Options::default()
        };
        assert_eq!(ratio.bdi_max_ratio().unwrap(), 30);
        assert!(!config(&ratio)
            .mount_options
            .iter()
            .any(|o| matches!(o, MountOption::CUSTOM(x) if x.contains("bdi"))));
        for bad in ["bdi_max_ratio=0", "bdi_max_ratio=101", "bdi_max_ratio=x"] {
            let o = Options {
                extra: parse_options(bad),
                ..Options::default()
            };
            assert!(o.bdi_max_ratio().is_err(), "{bad}");
        }
        let flag = Options {
            writeback_cache: true,
            ..Options::default()
        };
        assert!(flag.writeback_cache());
    }
}
