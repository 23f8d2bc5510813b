//! A regular file's bytes: sparse, page by page, as tmpfs keeps them.
//!
//! A page is absent (a hole: reads as zeros, no blocks), allocated but unwritten (by
//! `fallocate`: counts in `st_blocks`, reads as zeros, and is a hole to `SEEK_DATA`,
//! as tmpfs's not-yet-uptodate pages are), or written (data).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::PAGE;

const PAGE_BYTES: usize = PAGE as usize;

/// One page of a file: `None` while allocated but never written.
type Page = Option<Arc<[u8; PAGE_BYTES]>>;

/// A file's size and pages.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Data {
    size: u64,
    pages: BTreeMap<u64, Page>,
}

impl Data {
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Allocated pages (written or not), which `st_blocks` counts.
    pub fn pages(&self) -> u64 {
        self.pages.len() as u64
    }

    /// Whether page `page` is allocated (written or not): what a file system that
    /// follows its block map for `SEEK_DATA`/`SEEK_HOLE` calls data.
    pub fn allocated(&self, page: u64) -> bool {
        self.pages.contains_key(&page)
    }

    /// Up to `len` bytes from `off`, stopping at the end of the file.
    pub fn read(&self, off: u64, len: usize) -> Vec<u8> {
        let end = off.saturating_add(len as u64).min(self.size);
        if off >= end {
            return Vec::new();
        }
        let mut out = vec![0u8; (end - off) as usize];
        for (&p, page) in self.pages.range(off / PAGE..end.div_ceil(PAGE)) {
            let Some(bytes) = page else { continue };
            let (s, e) = ((p * PAGE).max(off), ((p + 1) * PAGE).min(end));
            out[(s - off) as usize..(e - off) as usize]
                .copy_from_slice(&bytes[(s - p * PAGE) as usize..(e - p * PAGE) as usize]);
        }
        out
    }

    /// A file holding `bytes`, every page of them written.
    pub fn from_bytes(bytes: &[u8]) -> Data {
        let mut d = Data::default();
        d.write(0, bytes);
        d
    }

    /// Whether both files read the same (size and bytes), however their pages are
    /// allocated.
    pub fn same_bytes(&self, other: &Data) -> bool {
        const ZERO: [u8; PAGE_BYTES] = [0; PAGE_BYTES];
        let page = |d: &Data, p: u64| -> [u8; PAGE_BYTES] {
            match d.pages.get(&p) {
                Some(Some(bytes)) => **bytes,
                _ => ZERO,
            }
        };
        self.size == other.size
            && self
                .pages
                .keys()
                .chain(other.pages.keys())
                .filter(|&&p| p * PAGE < self.size)
                .all(|&p| page(self, p) == page(other, p))
    }

    /// Every byte.
    pub fn to_vec(&self) -> Vec<u8> {
        self.read(0, self.size as usize)
    }

    /// Stores `buf` at `off`, growing the file; the pages it touches become data.
    pub fn write(&mut self, off: u64, buf: &[u8]) {
        if buf.is_empty() {
            return;
        }
        let end = off + buf.len() as u64;
        for p in off / PAGE..end.div_ceil(PAGE) {
            let page = self.pages.entry(p).or_insert(None);
            let bytes = Arc::make_mut(page.get_or_insert_with(|| Arc::new([0; PAGE_BYTES])));
            let (s, e) = ((p * PAGE).max(off), ((p + 1) * PAGE).min(end));
            bytes[(s - p * PAGE) as usize..(e - p * PAGE) as usize]
                .copy_from_slice(&buf[(s - off) as usize..(e - off) as usize]);
        }
        self.size = self.size.max(end);
    }

    /// `truncate` to `len`: a shrink (or a truncate to the same size) drops every page
    /// past `len`, even pages allocated beyond the end, and zeroes the tail of the last.
    pub fn truncate(&mut self, len: u64) {
        if len <= self.size {
            self.pages.retain(|&p, _| p < len.div_ceil(PAGE));
            self.zero(len, len.next_multiple_of(PAGE));
        }
        self.size = len;
    }

    /// Zeroes `[start, end)` in the pages that hold data, allocation unchanged.
    fn zero(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        for (&p, page) in self.pages.range_mut(start / PAGE..end.div_ceil(PAGE)) {
            if let Some(bytes) = page {
                let (s, e) = ((p * PAGE).max(start), ((p + 1) * PAGE).min(end));
                Arc::make_mut(bytes)[(s - p * PAGE) as usize..(e - p * PAGE) as usize].fill(0);
            }
        }
    }

    /// `fallocate` mode 0 (`keep_size` false) or `FALLOC_FL_KEEP_SIZE`: every page of
    /// `[off, off + len)` allocated; the size grows to cover it unless `keep_size`. A
    /// page an earlier `fallocate` allocated and nothing wrote is zeroed and becomes
    /// data now (tmpfs initialises it, "lest undo on failure cancel our earlier
    /// guarantee").
    pub fn allocate(&mut self, off: u64, len: u64, keep_size: bool) {
        let end = off + len;
        for p in off / PAGE..end.div_ceil(PAGE) {
            match self.pages.get_mut(&p) {
                None => {
                    self.pages.insert(p, None);
                }
                Some(page @ None) => *page = Some(Arc::new([0; PAGE_BYTES])),
                Some(Some(_)) => {}
            }
        }
        if !keep_size {
            self.size = self.size.max(end);
        }
    }

    /// `FALLOC_FL_PUNCH_HOLE`: pages wholly inside `[off, off + len)` freed, the bytes
    /// of partly covered ones zeroed; the size unchanged.
    pub fn punch(&mut self, off: u64, len: u64) {
        let end = off + len;
        let (first, last) = (off.div_ceil(PAGE), end / PAGE);
        self.pages.retain(|&p, _| p < first || p >= last);
        self.zero(off, end);
    }

    /// `lseek(SEEK_DATA)`: the first offset at or after `off` inside a written page and
    /// before the end, or `ENXIO`.
    pub fn seek_data(&self, off: u64) -> Result<u64, i32> {
        if off >= self.size {
            return Err(libc::ENXIO);
        }
        self.pages
            .range(off / PAGE..)
            .find(|(_, page)| page.is_some())
            .map(|(&p, _)| (p * PAGE).max(off))
            .filter(|&at| at < self.size)
            .ok_or(libc::ENXIO)
    }

    /// `lseek(SEEK_HOLE)`: the first offset at or after `off` outside every written
    /// page, or the size; `ENXIO` at or past the end.
    pub fn seek_hole(&self, off: u64) -> Result<u64, i32> {
        if off >= self.size {
            return Err(libc::ENXIO);
        }
        let mut p = off / PAGE;
        while matches!(self.pages.get(&p), Some(Some(_))) {
            p += 1;
        }
        Ok((p * PAGE).max(off).min(self.size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holes_allocation_and_seeking() {
        let mut d = Data::default();
        d.write(PAGE + 10, b"abc");
        assert_eq!(d.size(), PAGE + 13);
        assert_eq!(d.pages(), 1);
        assert_eq!(d.read(PAGE + 9, 5), b"\0abc");
        assert_eq!(d.seek_data(0), Ok(PAGE));
        assert_eq!(d.seek_hole(0), Ok(0));
        assert_eq!(d.seek_hole(PAGE), Ok(PAGE + 13));
        d.allocate(3 * PAGE, 10, true);
        assert_eq!((d.size(), d.pages()), (PAGE + 13, 2));
        assert_eq!(
            d.seek_hole(PAGE),
            Ok(PAGE + 13),
            "unwritten pages are holes"
        );
        d.allocate(2 * PAGE, 2 * PAGE, false);
        assert_eq!(d.seek_data(2 * PAGE), Ok(3 * PAGE), "allocated twice: data");
        d.truncate(PAGE + 13);
        d.truncate(PAGE + 11);
        assert_eq!(
            (d.read(0, usize::MAX - 1), d.pages()),
            ([&[0u8; 4096 + 10][..], b"a"].concat(), 1)
        );
        d.truncate(2 * PAGE);
        assert_eq!(d.read(PAGE + 10, 3), b"a\0\0", "a shrink zeroes the tail");
        d.write(0, &[7; 3 * PAGE_BYTES]);
        d.punch(10, 2 * PAGE);
        assert_eq!(d.pages(), 2, "only the one whole page is freed");
        assert_eq!(d.read(9, 2), [7, 0]);
        assert_eq!(d.seek_hole(0), Ok(PAGE));
        assert_eq!(d.seek_data(PAGE), Ok(2 * PAGE));
        assert_eq!(d.seek_data(3 * PAGE), Err(libc::ENXIO));
        let flat = Data::from_bytes(&d.to_vec());
        assert!(flat.same_bytes(&d) && d.same_bytes(&flat) && flat != d);
        let mut other = flat.clone();
        other.write(PAGE + 5, &[0]);
        assert!(other.same_bytes(&d), "a written zero reads as a hole does");
        other.write(PAGE + 5, &[1]);
        assert!(!other.same_bytes(&d));
    }
}
