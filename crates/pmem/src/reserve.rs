//! Reserving a region file's blocks up front, so that a full file system is an error
//! at create or open time and never a SIGBUS on a store.

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::error::{io_err, Result};

/// Reserves the file's blocks now (`fallocate`) so that a full file system is a clear
/// error (ENOSPC) at create or open time rather than SIGBUS on first touch. Cheap on a
/// file whose blocks are all allocated already. A file system without `fallocate` gets
/// each block written instead, as `posix_fallocate` does.
pub(crate) fn reserve(file: &File, path: &Path, size: u64) -> Result<()> {
    match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, size) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::INVAL) => {
            file.set_len(size).map_err(|e| io_err(path, "set_len", e))?;
            write_blocks(file, size).map_err(|e| io_err(path, "reserve space", e))
        }
        Err(e) => Err(io_err(path, "reserve space", e.into())),
    }
}

/// Allocates every block of the first `size` bytes of `file` by writing a zero byte
/// into each block whose first byte reads as zero (a hole, or a block that starts with
/// a zero: rewriting it changes nothing).
fn write_blocks(file: &File, size: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let block = file.metadata()?.blksize().max(512);
    let mut off = 0;
    while off < size {
        let mut byte = [0u8];
        if file.read_at(&mut byte, off)? != 1 || byte[0] == 0 {
            file.write_all_at(&[0], off)?;
        }
        off += block;
    }
    Ok(())
}
