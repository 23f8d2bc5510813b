//! Inodes in use, counted as they are made and freed, so that `statfs` does not read
//! the inode table after a mount that did not read every inode (a clean one): the
//! table's valid words are counted once, at the first call that asks, and from then on
//! the count moves with each inode made or freed.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::SeqCst};
use std::sync::OnceLock;

/// The count: what the table held when it was counted, and what changed since mount.
#[derive(Default)]
pub(crate) struct InodeCount {
    /// Inodes made less inodes freed since mount.
    net: AtomicI64,
    /// Makes and frees under way: from before the store that changes an inode's valid
    /// word to after `net` follows it.
    in_flight: AtomicU64,
    /// Makes and frees finished (or given up).
    done: AtomicU64,
    /// Inodes in use at mount: the valid words counted with nothing under way, less
    /// `net` at that moment.
    base: OnceLock<i64>,
}

/// A make or free under way; [`Change::made`] or [`Change::freed`] once its valid
/// word is stored, or dropped as is if it changed nothing.
pub(crate) struct Change<'a>(&'a InodeCount);

impl InodeCount {
    /// Starts a change of an inode's valid word.
    pub(crate) fn start(&self) -> Change<'_> {
        self.in_flight.fetch_add(1, SeqCst);
        Change(self)
    }

    /// Inodes in use: `scan()` counts the table's valid words, called only until one
    /// count ran with no make or free under way.
    pub(crate) fn used(&self, scan: impl FnOnce() -> u64) -> u64 {
        if let Some(base) = self.base.get() {
            return (base + self.net.load(SeqCst)).max(0) as u64;
        }
        let done = self.done.load(SeqCst);
        let quiet = self.in_flight.load(SeqCst) == 0;
        let net = self.net.load(SeqCst);
        let counted = scan();
        // A change that began before the end of the scan is either still under way
        // or done, and then `done` moved: the scan may or may not have seen it.
        if quiet && self.in_flight.load(SeqCst) == 0 && self.done.load(SeqCst) == done {
            let _ = self.base.set(counted as i64 - net);
        }
        counted
    }
}

impl Change<'_> {
    /// The inode's valid word was set.
    pub(crate) fn made(self) {
        self.0.net.fetch_add(1, SeqCst);
    }

    /// The inode's valid word was cleared.
    pub(crate) fn freed(self) {
        self.0.net.fetch_sub(1, SeqCst);
    }
}

impl Drop for Change<'_> {
    fn drop(&mut self) {
        self.0.done.fetch_add(1, SeqCst);
        self.0.in_flight.fetch_sub(1, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_once_then_follows_makes_and_frees() {
        let c = InodeCount::default();
        c.start().made();
        let mut scans = 0;
        // Seven in the table, one of them made since mount.
        assert_eq!(
            c.used(|| {
                scans += 1;
                7
            }),
            7
        );
        c.start().made();
        c.start().made();
        c.start().freed();
        drop(c.start());
        assert_eq!(c.used(|| unreachable!()), 8);
        assert_eq!(scans, 1);
    }

    #[test]
    fn a_count_with_a_change_under_way_is_not_kept() {
        let c = InodeCount::default();
        let change = c.start();
        assert_eq!(c.used(|| 3), 3);
        change.made();
        // The next call counts again.
        assert_eq!(c.used(|| 4), 4);
        c.start().freed();
        assert_eq!(c.used(|| unreachable!()), 3);
    }

    #[test]
    fn a_change_during_the_count_is_not_kept() {
        let c = InodeCount::default();
        assert_eq!(
            c.used(|| {
                c.start().made();
                5
            }),
            5
        );
        assert_eq!(c.used(|| 5), 5);
        assert_eq!(c.used(|| unreachable!()), 5);
    }
}
