//! The kernel's caches kept honest: entries and attributes the kernel caches behind the
//! mount are invalidated whenever the image changes through another door of the same
//! process (the clients of `easyio serve --mount`, the library).
//!
//! The file system tells every change to [`Invalidator`] (an `fs::InodeChanges`), under
//! the lock the change holds. A change made by a FUSE handler is one the kernel asked
//! for and accounts for itself; any other is queued, and a thread of the mount sends
//! the kernel `FUSE_NOTIFY_INVAL_INODE` for each changed inode (attributes and pages),
//! `FUSE_NOTIFY_INVAL_ENTRY` for each added or removed name (negative entries too) and
//! for every name the kernel was given for a changed file (a lookup whose reply was
//! still on its way when the change was made installs its inode after the inode's
//! invalidation found nothing to drop; the entry's invalidation waits for that lookup,
//! as it takes the directory's lock, and drops it). A directory's entry is not
//! invalidated for that (it would detach what is mounted below it): the reply that
//! first gives the kernel a directory gives its attributes for no time instead. The notifications are sent from
//! that thread, never under the file system's locks: the kernel may have to wait for
//! a request in flight, whose handler may wait for that lock.
//!
//! [`Invalidator::settle`] waits until what was queued so far has been sent: the other
//! door calls it (through `FileSystem::settle_changes`) before it answers, so the next
//! call through the mount sees the change. A reply built while a change was being made
//! carries a zero timeout ([`Invalidator::changes`] moved while it was built), so the
//! kernel asks again at its next use.

use std::cell::Cell;
use std::collections::HashSet;
use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use fuser::{INodeNo, Notifier};
use parking_lot::{Condvar, Mutex};

use crate::lookups::LookupCounts;

thread_local! {
    /// Whether this thread serves FUSE requests (a reader of `/dev/fuse` or a worker of
    /// the handlers' uthread runtime). Those threads serve nothing else, so it is set
    /// once and stays.
    static HANDLER: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as one that serves FUSE requests: changes it makes are
/// the kernel's own and need no invalidation.
pub(crate) fn handling() {
    HANDLER.with(|h| h.set(true));
}

fn is_handler() -> bool {
    HANDLER.with(Cell::get)
}

/// What is queued for the kernel.
#[derive(Default)]
struct Queue {
    inodes: HashSet<u64>,
    entries: HashSet<(u64, String)>,
    /// Changes queued so far (a sequence number).
    queued: u64,
    /// Changes whose notifications have been sent.
    sent: u64,
    /// The mount has ended: nothing more is sent.
    closed: bool,
}

/// Counters of the invalidations sent, for the mount's log and the tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InvalStats {
    /// `FUSE_NOTIFY_INVAL_INODE` notifications sent.
    pub inodes: u64,
    /// `FUSE_NOTIFY_INVAL_ENTRY` notifications sent.
    pub entries: u64,
}

/// Hears of every change of the image (see the module).
pub struct Invalidator {
    queue: Mutex<Queue>,
    /// Woken when something is queued (the sender) or sent (settlers).
    wake: Condvar,
    /// Moved by every change made through another door, before the change.
    changes: AtomicU64,
    stats: Mutex<InvalStats>,
    /// The way to the kernel, once the mount is up.
    notifier: OnceLock<Notifier>,
    /// What the kernel holds: only what it may have cached is invalidated.
    lookups: LookupCounts,
}

impl Invalidator {
    /// An invalidator that queues what it hears until [`Invalidator::start`], of the
    /// inodes `lookups` says the kernel holds.
    pub(crate) fn new(lookups: LookupCounts) -> Arc<Invalidator> {
        Arc::new(Invalidator {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            changes: AtomicU64::new(0),
            stats: Mutex::new(InvalStats::default()),
            notifier: OnceLock::new(),
            lookups,
        })
    }

    /// Starts the thread that sends the queued invalidations to the kernel through
    /// `notifier`; it ends at [`Invalidator::close`].
    pub(crate) fn start(self: &Arc<Self>, notifier: Notifier) -> std::io::Result<JoinHandle<()>> {
        let _ = self.notifier.set(notifier);
        let me = self.clone();
        std::thread::Builder::new()
            .name("easyio-fuse-inval".into())
            .spawn(move || {
                if let Some(n) = me.notifier.get() {
                    me.send_loop(n);
                }
            })
    }

    /// Whether the kernel may hold inode `ino`, and so cache something of it (or, for
    /// a directory, of its entries): the root, or an inode it holds a lookup of.
    ///
    /// Checked after [`Invalidator::changes`] moved for the change: a reply that gave
    /// the kernel `ino` took its lookup before it read that counter, so either the
    /// lookup is seen here or the reply carried a zero timeout.
    fn held(&self, ino: u64) -> bool {
        ino == fs::ROOT_INO || self.lookups.count(ino) > 0
    }

    /// Drops the kernel's attributes of inode `ino` now, from a FUSE handler, before
    /// it replies: for a change the kernel asked for without learning all it did (the
    /// setuid and setgid bits a write or an `O_TRUNC` open of an unprivileged caller
    /// clears, which the kernel leaves to the server). Attributes only: dropping
    /// pages could wait for the very request being served.
    pub(crate) fn attrs_now(&self, ino: u64) {
        if let Some(n) = self.notifier.get() {
            if n.inval_inode(INodeNo(ino), -1, 0).is_ok() {
                self.stats.lock().inodes += 1;
            }
        }
    }

    /// Drops the kernel's attributes and pages of inode `ino` soon, from the mount's
    /// thread (a handler cannot: dropping pages may wait for the request it serves):
    /// for a write the kernel placed where the file system did not put it.
    pub(crate) fn pages_later(&self, ino: u64) {
        let mut q = self.queue.lock();
        if q.closed {
            return;
        }
        q.inodes.insert(ino);
        q.queued += 1;
        drop(q);
        self.wake.notify_all();
    }

    /// Changes made through other doors so far: a reply built while this moved may
    /// describe what a change replaced.
    pub(crate) fn changes(&self) -> u64 {
        self.changes.load(Ordering::SeqCst)
    }

    /// The invalidations sent so far.
    pub fn stats(&self) -> InvalStats {
        *self.stats.lock()
    }

    /// Sends nothing more and lets the sending thread end; settlers stop waiting.
    pub(crate) fn close(&self) {
        self.queue.lock().closed = true;
        self.wake.notify_all();
    }

    /// Queues `f`'s invalidation of a change of inode `ino` (for an entry, of its
    /// directory) made through another door.
    fn queue(&self, ino: u64, f: impl FnOnce(&mut Queue)) {
        if is_handler() {
            return;
        }
        self.changes.fetch_add(1, Ordering::SeqCst);
        if !self.held(ino) {
            return;
        }
        let mut q = self.queue.lock();
        if q.closed {
            return;
        }
        f(&mut q);
        q.queued += 1;
        drop(q);
        self.wake.notify_all();
    }

    /// Waits until every change queued so far has been sent to the kernel.
    pub fn settle(&self) {
        if is_handler() {
            return;
        }
        let mut q = self.queue.lock();
        let target = q.queued;
        while q.sent < target && !q.closed {
            self.wake.wait(&mut q);
        }
    }

    fn send_loop(&self, notifier: &Notifier) {
        loop {
            let mut q = self.queue.lock();
            while q.queued == q.sent && !q.closed {
                self.wake.wait(&mut q);
            }
            if q.closed {
                return;
            }
            let upto = q.queued;
            let inodes = std::mem::take(&mut q.inodes);
            let mut entries = std::mem::take(&mut q.entries);
            drop(q);
            for &ino in &inodes {
                entries.extend(self.lookups.names(ino));
            }
            // Errors are of a kernel that already forgot (ENOENT, which `fuser` makes
            // success) or of a connection that is gone: nothing is left to invalidate.
            let mut sent = InvalStats::default();
            for (dir, name) in &entries {
                if notifier
                    .inval_entry(INodeNo(*dir), OsStr::new(name))
                    .is_ok()
                {
                    sent.entries += 1;
                }
            }
            for &ino in &inodes {
                if notifier.inval_inode(INodeNo(ino), 0, 0).is_ok() {
                    sent.inodes += 1;
                }
            }
            {
                let mut s = self.stats.lock();
                s.inodes += sent.inodes;
                s.entries += sent.entries;
            }
            let mut q = self.queue.lock();
            q.sent = upto;
            drop(q);
            self.wake.notify_all();
        }
    }
}

impl fs::InodeChanges for Invalidator {
    fn changing(&self, ino: u64) {
        self.queue(ino, |q| {
            q.inodes.insert(ino);
        });
    }

    fn entry_changing(&self, dir: u64, name: &str) {
        self.queue(dir, |q| {
            q.entries.insert((dir, name.to_string()));
        });
    }

    fn settle(&self) {
        Invalidator::settle(self);
    }
}
