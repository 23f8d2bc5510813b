//! Someone outside the file system that keeps its own map of file pages — the
//! server's page tables, from which client processes read file data directly
//! (`easyio serve`) — and must see every change of a file's data made by a door
//! that does not go through it (the FUSE mount of the same process). Such a door
//! runs each change through [`FileSystem::watched_write`] or
//! [`FileSystem::watched_reshape`]; without a watcher they just run it.

use std::sync::Arc;

use crate::FileSystem;

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
