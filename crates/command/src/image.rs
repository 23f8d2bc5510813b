//! Where a command's image is. Every command that opens an image (the file commands,
//! `mount`, `serve`) takes it the same ways: `--image IMAGE` before the command or
//! after it, the command's `IMAGE` argument where it has one (`mkfs`, `fsck`, `info`,
//! `mount`, `serve`), or the `EASYIO_IMAGE` environment variable, which counts only
//! when none of the others is given. Ways that name different images are a usage
//! error; a command that opens no image refuses `--image`.

use std::path::{Path, PathBuf};

use clap::Args;

/// The command's `--image` (or `EASYIO_IMAGE`).
#[derive(Args, Clone, Debug, Default)]
pub struct ImagePath {
    /// Region holding the file system (a file, e.g. in /dev/shm, or a devdax device):
    /// here, before the command (`easyio --image IMAGE ls`), as the command's IMAGE
    /// argument where it has one, or in EASYIO_IMAGE.
    #[arg(long, env = "EASYIO_IMAGE", value_name = "IMAGE")]
    pub image: Option<PathBuf>,
}

impl ImagePath {
    /// The image, or a usage error when none was given.
    pub fn path(&self) -> anyhow::Result<&Path> {
        match &self.image {
            Some(p) => Ok(p),
            None => crate::usage!(
                "no image: give --image IMAGE (before or after the command, or as the \
                 command's IMAGE argument where it has one) or set EASYIO_IMAGE"
            ),
        }
    }

    /// Settles the image from the ways it was given on the command line, each with
    /// how it was given: `before` (`--image` before the command), `own` (the
    /// command's `--image`, when given on the command line rather than by
    /// `EASYIO_IMAGE`) and `positional` (its IMAGE argument). The first one given
    /// counts, and the others must name the same file; with none, what the
    /// environment gave stays. The error says which two differ.
    pub fn settle(
        &mut self,
        before: Option<PathBuf>,
        own: bool,
        positional: Option<PathBuf>,
    ) -> Result<(), String> {
        let own = own.then(|| self.image.clone()).flatten();
        let mut given = [
            (before, "--image before the command"),
            (own, "--image"),
            (positional, "the IMAGE argument"),
        ]
        .into_iter()
        .filter_map(|(p, how)| p.map(|p| (p, how)));
        let Some((first, how)) = given.next() else {
            return Ok(());
        };
        if let Some((other, how2)) = given.find(|(p, _)| !same_file(&first, p)) {
            return Err(format!(
                "two images given: {} ({how}) and {} ({how2}); give one",
                first.display(),
                other.display()
            ));
        }
        self.image = Some(first);
        Ok(())
    }
}

/// The image of a file command, and how it opens it.
#[derive(Args, Clone, Debug, Default)]
pub struct ImageArg {
    /// Where the image is.
    #[command(flatten)]
    pub at: ImagePath,
    /// Mount read-only: nothing is written to the image (a crash is recovered in memory
    /// only), a damaged file fails alone with EUCLEAN, and the image file itself may be
    /// read-only. (A mount falls back to this by itself, with a warning, when it finds
    /// damage it cannot repair.)
    #[arg(long)]
    pub read_only: bool,
}

impl ImageArg {
    /// The image, or a usage error when none was given.
    pub fn path(&self) -> anyhow::Result<&Path> {
        self.at.path()
    }
}

/// Whether two paths name one file: the same words, or the same file once resolved.
fn same_file(a: &Path, b: &Path) -> bool {
    a == b || std::fs::canonicalize(a).is_ok_and(|a| std::fs::canonicalize(b).is_ok_and(|b| a == b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(p: Option<&str>) -> ImagePath {
        ImagePath {
            image: p.map(PathBuf::from),
        }
    }

    #[test]
    fn the_ways_that_agree_give_the_image_and_ways_that_differ_are_refused() {
        let p = |s: &str| Some(PathBuf::from(s));
        // One way alone, whichever it is.
        for (before, own, pos) in [
            (p("a"), None, None),
            (None, p("a"), None),
            (None, None, p("a")),
        ] {
            let mut i = at(own.as_deref().and_then(Path::to_str));
            i.settle(before, own.is_some(), pos).unwrap();
            assert_eq!(i.image, p("a"));
        }
        // The same file named two ways (once through `.`).
        let dir = std::env::temp_dir();
        let mut i = at(None);
        i.settle(Some(dir.clone()), false, Some(dir.join(".")))
            .unwrap();
        assert_eq!(i.image, Some(dir));
        // Two files: refused, both named.
        let mut i = at(Some("b"));
        let e = i.settle(p("a"), true, None).unwrap_err();
        assert!(
            e.contains("a (--image before the command) and b (--image)"),
            "{e}"
        );
        let e = at(None).settle(None, false, p("c")).map(|_| ());
        assert!(e.is_ok());
        let e = at(Some("x")).settle(None, true, p("y")).unwrap_err();
        assert!(e.contains("x (--image) and y (the IMAGE argument)"), "{e}");
        // Only the environment's: it stays.
        let mut i = at(Some("env"));
        i.settle(None, false, None).unwrap();
        assert_eq!(i.image, p("env"));
        // The environment's gives way to the command line's.
        let mut i = at(Some("env"));
        i.settle(None, false, p("cmd")).unwrap();
        assert_eq!(i.image, p("cmd"));
        assert!(at(None).path().is_err());
    }
}
