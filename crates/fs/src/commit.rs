//! Appending entries to inode logs, committing them, and cleaning logs.
//!
//! An operation *stages* its entries for each inode it touches — placing them after the
//! tail, allocating and linking pages as needed, writing and flushing them — and then
//! *commits*: one atomic tail store for a single inode, or a journaled set of stores for
//! several. Staging changes nothing a recovery would look at, so an operation that fails
//! while staging (ENOSPC) has no effect — except a sealed write entry
//! ([`FileSystem::stage_sealed_unfenced`]), which commits itself once staging's fence
//! returns and is staged only when nothing can fail after it.

use std::sync::Arc;

use mover::Pending;
use smallvec::SmallVec;

use crate::alloc::Extent;
use crate::error::Result;
use crate::inode::{push_block, Inode, InodeState, HEAD_OFF, TAIL_OFF};
use crate::layout::{put64, seal_log_word, LogWord, BLOCK_SIZE};
use crate::log::{attr, trailer, Entry, LogState, SLOT, SLOTS_PER_PAGE, TRAILER_OFF};
use crate::FileSystem;

thread_local! {
    /// Blocks retired on this thread inside [`FileSystem::holding_retired`].
    static HELD: std::cell::RefCell<Option<Vec<(Pending, Extent)>>> = const { std::cell::RefCell::new(None) };
}

/// Blocks whose retirement [`FileSystem::holding_retired`] held back.
#[must_use = "held blocks stay allocated until handed to retire_held"]
#[derive(Debug, Default)]
pub struct Held(Vec<(Pending, Extent)>);

/// Offset inside the trailer of the count of entry slots used in a page the log has
/// moved past (the rest of such a page is padding).
pub const TRAILER_USED_OFF: u64 = TRAILER_OFF + 24;

/// The entry slots of a log page, zeroed.
static ZERO_SLOTS: [u8; TRAILER_OFF as usize] = [0; TRAILER_OFF as usize];

/// Longest an allocation waits for retired blocks that readers in flight hold back.
pub const RECLAIM_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// A log is cleaned once it spans at least this many pages…
pub const CLEAN_MIN_PAGES: usize = 4;
/// …and holds more than this many times the entries a compacted log would.
pub const CLEAN_FACTOR: u64 = 4;

/// Entries placed in an inode's log but not yet committed.
pub struct Staged {
    pub ino: u64,
    pub new_tail: u64,
    pub entries: Vec<Entry>,
    /// Data blocks written for these entries (given back if the commit never happens).
    pub new_data: Vec<Extent>,
    /// Whether the entry is a sealed write, committed by itself once staging's fence
    /// returns ([`crate::log::Entry::encode_sealed`]): [`FileSystem::commit_one`] then
    /// stores no tail.
    pub sealed: bool,
}

impl FileSystem {
    /// Places `entries` after the tail of `st`'s log and makes them durable (not yet
    /// committed). New pages are linked into the log's chain; a failure leaves the log
    /// as it was, apart from pages linked past the tail, which stay part of the log.
    /// Staging ends with a fence on the calling thread, which also makes durable the
    /// data this thread copied unfenced for these entries.
    pub(crate) fn stage(
        &self,
        ino: u64,
        st: &mut InodeState,
        entries: Vec<Entry>,
    ) -> Result<Staged> {
        let staged = self.stage_unfenced(ino, st, entries)?;
        self.close_stage();
        Ok(staged)
    }

    /// The fence that ends staging: entries written by [`Self::stage_unfenced`], and data
    /// this thread copied unfenced, are durable once it returns.
    pub(crate) fn close_stage(&self) {
        if !crate::fault::active(crate::fault::Fault::StageWithoutFence) {
            self.pm.fence();
        }
    }

    /// [`Self::stage`] without its closing fence: the entries' stores are issued, not
    /// yet durable; the caller calls [`Self::close_stage`] before committing. Lets a
    /// write issue its entries before its data so that one fence waits for both.
    pub(crate) fn stage_unfenced(
        &self,
        ino: u64,
        st: &mut InodeState,
        entries: Vec<Entry>,
    ) -> Result<Staged> {
        self.stage_unfenced_with(ino, st, entries, None)
    }

    /// [`Self::stage_unfenced`] of one write entry sealed with `seal`, the seal of its
    /// data ([`crate::log::Entry::encode_sealed`]): once [`Self::close_stage`] returns
    /// the write is committed, with no tail store.
    pub(crate) fn stage_sealed_unfenced(
        &self,
        ino: u64,
        st: &mut InodeState,
        entry: Entry,
        seal: u64,
    ) -> Result<Staged> {
        self.stage_unfenced_with(ino, st, vec![entry], Some(seal))
    }

    fn stage_unfenced_with(
        &self,
        ino: u64,
        st: &mut InodeState,
        entries: Vec<Entry>,
        seal: Option<u64>,
    ) -> Result<Staged> {
        self.check_writable()?;
        let log = &mut st.log;
        let plan = plan_places(log, &entries);
        let new_pages = self.fresh_log_pages(ino, plan.pages_needed)?;
        self.link_log_pages(ino, log, &new_pages, &plan.moved_on);
        if seal.is_some() && !plan.moved_on.is_empty() && log.tail != 0 {
            self.store_moved_on_tail(ino, log.tail);
        }
        log.pages.extend_from_slice(&new_pages);
        let mut new_tail = log.tail;
        for (e, &(idx, slot)) in entries.iter().zip(&plan.places) {
            let at = log.pages[idx] + slot * SLOT;
            let bytes = match seal {
                Some(seal) => e.encode_sealed(seal),
                None => e.encode(),
            };
            // Whole slots, slot-aligned: non-temporal stores skip reading the line in.
            self.pm.copy_nt(at, &bytes);
            new_tail = at + bytes.len() as u64;
        }
        Ok(Staged {
            ino,
            new_tail,
            entries,
            new_data: Vec::new(),
            sealed: seal.is_some(),
        })
    }

    /// Stores `tail` — the end of the committed entries, which a sealed write
    /// about to go to the next log page leaves behind — as the inode's tail word,
    /// written back but not fenced (staging's fence covers it). Every sealed entry of
    /// the page left behind then lies below a stored tail, where recovery checks it
    /// as part of the log: a damaged one is reported, not read as the end of the log
    /// (which would drop the writes after it unseen). One store per log page.
    fn store_moved_on_tail(&self, ino: u64, tail: u64) {
        let off = self.geo.inode_off(ino) + TAIL_OFF;
        self.pm
            .store_u64(off, seal_log_word(ino, LogWord::Tail, tail));
        self.pm.flush(off, 8);
    }

    /// `n` fresh log pages owned by `ino`, their trailers durable before anything
    /// links to them.
    fn fresh_log_pages(&self, ino: u64, n: usize) -> Result<Vec<u64>> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let pm = &*self.pm;
        let mut pages = Vec::new();
        for ext in self.alloc_blocks(n as u64)? {
            pages.extend((ext.start..ext.start + ext.len).map(|b| b * BLOCK_SIZE));
        }
        for &p in &pages {
            // Zeroed slots: no entry of the page's earlier life can look committed
            // past the tail (sealed writes commit themselves).
            pm.copy_nt(p, &ZERO_SLOTS);
            pm.write(p + TRAILER_OFF, &trailer(0, ino));
            pm.write(p + TRAILER_USED_OFF, &0u64.to_le_bytes());
            pm.flush(p + TRAILER_OFF, SLOT);
        }
        pm.fence();
        Ok(pages)
    }

    /// Links `new_pages` into the log's chain (or makes the first the head), records
    /// how full the pages left behind are, and writes back every trailer line touched.
    fn link_log_pages(
        &self,
        ino: u64,
        log: &mut LogState,
        new_pages: &[u64],
        moved_on: &[(usize, u64)],
    ) {
        let pm = &*self.pm;
        let had_pages = log.pages.len();
        let mut touched: SmallVec<[u64; 4]> = SmallVec::new();
        for (i, &p) in new_pages.iter().enumerate() {
            match (had_pages + i).checked_sub(1) {
                Some(prev) => {
                    let prev = log_page(log, new_pages, prev);
                    pm.store_u64(prev + TRAILER_OFF, p);
                    touched.push(prev);
                }
                None => {
                    let head = self.geo.inode_off(ino) + HEAD_OFF;
                    pm.store_u64(head, seal_log_word(ino, LogWord::Head, p));
                    pm.flush(head, 8);
                    log.head = p;
                }
            }
        }
        for &(idx, used) in moved_on {
            let page = log_page(log, new_pages, idx);
            pm.store_u64(page + TRAILER_USED_OFF, used);
            touched.push(page);
        }
        touched.sort_unstable();
        touched.dedup();
        for page in touched {
            pm.flush(page + TRAILER_OFF, SLOT);
        }
    }

    /// Commits staged entries of one inode with a single atomic tail store (none for a
    /// sealed write, committed by its staging), then applies them to the DRAM state.
    /// Returns displaced data blocks.
    pub(crate) fn commit_one(&self, st: &mut InodeState, staged: Staged) -> Vec<Extent> {
        self.entries_changing(&staged);
        if staged.sealed {
            return Self::apply_staged(st, staged);
        }
        let off = self.geo.inode_off(staged.ino) + TAIL_OFF;
        let word = seal_log_word(staged.ino, LogWord::Tail, staged.new_tail);
        if crate::fault::active(crate::fault::Fault::CommitWithoutFlush) {
            self.pm.store_u64(off, word);
            self.pm.fence();
        } else {
            self.pm.store_u64_persist(off, word);
        }
        Self::apply_staged(st, staged)
    }

    /// Stores the tail word of every inode whose sealed writes moved its log past the
    /// stored tail, then fences (clean unmount): every committed entry then lies below
    /// a stored tail, where recovery checks it as part of the log rather than reading
    /// a damaged one as the log's end.
    pub(crate) fn store_tails(&self) {
        let mut stored = false;
        for inode in self.inodes.read().values() {
            let st = inode.state.read();
            if st.log.tail == 0 {
                continue;
            }
            let off = self.geo.inode_off(inode.ino) + TAIL_OFF;
            let word = seal_log_word(inode.ino, LogWord::Tail, st.log.tail);
            if self.pm.load_u64(off) != word {
                self.pm.store_u64(off, word);
                self.pm.flush(off, 8);
                stored = true;
            }
        }
        if stored {
            self.pm.fence();
        }
    }

    /// Applies committed entries to DRAM state.
    pub(crate) fn apply_staged(st: &mut InodeState, staged: Staged) -> Vec<Extent> {
        st.log.tail = staged.new_tail;
        let mut displaced = Vec::new();
        for e in &staged.entries {
            st.apply(e, &mut displaced);
        }
        displaced
    }

    /// Commits several staged inodes — and any extra words, such as valid words of
    /// created or freed inodes — atomically through a journal.
    pub(crate) fn commit_journaled(&self, staged: &[&Staged], extra: &[(u64, u64)]) {
        assert!(
            !staged.iter().any(|s| s.sealed),
            "a sealed write commits itself"
        );
        for s in staged {
            self.entries_changing(s);
        }
        let mut words: Vec<(u64, u64)> = staged
            .iter()
            .map(|s| {
                let word = seal_log_word(s.ino, LogWord::Tail, s.new_tail);
                (self.geo.inode_off(s.ino) + TAIL_OFF, word)
            })
            .collect();
        words.extend_from_slice(extra);
        let j = crate::alloc::cpu_slot() as u64 % self.geo.journals;
        let _guard = self.journals[j as usize].lock();
        crate::journal::commit(&*self.pm, &self.geo, j, &words);
    }

    /// Retires displaced data blocks: freed once no reader can still copy from them.
    /// Inside [`FileSystem::holding_retired`] on this thread, they are held instead.
    pub(crate) fn retire(&self, displaced: Vec<Extent>) {
        self.retire_after(Pending::Done, displaced);
    }

    /// [`FileSystem::retire`] of the blocks a write displaced whose copy is `pending`,
    /// once that copy is done. The write was committed before its copy (the orderless
    /// write): a crash before the copy ends drops it at recovery, and the file maps the
    /// displaced blocks again, so they must not be reused before. Until then they wait
    /// with the blocks of freed inodes (`deferred`), which every such write reaps.
    pub(crate) fn retire_after(&self, pending: Pending, displaced: Vec<Extent>) {
        let displaced = HELD.with(|held| match held.borrow_mut().as_mut() {
            Some(held) => {
                held.extend(displaced.into_iter().map(|x| (pending, x)));
                Vec::new()
            }
            None => displaced,
        });
        if displaced.is_empty() {
            return;
        }
        if !self.mover.is_done(pending) {
            self.deferred.lock().push((pending, displaced));
            // What waits is only what still copies: the sets whose copy ended since go
            // now, before they can add up to a share of the pool.
            self.reap_deferred();
            return;
        }
        for ext in displaced {
            self.epoch.retire(ext, |e| self.blocks.free(e));
        }
    }

    /// Runs `f` (calls on this file system), holding back the retirement of the blocks
    /// its writes displace: for a server whose clients copy from blocks it published
    /// (see [`crate::ExternalReaders`]), which must stop naming a block before the
    /// block can be retired. Hand what it returns to [`FileSystem::retire_held`] once
    /// nothing names those blocks; blocks never handed back stay allocated until the
    /// next mount's recovery.
    pub fn holding_retired<R>(&self, f: impl FnOnce() -> R) -> (R, Held) {
        /// Stops holding when `f` panics, so that later calls on this thread retire as
        /// usual (what was held then stays allocated until the next recovery).
        struct Stop;
        impl Drop for Stop {
            fn drop(&mut self) {
                HELD.with(|h| h.borrow_mut().take());
            }
        }
        let outer = HELD.with(|h| h.borrow_mut().replace(Vec::new()));
        assert!(outer.is_none(), "holding_retired does not nest");
        let stop = Stop;
        let r = f();
        let held = HELD.with(|h| h.borrow_mut().take()).unwrap_or_default();
        drop(stop);
        (r, Held(held))
    }

    /// Retires blocks [`FileSystem::holding_retired`] held back.
    pub fn retire_held(&self, held: Held) {
        for (pending, ext) in held.0 {
            self.retire_after(pending, vec![ext]);
        }
    }

    /// Retires the blocks of freed inodes whose last copy has finished since.
    pub(crate) fn reap_deferred(&self) {
        let ready: Vec<Extent> = {
            let mut d = self.deferred.lock();
            if d.is_empty() {
                return;
            }
            let (ready, keep): (Vec<_>, Vec<_>) =
                d.drain(..).partition(|(p, _)| self.mover.is_done(*p));
            *d = keep;
            ready.into_iter().flat_map(|(_, x)| x).collect()
        };
        self.retire(ready);
    }

    /// Blocks of freed inodes still waiting for their last copy.
    pub(crate) fn deferred_blocks(&self) -> u64 {
        let d = self.deferred.lock();
        d.iter().flat_map(|(_, x)| x).map(|x| x.len).sum()
    }

    /// Hands back every retired block no reader can still use: the epoch advances
    /// as far as the readers in flight allow (with none, everything retired so far is
    /// freed).
    pub(crate) fn reclaim(&self) {
        self.reap_deferred();
        self.epoch.collect(|e| self.blocks.free(e));
    }

    /// Hands back retired blocks until `n` blocks are free, waiting for them while
    /// they could make up the difference: each collection moves the epoch at most a
    /// step or two past the readers in flight, and a block waits two steps, so
    /// with readers reading all the time (a client of a server, a busy thread) one
    /// collection often frees nothing yet. Waits at most [`RECLAIM_WAIT`]: a reader
    /// that stays registered (a client stopped in a debugger) holds the blocks back.
    pub(crate) fn reclaim_until_free(&self, n: u64) {
        let t0 = std::time::Instant::now();
        for tries in 0u32.. {
            self.reclaim();
            let free = self.blocks.free_blocks();
            let coming = self.epoch.waiting_blocks() + self.deferred_blocks();
            if free >= n || free + coming < n || t0.elapsed() >= RECLAIM_WAIT {
                return;
            }
            match tries < 16 {
                true => std::thread::yield_now(),
                false => std::thread::sleep(std::time::Duration::from_micros(50)),
            }
        }
    }

    /// Allocates blocks, collecting retired blocks first if the pool looks full.
    pub(crate) fn alloc_blocks(&self, n: u64) -> Result<Vec<Extent>> {
        self.check_writable()?;
        match self.blocks.alloc(n) {
            Ok(x) => Ok(x),
            Err(_) => {
                self.reclaim_until_free(n);
                self.blocks.alloc(n)
            }
        }
    }

    /// Compacts `st`'s log if most of it is dead. Called with the inode write-locked,
    /// after a commit. Failure to find space only postpones cleaning.
    pub(crate) fn maybe_clean(&self, inode: &Arc<Inode>, st: &mut InodeState) {
        // A compacted log carries no SN: cleaning while the last write's copy runs would
        // make a crash keep that write without its data. The next settled call cleans.
        if !self.mover.is_done(st.last_write)
            || st.log.pages.len() < CLEAN_MIN_PAGES
            || st.log.entries <= CLEAN_FACTOR * st.live_entries()
        {
            return;
        }
        let _ = self.clean_log(inode.ino, st);
    }

    /// Rewrites the log as the entries that rebuild the current state, in fresh pages,
    /// and switches head and tail atomically through a journal.
    pub(crate) fn clean_log(&self, ino: u64, st: &mut InodeState) -> Result<()> {
        let entries = compact_entries(st);
        let count = entries.len() as u64;
        let (new_log, new_tail) = self.stage_detached(ino, &entries)?;
        let old_pages = std::mem::take(&mut st.log.pages);
        let base = self.geo.inode_off(ino);
        let j = crate::alloc::cpu_slot() as u64 % self.geo.journals;
        {
            let _guard = self.journals[j as usize].lock();
            crate::journal::commit(
                &*self.pm,
                &self.geo,
                j,
                &[
                    (
                        base + HEAD_OFF,
                        seal_log_word(ino, LogWord::Head, new_log.head),
                    ),
                    (base + TAIL_OFF, seal_log_word(ino, LogWord::Tail, new_tail)),
                ],
            );
        }
        st.log = LogState {
            head: new_log.head,
            tail: new_tail,
            pages: new_log.pages,
            entries: count,
        };
        let mut freed = Vec::new();
        for p in old_pages {
            push_block(&mut freed, p / BLOCK_SIZE);
        }
        for ext in freed {
            self.blocks.free(ext);
        }
        Ok(())
    }

    /// Writes `entries` into a fresh chain of pages owned by `ino`, durably, without
    /// publishing it anywhere. Returns the chain and the tail after the last entry.
    /// Each page is encoded in one page buffer and written whole: a log of many
    /// thousand entries is cleaned without holding its encoded entries in memory.
    fn stage_detached(&self, ino: u64, entries: &[Entry]) -> Result<(LogState, u64)> {
        let pm = &*self.pm;
        // Entries in order, none split across pages: where each page starts.
        let mut starts = vec![0usize];
        let mut used = 0;
        for (i, e) in entries.iter().enumerate() {
            if used + e.slots() > SLOTS_PER_PAGE {
                starts.push(i);
                used = 0;
            }
            used += e.slots();
        }
        let mut pages = Vec::with_capacity(starts.len());
        for ext in self.alloc_blocks(starts.len() as u64)? {
            pages.extend((ext.start..ext.start + ext.len).map(|b| b * BLOCK_SIZE));
        }
        let mut tail = 0;
        let mut buf = vec![0u8; BLOCK_SIZE as usize];
        for (i, &p) in pages.iter().enumerate() {
            let end = starts.get(i + 1).copied().unwrap_or(entries.len());
            // The rest of the page zeroed, as in every fresh log page.
            buf.fill(0);
            let mut at = 0;
            for e in &entries[starts[i]..end] {
                let bytes = e.encode();
                buf[at..at + bytes.len()].copy_from_slice(&bytes);
                at += bytes.len();
            }
            let next = pages.get(i + 1).copied().unwrap_or(0);
            let t = TRAILER_OFF as usize;
            buf[t..t + 24].copy_from_slice(&trailer(next, ino));
            put64(&mut buf, t + 24, at as u64 / SLOT);
            pm.write(p, &buf);
            pm.flush(p, BLOCK_SIZE);
            tail = p + at as u64;
        }
        pm.fence();
        let log = LogState {
            head: pages[0],
            tail,
            pages,
            entries: entries.len() as u64,
        };
        Ok((log, tail))
    }
}

/// Where staged entries go in a log.
struct Places {
    /// (index into the log's pages, slot within that page) of each entry.
    places: SmallVec<[(usize, u64); 4]>,
    /// (page index, slots used) of the pages the log moves past.
    moved_on: SmallVec<[(usize, u64); 2]>,
    /// Pages to add.
    pages_needed: usize,
}

/// Where each of `entries` lands after the tail of `log`, and how many pages must be
/// added.
fn plan_places(log: &LogState, entries: &[Entry]) -> Places {
    let (mut page_idx, mut slot) = if log.tail == 0 {
        (0, 0)
    } else {
        let page = log.tail - log.tail % BLOCK_SIZE;
        // From the end: the tail lies in the last page or close before it (pages are
        // linked past it only by a staging that failed), and a large file's log has
        // hundreds of pages.
        let idx = log
            .pages
            .iter()
            .rposition(|&p| p == page)
            .expect("tail outside log");
        (idx, (log.tail % BLOCK_SIZE) / SLOT)
    };
    let mut plan = Places {
        places: SmallVec::new(),
        moved_on: SmallVec::new(),
        pages_needed: 0,
    };
    for e in entries {
        let k = e.slots();
        let have_page = page_idx < log.pages.len() + plan.pages_needed;
        if !have_page || slot + k > SLOTS_PER_PAGE {
            if have_page {
                plan.moved_on.push((page_idx, slot));
                page_idx += 1;
            }
            slot = 0;
            if page_idx >= log.pages.len() + plan.pages_needed {
                plan.pages_needed += 1;
            }
        }
        plan.places.push((page_idx, slot));
        slot += k;
    }
    plan
}

fn log_page(log: &LogState, new_pages: &[u64], idx: usize) -> u64 {
    if idx < log.pages.len() {
        log.pages[idx]
    } else {
        new_pages[idx - log.pages.len()]
    }
}

/// The entries that rebuild `st` from its creation record: data extents, link count,
/// directory entries, extended attributes, then one attribute entry that sets every
/// field last.
pub fn compact_entries(st: &InodeState) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut run: Option<(u64, u64, u32)> = None; // (pgoff, block, npages)
    for (pg, blk) in st.pages.iter() {
        run = match run {
            Some((p, b, n)) if p + n as u64 == pg && b + n as u64 == blk && n < u32::MAX => {
                Some((p, b, n + 1))
            }
            Some((p, b, n)) => {
                out.push(write_entry(st, p, b, n));
                Some((pg, blk, 1))
            }
            None => Some((pg, blk, 1)),
        };
    }
    if let Some((p, b, n)) = run {
        out.push(write_entry(st, p, b, n));
    }
    out.push(Entry::Link {
        nlink: st.nlink,
        ctime: st.ctime,
    });
    let mut names: Vec<(&String, &u64)> = st.children.iter().collect();
    names.sort();
    for (name, &ino) in names {
        out.push(Entry::DentryAdd {
            ino,
            ctime: st.ctime,
            name: name.clone(),
        });
    }
    if let Some(x) = &st.xattr {
        out.push(x.entry(st.ctime));
    }
    out.push(Entry::Attr {
        mask: attr::ALL,
        mode: st.mode,
        uid: st.uid,
        gid: st.gid,
        size: st.size,
        atime: st.atime,
        mtime: st.mtime,
        ctime: st.ctime,
    });
    out
}

fn write_entry(st: &InodeState, pgoff: u64, block: u64, npages: u32) -> Entry {
    Entry::Write {
        pgoff,
        block,
        npages,
        size: st.size,
        mtime: st.mtime,
        sn: 0,
    }
}
