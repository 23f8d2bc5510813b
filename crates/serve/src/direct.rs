//! The server's half of direct reads: clients copy file data straight from their
//! read-only mapping of the image, with no request (KucoFS's versioned read, with a
//! page table the server publishes instead of an index clients walk in the image).
//!
//! - **Page tables.** For each file a client reads directly, the server publishes in
//!   shared memory (read-only to clients) the file's size and, per page, the block
//!   holding it ([`HOLE`], or [`ASK`]: ask the server). A write publishes the new
//!   blocks and the size after the file system committed it, and only then retires
//!   the blocks it displaced (held back meanwhile: [`fs::FileSystem::holding_retired`]),
//!   so readers never wait for writers. A truncation first sets what it removes to
//!   [`ASK`] and the size to [`UNKNOWN`]. Changes of one file are serialised here.
//! - **Epochs.** Each client registers in the file system's epoch through a slot of
//!   shared memory before it reads a page table entry, and clears it after its copy
//!   ([`fs::ExternalReaders`]); a client that goes has its slot dropped.
//!
//! Why a copy is sound: a block is retired only after its entry stopped naming it. A
//! client that read the block's number after registering therefore read it before
//! the retirement, so the block is retired in the client's epoch or later, and not
//! reused until the client has cleared its slot.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use fs::{FileSystem, BLOCK_SIZE};
use parking_lot::Mutex;

use crate::shm::Words;
use crate::wire;

/// Word of a page table holding the file's size.
pub const SIZE: usize = 0;
/// Word of a page table holding page 0's entry; page `pg`'s is `PAGE0 + pg`.
pub const PAGE0: usize = 1;
/// Size word: changing, ask the server.
pub const UNKNOWN: u64 = u64::MAX;
/// Entry: ask the server (not published, or being changed).
pub const ASK: u64 = 0;
/// Entry: a hole, reads as zeros.
pub const HOLE: u64 = u64::MAX;
/// Pages a page table covers (64 GiB of file; the memory is used only where written).
pub const TABLE_PAGES: u64 = 1 << 24;
/// Pages a new page table publishes at once (64 MiB of file); the others are published
/// when a client reads them through a request.
const FIRST_PAGES: u64 = 1 << 14;
/// Locks serialising the changes of files (by inode number).
const STRIPES: usize = 256;

/// Where a write lands.
#[derive(Clone, Copy, Debug)]
pub enum At {
    /// At this offset.
    Offset(u64),
    /// At the end of the file (an appending descriptor).
    End,
    /// At the position of this descriptor, read once the file's changes are
    /// serialised (two connections may share the descriptor since a `fork`).
    Cursor(fs::Fd),
}

/// One file's published size and page → block entries.
pub(crate) struct PageTable {
    words: Words,
    /// One past the highest page ever given an entry other than [`ASK`].
    high: AtomicU64,
}

impl PageTable {
    /// The shared words, to send to clients.
    pub fn words(&self) -> &Words {
        &self.words
    }

    fn set(&self, pg: u64, v: u64) {
        if pg < TABLE_PAGES {
            if v != ASK {
                self.high.fetch_max(pg + 1, Ordering::SeqCst);
            }
            self.words
                .at(PAGE0 + pg as usize)
                .store(v, Ordering::SeqCst);
        }
    }

    /// Sets pages `[first, end)` to [`ASK`].
    fn forget(&self, first: u64, end: u64) {
        for pg in first..end.min(TABLE_PAGES) {
            self.set(pg, ASK);
        }
    }

    /// Publishes the blocks of pages `[first, end)` of file `ino` and its size.
    fn publish(&self, fs: &FileSystem, ino: u64, first: u64, end: u64) -> fs::Result<()> {
        let end = end.min(TABLE_PAGES);
        let (size, segs) = fs.map_inode(
            ino,
            first * BLOCK_SIZE,
            (end.saturating_sub(first)) * BLOCK_SIZE,
        )?;
        let mut pg = first;
        for (len, src) in segs {
            for k in 0..(len as u64).div_ceil(BLOCK_SIZE) {
                self.set(pg, src.map_or(HOLE, |s| s / BLOCK_SIZE + k));
                pg += 1;
            }
        }
        self.words.at(SIZE).store(size, Ordering::SeqCst);
        Ok(())
    }

    fn size(&self) -> u64 {
        self.words.at(SIZE).load(Ordering::SeqCst)
    }
}

/// The pages `[first, end)` a write of `len` bytes `at` file `ino` covers. Called
/// with the file's changes serialised: the size read now is where an appending write
/// lands.
fn pages_written(fs: &FileSystem, ino: u64, at: At, len: u64) -> (u64, u64) {
    let off = match at {
        At::Offset(off) => off,
        At::End => fs.map_inode(ino, 0, 0).map_or(0, |m| m.0),
        At::Cursor(fd) => fs.lseek(fd, 0, fs::Whence::Cur).unwrap_or(0),
    };
    (
        off / BLOCK_SIZE,
        off.saturating_add(len).div_ceil(BLOCK_SIZE),
    )
}

/// The pages of a submitted write, asking until its copy is done.
pub(crate) struct Unpublished {
    table: Arc<PageTable>,
    ino: u64,
    first: u64,
    end: u64,
}

/// The published epoch, the page tables, the version table and the clients' epoch
/// slots.
pub(crate) struct Direct {
    epoch: Words,
    /// Word `ino` counts the times inode `ino` was locked for a change (see
    /// `fs::InodeChanges`): a client that caches what a lookup told it keeps it
    /// while the words it holds at are unmoved.
    versions: Words,
    stripes: Vec<Mutex<()>>,
    /// Page tables by inode, with how many descriptors use each.
    tables: Mutex<HashMap<u64, (Arc<PageTable>, usize)>>,
    slots: Mutex<Vec<Arc<Words>>>,
}

impl Direct {
    /// Shared memory for a file system of `inodes` inode numbers.
    pub fn new(inodes: u64) -> io::Result<Direct> {
        Ok(Direct {
            epoch: Words::create("easyio-epoch", 1, false)?,
            versions: Words::create("easyio-versions", inodes.max(1) as usize, false)?,
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            tables: Mutex::new(HashMap::new()),
            slots: Mutex::new(Vec::new()),
        })
    }

    /// The word of the published epoch, to send to clients.
    pub fn epoch(&self) -> &Words {
        &self.epoch
    }

    /// The version table, to send to clients.
    pub fn versions(&self) -> &Words {
        &self.versions
    }

    /// Inode `ino`'s version ([`wire::UNSTABLE`] past the table).
    pub fn version(&self, ino: u64) -> u64 {
        usize::try_from(ino)
            .ok()
            .and_then(|i| self.versions.get(i))
            .map_or(wire::UNSTABLE, |w| w.load(Ordering::SeqCst))
    }

    fn stripe(&self, ino: u64) -> parking_lot::MutexGuard<'_, ()> {
        self.stripes[(ino % STRIPES as u64) as usize].lock()
    }

    /// The page table of file `ino`, published on first use; one more user of it.
    /// Fails with an errno.
    pub fn table(&self, fs: &FileSystem, ino: u64) -> Result<Arc<PageTable>, i32> {
        let _one_change_at_a_time = self.stripe(ino);
        if let Some((t, users)) = self.tables.lock().get_mut(&ino) {
            *users += 1;
            return Ok(t.clone());
        }
        let size = fs.map_inode(ino, 0, 0).map_err(|e| e.errno())?.0;
        let words = Words::create("easyio-pages", PAGE0 + TABLE_PAGES as usize, false)
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        words.at(SIZE).store(UNKNOWN, Ordering::SeqCst);
        let t = Arc::new(PageTable {
            words,
            high: AtomicU64::new(0),
        });
        // The first pages now; the rest as they are read through requests.
        let pages = size.div_ceil(BLOCK_SIZE).min(FIRST_PAGES);
        t.publish(fs, ino, 0, pages).map_err(|e| e.errno())?;
        self.tables.lock().insert(ino, (t.clone(), 1));
        Ok(t)
    }

    /// One user fewer of file `ino`'s page table; the last drops it.
    pub fn release(&self, ino: u64) {
        let mut tables = self.tables.lock();
        if let Some((_, users)) = tables.get_mut(&ino) {
            *users -= 1;
            if *users == 0 {
                tables.remove(&ino);
            }
        }
    }

    /// Files with a page table.
    pub fn tables_published(&self) -> usize {
        self.tables.lock().len()
    }

    fn published(&self, ino: u64) -> Option<Arc<PageTable>> {
        self.tables.lock().get(&ino).map(|(t, _)| t.clone())
    }

    /// Runs `f`, a write of `len` bytes `at` file `ino` on `fs`, keeping its page
    /// table (if it has one) honest. The blocks the write displaces are held back
    /// until the table names the new ones: readers keep copying the old blocks
    /// meanwhile, never asking the server.
    pub fn write<R>(
        &self,
        fs: &FileSystem,
        ino: u64,
        at: At,
        len: u64,
        f: impl FnOnce() -> R,
    ) -> R {
        let _one_change_at_a_time = self.stripe(ino);
        let Some(t) = self.published(ino) else {
            return f();
        };
        let (first, end) = pages_written(fs, ino, at, len);
        let (r, held) = fs.holding_retired(f);
        // Entries first, then the size: a reader that sees the new size sees the
        // pages that make it.
        self.republish(fs, &t, ino, first, end);
        fs.retire_held(held);
        r
    }

    /// Runs `f`, which starts a write of `len` bytes `at` file `ino` whose copy
    /// goes on after it returns (a submitted write). Readers may not copy the new
    /// blocks before the copy is done, so the pages the write covers, and the size,
    /// say "ask" until [`Direct::finish`] publishes them: meanwhile a reader asks the
    /// server, whose read waits for the copy. The blocks the write displaces are
    /// retired at once: once the pages say "ask", nothing names them.
    pub fn submit<R>(
        &self,
        fs: &FileSystem,
        ino: u64,
        at: At,
        len: u64,
        f: impl FnOnce() -> R,
    ) -> (R, Option<Unpublished>) {
        let _one_change_at_a_time = self.stripe(ino);
        let Some(t) = self.published(ino) else {
            return (f(), None);
        };
        let (first, end) = pages_written(fs, ino, at, len);
        t.words.at(SIZE).store(UNKNOWN, Ordering::SeqCst);
        t.forget(first, end);
        let (r, held) = fs.holding_retired(f);
        fs.retire_held(held);
        (
            r,
            Some(Unpublished {
                table: t,
                ino,
                first,
                end,
            }),
        )
    }

    /// Publishes what a submitted write left asking, once its copy is done (or
    /// failed: the file's blocks are published as the file system has them).
    pub fn finish(&self, fs: &FileSystem, u: Unpublished) {
        let _one_change_at_a_time = self.stripe(u.ino);
        self.republish(fs, &u.table, u.ino, u.first, u.end);
    }

    /// Publishes the pages of file `ino` that bytes `[off, off + len)` cover, if it
    /// has a page table: a client that read them through a request (they were not
    /// published yet) reads them directly next time.
    pub fn publish_read(&self, fs: &FileSystem, ino: u64, off: u64, len: u64) {
        let _one_change_at_a_time = self.stripe(ino);
        if let Some(t) = self.published(ino) {
            let (first, end) = (
                off / BLOCK_SIZE,
                off.saturating_add(len).div_ceil(BLOCK_SIZE),
            );
            self.republish(fs, &t, ino, first, end);
        }
    }

    /// Runs `f`, which sets file `ino`'s size to `len`, keeping its page table honest.
    pub fn truncate<R>(&self, fs: &FileSystem, ino: u64, len: u64, f: impl FnOnce() -> R) -> R {
        let _one_change_at_a_time = self.stripe(ino);
        let Some(t) = self.published(ino) else {
            return f();
        };
        let old = t.size();
        t.words.at(SIZE).store(UNKNOWN, Ordering::SeqCst);
        // Pages past the new end, and the new last page (its tail is zeroed), stop
        // being the file's: readers ask for them from now on. A size unknown since a
        // failed publication: up to the highest page ever published.
        let old_end = match old {
            UNKNOWN => t.high.load(Ordering::SeqCst),
            size => size.div_ceil(BLOCK_SIZE),
        };
        let (first, end) = (len / BLOCK_SIZE, old_end.min(TABLE_PAGES));
        t.forget(first, end);
        let r = f();
        // Published again: the new last page, and every page if the truncation was
        // refused (pages past the new end stay ASK: past the size, never read).
        self.republish(fs, &t, ino, first, end);
        r
    }

    /// Publishes pages `[first, end)` and the size again after a change; a file that
    /// cannot be mapped stays [`ASK`] and [`UNKNOWN`]: its readers ask the server.
    fn republish(&self, fs: &FileSystem, t: &PageTable, ino: u64, first: u64, end: u64) {
        if t.publish(fs, ino, first, end).is_err() {
            // The entries may still name blocks the change displaced: stop naming them
            // before they are retired.
            t.words.at(SIZE).store(UNKNOWN, Ordering::SeqCst);
            t.forget(first, end);
        }
    }

    /// A new client's epoch slot.
    pub fn add_slot(&self) -> io::Result<Arc<Words>> {
        let slot = Arc::new(Words::create("easyio-epoch-slot", 1, true)?);
        self.slots.lock().push(slot.clone());
        Ok(slot)
    }

    /// Drops a client's slot: it no longer holds reclamation back.
    pub fn remove_slot(&self, slot: &Arc<Words>) {
        slot.at(0).store(0, Ordering::SeqCst);
        self.slots.lock().retain(|s| !Arc::ptr_eq(s, slot));
    }
}

/// The FUSE mount of the same process changes files through this too (see
/// `fs::DataChanges`), so its writes keep the page tables as a client's do.
impl fs::DataChanges for Direct {
    fn write(
        &self,
        fs: &FileSystem,
        ino: u64,
        at: Option<u64>,
        len: u64,
        change: &mut dyn FnMut(),
    ) {
        let at = at.map_or(At::End, At::Offset);
        Direct::write(self, fs, ino, at, len, change);
    }

    fn reshape(&self, fs: &FileSystem, ino: u64, len: u64, change: &mut dyn FnMut()) {
        self.truncate(fs, ino, len, change);
    }
}

impl fs::InodeChanges for Direct {
    fn changing(&self, ino: u64) {
        if let Some(w) = usize::try_from(ino).ok().and_then(|i| self.versions.get(i)) {
            w.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl fs::ExternalReaders for Direct {
    fn pinned_before(&self, e: u64) -> bool {
        self.slots.lock().iter().any(|s| {
            let v = s.at(0).load(Ordering::SeqCst);
            v != 0 && v < e
        })
    }

    fn publish(&self, e: u64) {
        self.epoch.at(0).fetch_max(e, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use fs::{FormatOptions, MountOptions, OpenFlags};
    use pmem::{MemPmem, Pmem};

    use super::*;

    fn entry(t: &PageTable, pg: usize) -> u64 {
        t.words().at(PAGE0 + pg).load(Ordering::SeqCst)
    }

    #[test]
    fn a_registered_client_holds_back_the_reuse_of_blocks_it_may_read() {
        let pm: Arc<dyn Pmem> = Arc::new(MemPmem::new(16 << 20));
        FileSystem::format(&*pm, &FormatOptions::default()).unwrap();
        let (fs, _) = FileSystem::mount(pm.clone(), MountOptions::default()).unwrap();
        let direct = Arc::new(Direct::new(1 << 16).unwrap());
        fs.set_external_readers(direct.clone());
        let slot = direct.add_slot().unwrap();
        let fd = fs
            .open("/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o644)
            .unwrap();
        fs.pwrite(fd, &[1; 4096], 0).unwrap();
        let ino = fs.fstat(fd).unwrap().ino;
        let t = direct.table(&fs, ino).unwrap();
        // A client registers, then reads the entry, as a direct read does.
        slot.at(0).store(
            direct.epoch().at(0).load(Ordering::SeqCst),
            Ordering::SeqCst,
        );
        let block = entry(&t, 0);
        assert_eq!(t.size(), 4096);
        for i in 0..1000u32 {
            let data = [(i % 200) as u8 + 2; 4096];
            direct.write(&fs, ino, At::Offset(0), 4096, || {
                fs.pwrite(fd, &data, 0).unwrap()
            });
            assert_ne!(entry(&t, 0), ASK, "published again after the write");
        }
        let held = fs.usage().reclaiming_blocks;
        assert!(
            held >= 990,
            "only {held} blocks held back for the registered client"
        );
        let mut data = [0u8; 4096];
        pm.read(block * BLOCK_SIZE, &mut data);
        assert!(
            data == [1; 4096],
            "the block the client may read was reused"
        );
        direct.remove_slot(&slot);
        let after = fs.usage().reclaiming_blocks;
        assert!(after < 64, "{after} blocks still held once the client went");
        fs.close(fd).unwrap();
        fs.unmount().unwrap();
    }

    #[test]
    fn a_large_file_is_published_from_its_start_and_then_as_it_is_read() {
        let pm: Arc<dyn Pmem> = Arc::new(MemPmem::new(16 << 20));
        FileSystem::format(&*pm, &FormatOptions::default()).unwrap();
        let (fs, _) = FileSystem::mount(pm, MountOptions::default()).unwrap();
        let direct = Direct::new(1 << 16).unwrap();
        let fd = fs
            .open("/sparse", OpenFlags::CREAT | OpenFlags::RDWR, 0o644)
            .unwrap();
        fs.ftruncate(fd, 1 << 30).unwrap();
        let ino = fs.fstat(fd).unwrap().ino;
        let t = direct.table(&fs, ino).unwrap();
        assert_eq!(t.size(), 1 << 30);
        assert_eq!(entry(&t, FIRST_PAGES as usize - 1), HOLE);
        let far = (1u64 << 29) / BLOCK_SIZE;
        assert_eq!(entry(&t, far as usize), ASK, "not published yet: ask");
        direct.publish_read(&fs, ino, far * BLOCK_SIZE, 4096);
        assert_eq!(entry(&t, far as usize), HOLE, "published once read");
        assert_eq!(entry(&t, far as usize + 1), ASK);
        fs.close(fd).unwrap();
        fs.unmount().unwrap();
    }

    #[test]
    fn the_table_follows_writes_holes_and_truncations() {
        let pm: Arc<dyn Pmem> = Arc::new(MemPmem::new(16 << 20));
        FileSystem::format(&*pm, &FormatOptions::default()).unwrap();
        let (fs, _) = FileSystem::mount(pm.clone(), MountOptions::default()).unwrap();
        let direct = Direct::new(1 << 16).unwrap();
        let fd = fs
            .open("/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o644)
            .unwrap();
        let ino = fs.fstat(fd).unwrap().ino;
        let t = direct.table(&fs, ino).unwrap();
        assert_eq!((t.size(), entry(&t, 0)), (0, ASK));
        direct.write(&fs, ino, At::Offset(3 * 4096), 100, || {
            fs.pwrite(fd, &[9; 100], 3 * 4096).unwrap()
        });
        assert_eq!(t.size(), 3 * 4096 + 100);
        let b = entry(&t, 3);
        assert!(b != ASK && b != HOLE);
        let mut data = [0u8; 100];
        pm.read(b * BLOCK_SIZE, &mut data);
        assert_eq!(data, [9; 100]);
        // Pages 0..3 are a hole the write did not publish: readers ask.
        assert_eq!(entry(&t, 0), ASK);
        // While a write runs, readers keep the old block, which is not retired until
        // the new one is published.
        direct.write(&fs, ino, At::Offset(4096), 4096, || {
            fs.pwrite(fd, &[0; 4096], 4096).unwrap()
        });
        let old = entry(&t, 1);
        assert!(![ASK, HOLE].contains(&old));
        let free = fs.usage().free_blocks;
        direct.write(&fs, ino, At::Offset(4096), 4096, || {
            fs.pwrite(fd, &[7; 4096], 4096).unwrap();
            assert_eq!(entry(&t, 1), old, "the old block stays published");
            assert_eq!(fs.usage().free_blocks, free - 1, "and is not retired yet");
            let mut data = [1u8; 4096];
            pm.read(old * BLOCK_SIZE, &mut data);
            assert!(data == [0; 4096], "the old block holds the old data");
        });
        assert!(![ASK, HOLE, old].contains(&entry(&t, 1)));
        assert_eq!(
            fs.usage().free_blocks,
            free,
            "retired once the new block is published"
        );
        direct.write(&fs, ino, At::Offset(3 * 4096), 8192, || {
            fs.pwrite(fd, &[1; 8192], 3 * 4096).unwrap();
            assert_eq!(
                t.size(),
                3 * 4096 + 100,
                "the size moves once the pages are there"
            );
        });
        assert_eq!(t.size(), 5 * 4096);
        assert!((3..5).all(|pg| ![ASK, HOLE].contains(&entry(&t, pg))));
        direct.truncate(&fs, ino, 4096, || {
            fs.ftruncate(fd, 4096).unwrap();
            assert_eq!(t.size(), UNKNOWN);
            assert!(
                (1..5).all(|pg| entry(&t, pg) == ASK),
                "pages past the new end"
            );
        });
        assert_eq!((t.size(), entry(&t, 3)), (4096, ASK));
        // A second user shares the table; the last release drops it.
        let again = direct.table(&fs, ino).unwrap();
        assert!(Arc::ptr_eq(&t, &again));
        direct.release(ino);
        assert!(direct.published(ino).is_some());
        direct.release(ino);
        assert!(direct.published(ino).is_none());
        fs.close(fd).unwrap();
        fs.unmount().unwrap();
    }
}
