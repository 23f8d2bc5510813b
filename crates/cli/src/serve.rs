//! `easyio serve`: opens the image, serves it to client processes on a Unix socket
//! (`easyio-serve`) and, with `--mount`, through FUSE from the same process
//! (`easyio-fuse`), until SIGINT or SIGTERM; then unmounts the image.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use easyio_fuse::Background;
use fs::{FileSystem, Mode};
use pmem::slowmem::Preset;

use command::image::ImagePath;
use command::signals;

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub at: ImagePath,
    /// The image (a region file, e.g. in /dev/shm, or a devdax device; the same as
    /// --image).
    #[arg(value_name = "IMAGE")]
    pub given: Option<PathBuf>,
    /// The Unix socket clients connect to (a stale one left by a dead server is
    /// replaced).
    #[arg(long, value_name = "PATH")]
    socket: PathBuf,
    /// Also serve the image through FUSE on this directory, so programs that
    /// use files and clients of the socket share one file system.
    #[arg(long, value_name = "DIR")]
    mount: Option<PathBuf>,
    /// Who moves file data.
    #[arg(long, default_value = "cpu")]
    mode: Mode,
    /// Slow-memory emulation: every copy into or out of the image takes as long as
    /// the model says (labelled EMULATED; clients then read through requests).
    #[arg(long, value_enum, default_value = "none")]
    slowmem: Preset,
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
    let image = a.at.path()?;
    let slowmem = a.slowmem.model();
    let fs = Arc::new(easyio_fuse::open_image(image, a.mode, false, slowmem)?);
    // Clients read directly unless every read must pay for emulated slow memory.
    // Writes through FUSE keep the page tables as clients' do (`fs::DataChanges`).
    let direct = slowmem.is_none();
    let server = easyio_serve::Server::bind(fs.clone(), image, &a.socket, a.allow_other, direct)?;
    let fuse = match &mount {
        Some(dir) => Some(mount_beside(fs.clone(), dir, a.mode)?),
        None => None,
    };
    drop(fs);
    // One line, on stdout: it also tells a script that the socket is ready.
    println!(
        "easyio: serving {} on socket {}{} (pid {}, mode {}, direct reads {}{})",
        image.display(),
        a.socket.display(),
        mount
            .as_ref()
            .map_or(String::new(), |m| format!(" and on {}", m.display())),
        std::process::id(),
        a.mode,
        if direct { "on" } else { "off" },
        easyio_fuse::label(slowmem)
    );
    let stop = || matches!(signals::received(), Some(libc::SIGINT | libc::SIGTERM));
    let fs = server.run(stop);
    let fuse_ended = fuse.map(Background::stop);
    let fs = fs?;
    if let Some(Err(e)) = fuse_ended {
        eprintln!("easyio: serving FUSE requests: {e}");
    }
    let fs = Arc::try_unwrap(fs).map_err(|_| easyio_fuse::Error::StillHeld)?;
    fs.unmount().context("unmounting the image")?;
    eprintln!("easyio: {} unmounted cleanly", image.display());
    Ok(())
}

/// Mounts `fs` on `dir` and serves it on a thread of its own.
fn mount_beside(fs: Arc<FileSystem>, dir: &Path, mode: Mode) -> anyhow::Result<Background> {
    let threads = easyio_fuse::default_threads();
    let opts = easyio_fuse::Options {
        threads,
        uthread_workers: if mode == Mode::Async { threads } else { 0 },
        ..easyio_fuse::Options::default()
    };
    let m = easyio_fuse::Mount::new(fs, dir, &opts)
        .with_context(|| format!("mounting on {}", dir.display()))?;
    m.spawn().context("starting the FUSE thread")
}
