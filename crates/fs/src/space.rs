//! Space of a file: `fallocate` (allocate, keep size, punch a hole) and `lseek` with
//! `SEEK_DATA`/`SEEK_HOLE`.
//!
//! Allocation (mode 0 and [`FALLOC_FL_KEEP_SIZE`]) gives every page of the range that
//! has no block a fresh block filled with zeros, made durable before one commit of the
//! write entries that map them (and, without `KEEP_SIZE`, the new size): all or
//! nothing, so `ENOSPC` leaves the file as it was. Pages that already have a block are
//! left alone. Allocated blocks are data: they count in `st_blocks`, and `SEEK_DATA`
//! finds them (Linux's tmpfs and ext4 report allocated but never written ranges as
//! holes instead).
//!
//! Punching ([`FALLOC_FL_PUNCH_HOLE`] `|` [`FALLOC_FL_KEEP_SIZE`]) drops the blocks of
//! the pages wholly inside the range (a punch entry) and gives the one or two pages it
//! covers in part a copy with that part zeroed (copy-on-write entries); all of them
//! are committed together with one atomic tail store, so a crash leaves the file as it
//! was before the punch or after it. The size never changes.
//!
//! `SEEK_DATA` and `SEEK_HOLE` follow the block map: a page with a block is data, a
//! page without one a hole, and the end of the file is a hole. An offset at or past the
//! end is `ENXIO`, as is `SEEK_DATA` with no data after the offset.

use std::sync::Arc;

use crate::alloc::Extent;
use crate::error::{Error, Result};
use crate::file::{Fd, Whence};
use crate::handle::Session;
use crate::inode::{push_block, FileKind, Inode, InodeState};
use crate::layout::BLOCK_SIZE;
use crate::log::{attr, Entry};
use crate::{now_ns, FileSystem, MAX_FILE_SIZE};

/// `fallocate` mode bit: do not change the file size.
pub const FALLOC_FL_KEEP_SIZE: i32 = 0x01;
/// `fallocate` mode bit: deallocate the range (with [`FALLOC_FL_KEEP_SIZE`] only).
pub const FALLOC_FL_PUNCH_HOLE: i32 = 0x02;

/// A block of zeros, the source of fresh allocated blocks.
static ZEROS: [u8; BLOCK_SIZE as usize] = [0; BLOCK_SIZE as usize];

impl FileSystem {
    /// `fallocate(fd, mode, off, len)`: mode 0 allocates the range and extends the size
    /// to cover it, [`FALLOC_FL_KEEP_SIZE`] allocates without changing the size,
    /// `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE` deallocates it (reads give zeros);
    /// every other mode is `EOPNOTSUPP`. Durable when it returns.
    pub fn fallocate(&self, fd: Fd, mode: i32, off: u64, len: u64) -> Result<()> {
        // The checks in the order Linux makes them (the descriptor, vfs_fallocate,
        // then tmpfs).
        let f = self.file(fd)?;
        if len == 0 {
            return Err(Error::Invalid("fallocate of an empty range".into()));
        }
        if mode & !(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE) != 0 {
            return Err(Error::NotSupported("fallocate mode"));
        }
        let punch = mode & FALLOC_FL_PUNCH_HOLE != 0;
        if punch && mode & FALLOC_FL_KEEP_SIZE == 0 {
            return Err(Error::NotSupported("hole punching must keep the size"));
        }
        if !f.writable() {
            return Err(Error::BadFd);
        }
        let inode = f.inode().clone();
        match inode.state.read().kind {
            FileKind::Dir => return Err(Error::IsDir),
            FileKind::File => {}
            _ => {
                return Err(Error::Invalid(
                    "fallocate of a file that is not regular".into(),
                ))
            }
        }
        let end = off
            .checked_add(len)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or(Error::FileTooBig)?;
        self.check_writable()?;
        if punch {
            self.punch_hole(&inode, off, end)
        } else {
            self.allocate(&inode, off, end, mode & FALLOC_FL_KEEP_SIZE != 0)
        }
    }

    /// Gives every page of `off..end` without a block a zeroed one; the size becomes at
    /// least `end` unless `keep_size`.
    fn allocate(&self, inode: &Arc<Inode>, off: u64, end: u64, keep_size: bool) -> Result<()> {
        let mut st = self.lock_settled(inode)?;
        let size = if keep_size { st.size } else { st.size.max(end) };
        let pages = off / BLOCK_SIZE..end.div_ceil(BLOCK_SIZE);
        // Refused before the pages are listed: a range far larger than the free space
        // would cost memory and time only to fail.
        let at_least = (pages.end - pages.start).saturating_sub(st.pages.len() as u64);
        if at_least > self.blocks.free_blocks() {
            self.reclaim_until_free(at_least);
            if at_least > self.blocks.free_blocks() {
                return Err(Error::NoSpace);
            }
        }
        let missing: Vec<u64> = pages.filter(|&pg| st.pages.get(pg).is_none()).collect();
        let now = now_ns();
        if missing.is_empty() {
            if size == st.size {
                return Ok(());
            }
            let e = size_entry(size, now);
            return self.commit_space(inode, &mut st, vec![e], Vec::new());
        }
        let extents = self.alloc_blocks(missing.len() as u64)?;
        let blocks: Vec<u64> = extents
            .iter()
            .flat_map(|e| e.start..e.start + e.len)
            .collect();
        for &b in &blocks {
            self.pm.copy_nt(b * BLOCK_SIZE, &ZEROS);
        }
        let entries = write_runs(&missing, &blocks, size, now);
        self.commit_space(inode, &mut st, entries, extents)
    }

    /// Drops the blocks of the pages wholly inside `off..end` and zeroes the parts of
    /// the others the range covers, copy-on-write, in one commit.
    fn punch_hole(&self, inode: &Arc<Inode>, off: u64, end: u64) -> Result<()> {
        let mut st = self.lock_settled(inode)?;
        let now = now_ns();
        let mut entries = Vec::new();
        let partial = partial_pages(off, end);
        let mut cow = Vec::new();
        let mapped: Vec<(u64, u64, u64, u64)> = partial
            .into_iter()
            .filter_map(|(pg, lo, hi)| st.pages.get(pg).map(|b| (pg, b, lo, hi)))
            .collect();
        if !mapped.is_empty() {
            cow = self.alloc_blocks(mapped.len() as u64)?;
            let fresh = cow.iter().flat_map(|e| e.start..e.start + e.len);
            for (&(pg, old, lo, hi), new) in mapped.iter().zip(fresh) {
                let mut page = vec![0u8; BLOCK_SIZE as usize];
                self.pm.read(old * BLOCK_SIZE, &mut page);
                page[lo as usize..hi as usize].fill(0);
                self.pm.copy_nt(new * BLOCK_SIZE, &page);
                entries.push(Entry::Write {
                    pgoff: pg,
                    block: new,
                    npages: 1,
                    size: st.size,
                    mtime: now,
                    sn: 0,
                });
            }
        }
        let (first, last) = (off.div_ceil(BLOCK_SIZE), end / BLOCK_SIZE);
        if first < last && st.pages.next_mapped(first).is_some_and(|p| p < last) {
            entries.push(Entry::Punch {
                pgoff: first,
                npages: last - first,
                time: now,
            });
        }
        if entries.is_empty() {
            return Ok(());
        }
        self.commit_space(inode, &mut st, entries, cow)
    }

    /// Stages and commits `entries` (which map the fresh blocks `fresh`, durable once
    /// staged), giving the blocks back if staging fails; retires what they displace.
    fn commit_space(
        &self,
        inode: &Arc<Inode>,
        st: &mut InodeState,
        entries: Vec<Entry>,
        fresh: Vec<Extent>,
    ) -> Result<()> {
        let staged = match self.stage(inode.ino, st, entries) {
            Ok(s) => s,
            Err(e) => {
                fresh.into_iter().for_each(|x| self.blocks.free(x));
                return Err(e);
            }
        };
        let displaced = self.commit_one(st, staged);
        self.retire(displaced);
        self.maybe_clean(inode, st);
        Ok(())
    }

    /// `lseek` with `SEEK_DATA` (`hole` false) or `SEEK_HOLE` (`hole` true) from `off`.
    pub(crate) fn seek_data_hole(&self, inode: &Arc<Inode>, off: i64, hole: bool) -> Result<u64> {
        let st = inode.state.read();
        if st.kind == FileKind::Dir {
            return Err(Error::Invalid("SEEK_DATA/SEEK_HOLE on a directory".into()));
        }
        if off < 0 || off as u64 >= st.size {
            return Err(Error::NoSuchOffset);
        }
        let off = off as u64;
        let pg = off / BLOCK_SIZE;
        if hole {
            let h = st.pages.next_hole(pg).saturating_mul(BLOCK_SIZE);
            return Ok(h.max(off).min(st.size));
        }
        match st.pages.next_mapped(pg) {
            Some(p) if p * BLOCK_SIZE < st.size => Ok((p * BLOCK_SIZE).max(off)),
            _ => Err(Error::NoSuchOffset),
        }
    }
}

impl InodeState {
    /// Applies a punch entry: the pages become holes, their blocks displaced.
    pub(crate) fn apply_punch(&mut self, e: &Entry, displaced: &mut Vec<Extent>) {
        let Entry::Punch {
            pgoff,
            npages,
            time,
        } = e
        else {
            return;
        };
        for b in self
            .pages
            .remove_range(*pgoff, pgoff.saturating_add(*npages))
        {
            push_block(displaced, b);
        }
        self.mtime = *time;
        self.ctime = *time;
    }
}

/// An attribute entry that sets the size (and the times).
fn size_entry(size: u64, now: i64) -> Entry {
    Entry::Attr {
        mask: attr::SIZE | attr::MTIME | attr::CTIME,
        mode: 0,
        uid: 0,
        gid: 0,
        size,
        atime: 0,
        mtime: now,
        ctime: now,
    }
}

/// Write entries mapping `pages` (ascending) to `blocks`, one per run contiguous in
/// both.
fn write_runs(pages: &[u64], blocks: &[u64], size: u64, now: i64) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    for (&pg, &b) in pages.iter().zip(blocks) {
        if let Some(Entry::Write {
            pgoff,
            block,
            npages,
            ..
        }) = out.last_mut()
        {
            let n = *npages as u64;
            if *pgoff + n == pg && *block + n == b && *npages < u32::MAX {
                *npages += 1;
                continue;
            }
        }
        out.push(Entry::Write {
            pgoff: pg,
            block: b,
            npages: 1,
            size,
            mtime: now,
            sn: 0,
        });
    }
    out
}

/// The pages `off..end` covers only in part, each with the byte range it covers.
fn partial_pages(off: u64, end: u64) -> Vec<(u64, u64, u64)> {
    let (p0, p1) = (off / BLOCK_SIZE, (end - 1) / BLOCK_SIZE);
    let mut out = Vec::new();
    for pg in [p0, p1] {
        if out.iter().any(|&(p, _, _)| p == pg) {
            continue;
        }
        let base = pg * BLOCK_SIZE;
        let lo = off.max(base) - base;
        let hi = end.min(base + BLOCK_SIZE) - base;
        if hi - lo < BLOCK_SIZE {
            out.push((pg, lo, hi));
        }
    }
    out
}

impl Session<'_> {
    /// `fallocate` through a descriptor: as [`FileSystem::fallocate`], which needs the
    /// descriptor open for writing (`EBADF`) — the permission was checked at `open`,
    /// as Linux checks it.
    pub fn fallocate(&self, fd: Fd, mode: i32, off: u64, len: u64) -> Result<()> {
        self.fs().fallocate(fd, mode, off, len)
    }

    /// `lseek` (with `SEEK_DATA`/`SEEK_HOLE`): no permission beyond the descriptor.
    pub fn lseek(&self, fd: Fd, off: i64, whence: Whence) -> Result<u64> {
        self.fs().lseek(fd, off, whence)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_pages_are_the_ends_of_the_range() {
        let b = BLOCK_SIZE;
        assert_eq!(partial_pages(0, b), vec![]);
        assert_eq!(partial_pages(0, 3 * b), vec![]);
        assert_eq!(partial_pages(10, 20), vec![(0, 10, 20)]);
        assert_eq!(partial_pages(10, b), vec![(0, 10, b)]);
        assert_eq!(partial_pages(b - 1, b + 1), vec![(0, b - 1, b), (1, 0, 1)]);
        assert_eq!(partial_pages(b, 2 * b + 5), vec![(2, 0, 5)]);
    }

    #[test]
    fn write_runs_merge_contiguous_pages_and_blocks() {
        let e = write_runs(&[1, 2, 3, 7], &[50, 51, 60, 61], 9, 0);
        let runs: Vec<(u64, u64, u32)> = e
            .iter()
            .map(|e| match e {
                Entry::Write {
                    pgoff,
                    block,
                    npages,
                    ..
                } => (*pgoff, *block, *npages),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(runs, vec![(1, 50, 2), (3, 60, 1), (7, 61, 1)]);
    }
}
