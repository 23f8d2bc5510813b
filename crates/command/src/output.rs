//! Files the command writes outside the image (`get`, plots, profiles, traces): written
//! under a temporary name beside the target and renamed over it only when complete, so
//! a failure or a signal never leaves the target truncated or half-written.
//!
//! The temporary file is created when the output is prepared — before any work — so a
//! target in a missing or read-only directory is refused at once; it is removed if the
//! output is dropped without [`Output::commit`]. A target that is the open image (same
//! device and inode, through any name or link) is refused. A target that exists and is
//! not a regular file (a terminal, `/dev/null`, a FIFO) is written in place.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{bail, Context};

/// A file being written; see the module documentation.
pub struct Output {
    target: PathBuf,
    /// The temporary file, or `None` when writing in place.
    temp: Option<PathBuf>,
    file: File,
    /// (device, inode) of the image the target must not be.
    image: Option<(u64, u64)>,
    committed: bool,
}

/// (device, inode) of `path`, following symbolic links.
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

impl Output {
    /// Prepares to write `target`; `image` is the image the command has open, if any.
    pub fn create(target: &Path, image: Option<&Path>) -> anyhow::Result<Output> {
        let image = image.and_then(identity);
        let meta = std::fs::metadata(target).ok();
        if let Some(m) = &meta {
            if image == Some((m.dev(), m.ino())) {
                bail!(
                    "{}: refusing to write over the image itself",
                    target.display()
                );
            }
            if m.is_dir() {
                return Err(std::io::Error::from_raw_os_error(libc::EISDIR))
                    .with_context(|| target.display().to_string());
            }
            if !m.is_file() {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(target)
                    .with_context(|| target.display().to_string())?;
                return Ok(Output {
                    target: target.into(),
                    temp: None,
                    file,
                    image,
                    committed: false,
                });
            }
        }
        // Write beside the file a symbolic link leads to, so the rename replaces the
        // file and not the link.
        let target = match std::fs::canonicalize(target) {
            Ok(real) if meta.is_some() => real,
            _ => target.to_path_buf(),
        };
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = target
            .file_name()
            .with_context(|| format!("{}: not a file name", target.display()))?;
        let mut temp_name = std::ffi::OsString::from(".");
        temp_name.push(name);
        temp_name.push(format!(
            ".easyio-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let temp = target.with_file_name(temp_name);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
            .with_context(|| target.display().to_string())?;
        if let Some(m) = &meta {
            // The replacement keeps the old file's permissions.
            let _ = file.set_permissions(m.permissions());
        }
        Ok(Output {
            target,
            temp: Some(temp),
            file,
            image,
            committed: false,
        })
    }

    /// The path the output is put at by [`Output::commit`].
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// The path being written now: the temporary file until [`Output::commit`].
    pub fn path(&self) -> &Path {
        self.temp.as_deref().unwrap_or(&self.target)
    }

    /// Makes the written data durable and puts it in place of the target.
    pub fn commit(mut self) -> anyhow::Result<()> {
        let context = || self.target.display().to_string();
        self.file.flush().with_context(context)?;
        let Some(temp) = &self.temp else {
            self.committed = true;
            return Ok(());
        };
        self.file.sync_all().with_context(context)?;
        if self.image.is_some() && identity(&self.target) == self.image {
            bail!(
                "{}: refusing to write over the image itself",
                self.target.display()
            );
        }
        std::fs::rename(temp, &self.target).with_context(context)?;
        self.committed = true;
        // The rename itself is durable once the directory is.
        if let Some(dir) = self.target.parent() {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }

    /// Writes `data` and commits.
    pub fn write_all(mut self, data: &[u8]) -> anyhow::Result<()> {
        self.file
            .write_all(data)
            .with_context(|| self.target.display().to_string())?;
        self.commit()
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        if let (false, Some(temp)) = (self.committed, &self.temp) {
            let _ = std::fs::remove_file(temp);
        }
    }
}

/// Refuses standard output when it is the open image (`easyio cat /f >> IMAGE`):
/// appending to a mapped image would change its size under the file system.
pub fn refuse_image_stdout(image: &Path) -> anyhow::Result<()> {
    use std::os::fd::AsFd;
    let out = std::io::stdout().as_fd().try_clone_to_owned()?;
    let meta = File::from(out).metadata()?;
    if identity(image) == Some((meta.dev(), meta.ino())) {
        bail!(
            "standard output is the image {}: refusing to write over it",
            image.display()
        );
    }
    Ok(())
}

/// An output path given on the command line, prepared up front when given.
pub fn prepare(target: Option<&Path>) -> anyhow::Result<Option<Output>> {
    target.map(|t| Output::create(t, None)).transpose()
}
