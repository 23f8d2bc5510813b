//! Someone outside the file system that keeps its own map of file pages — the
//! server's page tables, from which client processes read file data directly
//! (`easyio serve`) — and must see every change of a file's data made by a door
//! that does not go through it (the FUSE mount of the same process). Such a door
//! runs each change through [`FileSystem::watched_write`] or
//! [`FileSystem::watched_reshape`]; without a watcher they just run it.
//!
//! Someone that caches what it learnt of inodes — attributes, directory entries —
//! outside the file system (the server's clients, which resolve paths themselves)
//! and must know when that may have changed: [`InodeChanges`] hears of every inode
//! that may have changed, whatever door changed it.

use std::sync::Arc;

use parking_lot::RwLockWriteGuard;

use crate::inode::{Inode, InodeState};
use crate::FileSystem;

/// Listeners of inode changes a file system keeps at most (a server's clients, a FUSE
/// mount of the same process, and room to spare).
pub const MAX_INODE_LISTENERS: usize = 4;

/// Hears of inodes that may change (see the module).
///
/// [`InodeChanges::changing`] is called for inode `ino` once the file system holds
/// the lock under which everything about `ino` changes (its attributes, its size and
/// pages, a directory's entries), before the change; and once a new inode is in
/// place under a number a freed one may have had. So a reader that notes a count
/// the callback moves, then takes what it wants from the file system (which reads
/// it under the same lock), then finds the count unmoved, took it as it still is
/// while the count stays unmoved.
pub trait InodeChanges: Send + Sync {
    /// Inode `ino` may be about to change, or was just made.
    fn changing(&self, ino: u64);

    /// The entry `name` of directory `dir` is about to be added or removed (a create,
    /// link, unlink or rename), called under the same lock as [`InodeChanges::changing`]
    /// of `dir`. For a listener that caches names as well as inodes (the kernel's
    /// dentries behind a FUSE mount, negative ones included).
    fn entry_changing(&self, dir: u64, name: &str) {
        let _ = (dir, name);
    }

    /// Returns once what the listener does about the changes it heard of so far is
    /// done (a FUSE mount: the kernel told to forget what it cached of them). See
    /// [`FileSystem::settle_changes`].
    fn settle(&self) {}
}

/// Watches changes of file data (see the module).
pub trait DataChanges: Send + Sync {
    /// Runs `change`, which writes `len` bytes of file `ino` at `at` (`None`: at its
    /// end, an appending write).
    fn write(&self, fs: &FileSystem, ino: u64, at: Option<u64>, len: u64, change: &mut dyn FnMut());
    /// Runs `change`, which sets file `ino`'s size to `len` — or, with `len` 0 for a
    /// change anywhere in the file (`fallocate`), reshapes it.
    fn reshape(&self, fs: &FileSystem, ino: u64, len: u64, change: &mut dyn FnMut());
}

impl FileSystem {
    /// Makes `watcher` see the changes doors run through it (set once; later calls
    /// are ignored).
    pub fn set_data_changes(&self, watcher: Arc<dyn DataChanges>) {
        let _ = self.watcher.set(watcher);
    }

    /// Makes `changes` hear of every inode that may change, beside the listeners set
    /// before (a server's clients and a FUSE mount of the same process each keep one);
    /// past [`MAX_INODE_LISTENERS`] it is ignored, saying so on standard error.
    pub fn set_inode_changes(&self, changes: Arc<dyn InodeChanges>) {
        let mut changes = Some(changes);
        for slot in &self.changes {
            let Some(c) = changes.take() else { return };
            if let Err(c) = slot.set(c) {
                changes = Some(c);
            }
        }
        if changes.is_some() {
            eprintln!("easyio: more than {MAX_INODE_LISTENERS} inode listeners: one is ignored");
        }
    }

    /// The listeners set so far.
    fn listeners(&self) -> impl Iterator<Item = &Arc<dyn InodeChanges>> {
        self.changes.iter().map_while(std::sync::OnceLock::get)
    }

    /// Locks `inode` for a change, telling [`InodeChanges`] once it is locked.
    pub(crate) fn write_state<'a>(&self, inode: &'a Inode) -> RwLockWriteGuard<'a, InodeState> {
        let st = inode.state.write();
        self.made(inode.ino);
        st
    }

    /// Tells [`InodeChanges`] that inode `ino` changed or was just made.
    pub(crate) fn made(&self, ino: u64) {
        for c in self.listeners() {
            c.changing(ino);
        }
    }

    /// Returns once every [`InodeChanges`] listener has done what it does about the
    /// changes made so far: a door calls it before it tells its caller a change is
    /// made, so that the caller's next call through any other door sees it.
    pub fn settle_changes(&self) {
        for c in self.listeners() {
            c.settle();
        }
    }

    /// Tells [`InodeChanges`] of the entries `staged` adds to or removes from its
    /// directory, before they are committed.
    pub(crate) fn entries_changing(&self, staged: &crate::commit::Staged) {
        if self.changes[0].get().is_none() {
            return;
        }
        for e in &staged.entries {
            if let crate::log::Entry::DentryAdd { name, .. }
            | crate::log::Entry::DentryDel { name, .. } = e
            {
                for c in self.listeners() {
                    c.entry_changing(staged.ino, name);
                }
            }
        }
    }

    /// Runs `f`, a write of `len` bytes of file `ino` at `at` (`None`: at its end),
    /// through the watcher if there is one.
    pub fn watched_write<R>(
        &self,
        ino: u64,
        at: Option<u64>,
        len: u64,
        f: impl FnOnce() -> R,
    ) -> R {
        match self.watcher.get() {
            None => f(),
            Some(w) => once(f, |c| w.write(self, ino, at, len, c)),
        }
    }

    /// Runs `f`, which sets file `ino`'s size to `len` (0 also for a change anywhere
    /// in it), through the watcher if there is one.
    pub fn watched_reshape<R>(&self, ino: u64, len: u64, f: impl FnOnce() -> R) -> R {
        match self.watcher.get() {
            None => f(),
            Some(w) => once(f, |c| w.reshape(self, ino, len, c)),
        }
    }
}

/// Runs `f` once inside `around` and returns its result.
fn once<R>(f: impl FnOnce() -> R, around: impl FnOnce(&mut dyn FnMut())) -> R {
    let mut f = Some(f);
    let mut r = None;
    around(&mut || {
        if let Some(f) = f.take() {
            r = Some(f());
        }
    });
    r.expect("a watcher runs the change it is given")
}
