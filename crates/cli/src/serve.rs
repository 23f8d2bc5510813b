//! `easyio serve`: the arguments and the call into `easyio-serve`.

use std::path::PathBuf;

use bench::target::Slowmem;
use clap::Args;
use fs::Mode;

use crate::signals;

#[derive(Args)]
pub struct ServeArgs {
    /// The image (a region file, e.g. in /dev/shm, or a devdax device).
    image: PathBuf,
    /// The Unix socket clients connect to (a stale one left by a dead server is
    /// replaced).
    #[arg(long, value_name = "PATH")]
    socket: PathBuf,
    /// Also serve the image through FUSE on this empty directory, so programs that
    /// use files and clients of the socket share one file system (clients then read
    /// through requests, not directly).
    #[arg(long, value_name = "DIR")]
    mount: Option<PathBuf>,
    /// Who moves file data.
    #[arg(long, default_value = "cpu")]
    mode: Mode,
    /// Slow-memory emulation: every copy into or out of the image takes as long as
    /// the model says (labelled EMULATED).
    #[arg(long, value_enum, default_value = "none")]
    slowmem: Slowmem,
    /// Let every local user connect; each is checked as itself (uid and gid from the
    /// socket). Otherwise only this user may.
    #[arg(long)]
    allow_other: bool,
}

/// `easyio serve`: serves in the foreground until SIGINT or SIGTERM, then unmounts.
pub fn serve(a: ServeArgs) -> anyhow::Result<()> {
    let mount = match &a.mount {
        Some(dir) => {
            let dir = easyio_fuse::check_mountpoint(dir)?;
            easyio_fuse::check_fuse_device()?;
            Some(dir)
        }
        None => None,
    };
    let o = easyio_serve::ServeOptions {
        image: a.image,
        socket: a.socket,
        mount,
        mode: a.mode,
        slowmem: a.slowmem.model(),
        allow_other: a.allow_other,
        stop_requested: || matches!(signals::received(), Some(libc::SIGINT | libc::SIGTERM)),
    };
    Ok(easyio_serve::serve(&o)?)
}
