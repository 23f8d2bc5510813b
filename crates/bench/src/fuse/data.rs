//! The data the workloads write and check: each 4 KiB block stamped with its number
//! and the operation that wrote it and filled with a byte of its number, the data
//! file pre-filled and read back, and the created files checked.

use anyhow::{bail, Context};

use crate::target::{Handle, Mount};

/// Bytes of a block: the small I/O size, and the unit of the data's stamps.
pub(super) const BLOCK: usize = 4096;
/// Bytes of a sequential I/O.
pub(super) const SEQ_IO: usize = 1 << 20;
/// Blocks in the pattern buffer: a block's fill byte repeats every this many blocks,
/// so one buffer serves every 1 MiB-aligned write.
pub(super) const PATTERN_BLOCKS: u64 = (SEQ_IO / BLOCK) as u64;
/// Marks a block's number, so that zeroes or another file's bytes never pass.
const MAGIC: u64 = 0x6561_7379_696f_4655;

/// The stamp of block `b` written by operation `generation` (0: the pre-fill).
pub(super) fn stamp(block: &mut [u8], b: u64, generation: u64) {
    block[..8].copy_from_slice(&(b ^ MAGIC).to_le_bytes());
    block[8..16].copy_from_slice(&generation.to_le_bytes());
}

/// The fill byte of block `b` (a function of `b` modulo [`PATTERN_BLOCKS`]).
fn fill(b: u64) -> u8 {
    (b % PATTERN_BLOCKS) as u8 ^ 0xA5
}

/// A buffer of I/O that starts on a 4 KiB boundary, as `O_DIRECT` may require.
pub(super) struct Buf {
    v: Vec<u8>,
    off: usize,
    len: usize,
}

impl Buf {
    /// `len` zero bytes.
    pub(super) fn zeroed(len: usize) -> Buf {
        let v = vec![0u8; len + BLOCK];
        let off = v.as_ptr().align_offset(BLOCK);
        Buf { v, off, len }
    }
}

impl std::ops::Deref for Buf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.v[self.off..self.off + self.len]
    }
}

impl std::ops::DerefMut for Buf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.v[self.off..self.off + self.len]
    }
}

/// A 1 MiB buffer whose block `j` is filled with `fill(j)`: a write of block `b`
/// sends block `b % PATTERN_BLOCKS` of it after stamping it.
pub(super) fn pattern() -> Buf {
    let mut p = Buf::zeroed(SEQ_IO);
    for (j, block) in p.chunks_mut(BLOCK).enumerate() {
        block.fill(fill(j as u64));
    }
    p
}

/// Opens `p` of `t` for reading and writing (creating it if asked), with `O_DIRECT`
/// if `direct` and `t` is a directory of the host (the library has no page cache).
pub(super) fn open(t: &Mount, p: &str, create: bool, direct: bool) -> anyhow::Result<Handle> {
    use std::os::unix::fs::OpenOptionsExt;
    if !direct || matches!(t, Mount::Easyio(_)) {
        return t.open(p, create, false);
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .custom_flags(libc::O_DIRECT)
        .open(t.path(p))
        .with_context(|| format!("{p} with O_DIRECT"))?;
    Ok(Handle::File(f))
}

/// Whether `block` is block `b`: its number and its last byte (the quick check made
/// on every block a timed read returns).
pub(super) fn looks_right(block: &[u8], b: u64) -> bool {
    block[..8] == (b ^ MAGIC).to_le_bytes() && block[BLOCK - 1] == fill(b)
}

/// Whether `block` is block `b` as written by an operation up to `last_generation`,
/// every byte checked.
fn is_right(block: &[u8], b: u64, last_generation: u64) -> bool {
    let generation = u64::from_le_bytes(block[8..16].try_into().expect("8 bytes"));
    block.len() == BLOCK
        && block[..8] == (b ^ MAGIC).to_le_bytes()
        && generation <= last_generation
        && block[16..].iter().all(|&x| x == fill(b))
}

/// The file every data workload uses, pre-filled (generation 0) before each run.
pub(super) const DATA: &str = "/data";
/// The directory of the create workload.
pub(super) const CREATE_DIR: &str = "/created";

/// Writes the data file: `size` bytes of generation-0 blocks.
pub(super) fn prefill(t: &Mount, size: u64) -> anyhow::Result<()> {
    let mut buf = pattern();
    let h = t.open(DATA, true, false)?;
    t.truncate(&h, 0)?;
    for off in (0..size).step_by(SEQ_IO) {
        let b0 = off / BLOCK as u64;
        for (j, block) in buf.chunks_mut(BLOCK).enumerate() {
            stamp(block, b0 + j as u64, 0);
        }
        t.pwrite(&h, &buf, off)?;
    }
    t.close(h)
}

/// Reads the whole data file back and checks every byte; returns the blocks checked.
pub(super) fn verify_file(t: &Mount, size: u64, last_generation: u64) -> anyhow::Result<u64> {
    if t.size(DATA)? != size {
        bail!("{DATA} is {} bytes, not {size}", t.size(DATA)?);
    }
    let h = t.open(DATA, false, false)?;
    let mut buf = Buf::zeroed(SEQ_IO);
    for off in (0..size).step_by(SEQ_IO) {
        t.read_exact(&h, &mut buf, off)?;
        for (j, block) in buf.chunks(BLOCK).enumerate() {
            let b = off / BLOCK as u64 + j as u64;
            if !is_right(block, b, last_generation) {
                bail!("block {b} of {DATA} is wrong after the run");
            }
        }
    }
    t.close(h)?;
    Ok(size / BLOCK as u64)
}

/// The path of created file `k`.
pub(super) fn created(k: u64) -> String {
    format!("{CREATE_DIR}/f{k}")
}

/// Checks created files `from..to` (size and every byte) and removes them.
pub(super) fn check_created(t: &Mount, from: u64, to: u64) -> anyhow::Result<()> {
    let mut buf = Buf::zeroed(BLOCK);
    for k in from..to {
        let p = created(k);
        if t.size(&p)? != BLOCK as u64 {
            bail!("{p} is {} bytes, not {BLOCK}", t.size(&p)?);
        }
        let h = t.open(&p, false, false)?;
        t.read_exact(&h, &mut buf, 0)?;
        t.close(h)?;
        if !is_right(&buf, k, 1) {
            bail!("{p} holds the wrong bytes");
        }
        t.unlink(&p)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_and_checks_agree() {
        let mut p = pattern();
        let b = 1_000_003u64;
        let at = (b % PATTERN_BLOCKS) as usize * BLOCK;
        let block = &mut p[at..at + BLOCK];
        stamp(block, b, 7);
        assert!(looks_right(block, b));
        assert!(is_right(block, b, 7));
        assert!(!is_right(block, b, 6), "a generation from the future");
        assert!(!looks_right(block, b + 1));
        block[100] ^= 1;
        assert!(looks_right(block, b), "the quick check reads two places");
        assert!(!is_right(block, b, 7), "the full check reads every byte");
        assert!(!looks_right(&[0u8; BLOCK], 0), "zeroes are never a block");
    }
}
