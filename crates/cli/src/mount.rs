//! `easyio mount` and `easyio umount`: the arguments, the calls into `easyio-fuse`
//! (which checks, detaches, serves and waits), and what they print.

use std::path::PathBuf;

use clap::Args;
use easyio_fuse::{DetachOptions, Detached, ServeOptions};
use fs::Mode;
use pmem::slowmem::Preset;

use command::image::ImagePath;
use command::{signals, usage};

#[derive(Args)]
pub struct MountArgs {
    #[command(flatten)]
    pub at: ImagePath,
    /// The image (a region file, e.g. in /dev/shm, or a devdax device), unless given
    /// as --image or EASYIO_IMAGE: then the one argument is the directory.
    #[arg(value_name = "IMAGE")]
    pub given: Option<PathBuf>,
    /// An existing directory to mount on (what it holds is hidden while mounted, as
    /// with any mount).
    #[arg(value_name = "DIR")]
    mountpoint: Option<PathBuf>,
    /// Stay in the foreground, logging to standard error.
    #[arg(short, long)]
    foreground: bool,
    /// Mount options, comma-separated (allow_other, allow_root, ro, nosuid, nodev,
    /// noexec, noatime, fsname=..., subtype=..., writeback_cache, default_permissions,
    /// bdi_max_ratio=N); default_permissions is on unless root mounts without
    /// allow_other or allow_root. With the writeback cache, a mount by root lifts the
    /// kernel's strict limit on its dirty pages and lets them hold bdi_max_ratio
    /// (1-100, default 50) per cent of the machine's dirty limit.
    #[arg(short = 'o', value_name = "OPTS")]
    options: Vec<String>,
    /// Who moves file data. In async mode reads, writes and fsyncs are served by
    /// uthreads (as many workers as --threads), which yield while their copies run.
    #[arg(long, default_value = "cpu")]
    mode: Mode,
    /// Slow-memory emulation: every copy into or out of the image takes as long as
    /// the model says (labelled EMULATED).
    #[arg(long, value_enum, default_value = "none")]
    slowmem: Preset,
    /// Let the kernel cache writes (FUSE's writeback cache; also -o writeback_cache).
    /// A write() that returns is then in the kernel's page cache only: durable after
    /// fsync() or close() (the kernel sends its cached pages before the close
    /// returns), lost if the machine or the server stops before. Off: a write() that
    /// returns is durable.
    #[arg(long)]
    writeback_cache: bool,
    /// Keep file data out of the kernel's page cache: every read and write goes
    /// straight between the caller's buffer and the server, as on a DAX file system
    /// (one copy fewer per write, a round trip per read). Default: the kernel keeps
    /// file pages, reads of a kept page never reach the server, and a write() still
    /// returns only once the server made it durable.
    #[arg(long, conflicts_with = "writeback_cache")]
    direct_io: bool,
    /// Deprecated, the default now: the kernel keeps file data in its page cache.
    #[arg(long, hide = true, conflicts_with = "direct_io")]
    page_cache: bool,
    /// Mount read-only: nothing is written to the image.
    #[arg(long)]
    read_only: bool,
    /// Threads serving requests (default: one per core, at most 8). With FUSE over
    /// io_uring, one thread per CPU serves its ring and one reads /dev/fuse instead.
    #[arg(long, default_value_t = easyio_fuse::default_threads())]
    threads: usize,
    /// How requests reach the server: `auto` (FUSE over io_uring where the kernel
    /// offers it, Linux 6.14+ with the fuse module's enable_uring on; /dev/fuse
    /// otherwise), `uring` (fail if the kernel does not grant it) or `dev` (reads of
    /// /dev/fuse only). The log and `easyio info` say which.
    #[arg(long, default_value = "auto", value_name = "auto|uring|dev")]
    transport: easyio_fuse::TransportChoice,
    /// Log file of the background server (default: one in the temporary directory,
    /// removed when the server has unmounted the image cleanly and kept, named in the
    /// error, when the mount fails).
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
}

#[derive(Args)]
pub struct UmountArgs {
    /// Where an image is mounted.
    mountpoint: PathBuf,
}

impl MountArgs {
    /// One argument alone is the directory (the image then given otherwise).
    pub fn settle_arguments(&mut self) {
        if self.mountpoint.is_none() {
            self.mountpoint = self.given.take();
        }
    }
}

/// `easyio mount`.
pub fn mount(a: MountArgs) -> anyhow::Result<()> {
    if a.page_cache {
        eprintln!("easyio: --page-cache is the default now (--direct-io turns it off)");
    }
    let Some(dir) = &a.mountpoint else {
        usage!("no directory to mount on: easyio mount IMAGE DIR (or --image IMAGE mount DIR)");
    };
    let image = a.at.path()?.to_path_buf();
    let mountpoint = easyio_fuse::check_mountpoint(dir)?;
    easyio_fuse::check_fuse_device()?;
    if a.foreground {
        return Ok(easyio_fuse::serve(&serve_options(a, image, mountpoint))?);
    }
    let detach = DetachOptions {
        args: std::env::args_os()
            .skip(1)
            .chain(["--foreground".into()])
            .collect(),
        log: a.log.clone(),
    };
    match easyio_fuse::detach(&detach)? {
        Detached::Mounted { pid, log } => {
            println!(
                "easyio: {} mounted on {} (server pid {pid}, log {}){}",
                image.display(),
                mountpoint.display(),
                log.display(),
                easyio_fuse::label(a.slowmem.model())
            );
            Ok(())
        }
        Detached::Failed { status, message } => {
            eprintln!("{message}");
            std::process::exit(status);
        }
    }
}

/// What `easyio mount --foreground` serves, as `a` says.
fn serve_options(a: MountArgs, image: PathBuf, mountpoint: PathBuf) -> ServeOptions {
    let mount = easyio_fuse::Options {
        threads: a.threads,
        read_only: a.read_only,
        extra: a
            .options
            .iter()
            .flat_map(|o| easyio_fuse::parse_options(o))
            .collect(),
        uthread_workers: if a.mode == Mode::Async { a.threads } else { 0 },
        writeback_cache: a.writeback_cache,
        page_cache: !a.direct_io,
        transport: a.transport,
    };
    ServeOptions {
        image,
        mountpoint,
        mode: a.mode,
        read_only: a.read_only,
        slowmem: a.slowmem.model(),
        mount,
        stop_requested: || matches!(signals::received(), Some(libc::SIGINT | libc::SIGTERM)),
    }
}

/// `easyio umount`: unmounts, then waits for the server to save the image.
pub fn umount(a: UmountArgs) -> anyhow::Result<()> {
    Ok(easyio_fuse::umount(&a.mountpoint)?)
}
