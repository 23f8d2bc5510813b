//! Segments of 64-bit words the server and its clients both map: those the server
//! writes and clients read (the published epoch, the page tables, the version
//! table) and each client's epoch slot (written by the client, read and cleared by
//! the server).

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::AtomicU64;

use crate::shared::SharedBytes;

/// A mapping of shared 64-bit words, each reached atomically only.
pub struct Words {
    bytes: SharedBytes,
    fd: Option<OwnedFd>,
}

impl Words {
    /// A new zeroed segment of `words` words (a memfd named `name`), mapped
    /// read-write; its descriptor stays open to be sent to clients.
    ///
    /// The segment is sealed against resizing (a client that shrank it would make the
    /// server's next access fault) and, unless `clients_write`, against every
    /// writable mapping made after this one: a client that receives the descriptor can
    /// map it only read-only, whatever it asks.
    pub fn create(name: &str, words: usize, clients_write: bool) -> io::Result<Words> {
        let fd = sealable(name, words * 8)?;
        let mut w = Words::map(&fd, words, true)?;
        seal(&fd, clients_write)?;
        w.fd = Some(fd);
        Ok(w)
    }

    /// Maps `words` words of the segment `fd`, writable or not.
    pub fn map(fd: &impl AsFd, words: usize, writable: bool) -> io::Result<Words> {
        let len = words
            .checked_mul(8)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "segment too long"))?;
        Ok(Words {
            bytes: SharedBytes::map(fd, len, writable)?,
            fd: None,
        })
    }

    /// Word `i`; `None` past the end.
    pub fn get(&self, i: usize) -> Option<&AtomicU64> {
        self.bytes.word(i)
    }

    /// Words of the segment.
    pub fn len(&self) -> usize {
        self.bytes.len() / 8
    }

    /// Whether the segment has no words (never: mapping refuses that).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Word `i`, which must exist.
    pub fn at(&self, i: usize) -> &AtomicU64 {
        self.get(i).expect("word inside the segment")
    }

    /// The segment's descriptor (segments made by [`Words::create`] only).
    pub fn fd(&self) -> Option<&OwnedFd> {
        self.fd.as_ref()
    }
}

/// A new memfd of `bytes` bytes that can be sealed.
pub(crate) fn sealable(name: &str, bytes: usize) -> io::Result<OwnedFd> {
    use rustix::fs::MemfdFlags;
    let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    rustix::fs::ftruncate(&fd, bytes as u64)?;
    Ok(fd)
}

/// Seals a memfd against resizing and, unless `clients_write`, against writable
/// mappings made from now on; and against further seals (or unsealing).
pub(crate) fn seal(fd: &OwnedFd, clients_write: bool) -> io::Result<()> {
    use rustix::fs::SealFlags;
    let mut seals = SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL;
    if !clients_write {
        seals |= SealFlags::FUTURE_WRITE;
    }
    rustix::fs::fcntl_add_seals(fd, seals)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    /// Whether a shared writable mapping of `fd` can be made.
    fn maps_writable(fd: &OwnedFd) -> bool {
        Words::map(fd, 1, true).is_ok()
    }

    #[test]
    fn clients_can_neither_resize_a_segment_nor_write_one_they_only_read() {
        let read_only = Words::create("test-ro", 4, false).unwrap();
        let fd = read_only.fd().unwrap();
        assert!(!maps_writable(fd), "a read-only segment mapped writable");
        assert!(rustix::fs::ftruncate(fd, 0).is_err(), "a segment shrunk");
        assert!(Words::map(fd, 4, false).is_ok(), "it still maps read-only");
        read_only.at(3).store(7, Ordering::SeqCst);
        assert_eq!(
            Words::map(fd, 4, false)
                .unwrap()
                .at(3)
                .load(Ordering::SeqCst),
            7
        );
        let slot = Words::create("test-rw", 1, true).unwrap();
        let fd = slot.fd().unwrap();
        assert!(maps_writable(fd), "a client's own slot must map writable");
        assert!(rustix::fs::ftruncate(fd, 0).is_err(), "a slot shrunk");
        assert!(rustix::fs::ftruncate(fd, 1 << 20).is_err(), "a slot grown");
    }
}
