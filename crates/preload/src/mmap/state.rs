//! The shim's tables: its shared mappings (address, length, object, offset), the
//! objects this process holds, and which file each open file description is of.

use std::collections::BTreeMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::object::{Key, Object};
use crate::call::mount_of;
use crate::table::{self, Desc};

/// One shared mapping of the shim (the key of the table is its address).
pub(super) struct Entry {
    /// Bytes, whole pages.
    pub(super) len: usize,
    /// Offset in the file of its first byte.
    pub(super) off: u64,
    pub(super) obj: Arc<Object>,
}

/// Part of a mapping: `len` bytes at `addr`, file offset `off`.
pub(super) struct Piece {
    pub(super) len: usize,
    pub(super) off: u64,
    pub(super) obj: Arc<Object>,
}

pub(super) struct State {
    pub(super) maps: BTreeMap<usize, Entry>,
    pub(super) objects: Vec<Arc<Object>>,
    /// Which file each open file description seen while something is mapped is of
    /// (the `Weak` holds the allocation, so an address names one description).
    pub(super) known: Vec<(Weak<Desc>, Key)>,
}

pub(super) static STATE: Mutex<State> = Mutex::new(State {
    maps: BTreeMap::new(),
    objects: Vec::new(),
    known: Vec::new(),
});
/// Held while a change of the tables and its I/O are made (before `STATE`).
pub(super) static OPS: Mutex<()> = Mutex::new(());
/// Entries of the table: while 0, `munmap`, `msync` and `mremap` cost one load.
pub(super) static MAPPED: AtomicUsize = AtomicUsize::new(0);
/// Objects held: while 0, the hooks of `io.rs` cost one load.
pub(super) static OBJECTS: AtomicUsize = AtomicUsize::new(0);

impl State {
    pub(super) fn counts(&mut self) {
        MAPPED.store(self.maps.len(), Ordering::Relaxed);
        OBJECTS.store(self.objects.len(), Ordering::Relaxed);
        if self.objects.is_empty() {
            self.known.clear();
        }
    }

    /// Whether a mapping of the shim meets `[a, b)`.
    pub(super) fn overlaps(&self, a: usize, b: usize) -> bool {
        self.maps
            .range(..b)
            .next_back()
            .is_some_and(|(s, e)| s + e.len > a)
    }

    /// The parts of the shim's mappings in `[a, b)`, taken out of the table (or only
    /// looked at, `keep`).
    pub(super) fn pieces(&mut self, a: usize, b: usize, keep: bool) -> Vec<Piece> {
        // Mappings do not overlap: their ends rise with their starts.
        let starts: Vec<usize> = (self.maps.range(..b).rev())
            .take_while(|(s, e)| *s + e.len > a)
            .map(|(s, _)| *s)
            .collect();
        let mut out = Vec::new();
        for s in starts {
            let e = &self.maps[&s];
            let (end, ps) = (s + e.len, s.max(a));
            let pe = end.min(b);
            out.push(Piece {
                len: pe - ps,
                off: e.off + (ps - s) as u64,
                obj: e.obj.clone(),
            });
            if keep {
                continue;
            }
            let e = self.maps.remove(&s).expect("listed above");
            if s < ps {
                let head = Entry {
                    len: ps - s,
                    off: e.off,
                    obj: e.obj.clone(),
                };
                self.maps.insert(s, head);
            }
            if pe < end {
                let tail = Entry {
                    len: end - pe,
                    off: e.off + (pe - s) as u64,
                    obj: e.obj,
                };
                self.maps.insert(pe, tail);
            }
        }
        out
    }

    /// The objects of `pieces` no mapping uses any more, taken out of the table.
    pub(super) fn unused(&mut self, pieces: &[Piece]) -> Vec<Arc<Object>> {
        let mut gone: Vec<Arc<Object>> = Vec::new();
        for p in pieces {
            let used = self.maps.values().any(|e| Arc::ptr_eq(&e.obj, &p.obj));
            if !used && !gone.iter().any(|g| Arc::ptr_eq(g, &p.obj)) {
                gone.push(p.obj.clone());
            }
        }
        self.objects
            .retain(|o| !gone.iter().any(|g| Arc::ptr_eq(g, o)));
        self.counts();
        gone
    }
}

/// Which file `d` is open on (asked once per open file description).
pub(super) fn key_of(d: &Arc<Desc>) -> Option<Key> {
    let known = |st: &State| {
        (st.known.iter())
            .find(|(w, _)| w.as_ptr() == Arc::as_ptr(d))
            .map(|(_, k)| *k)
    };
    if let Some(k) = known(&STATE.lock()) {
        return Some(k);
    }
    let l = mount_of(d).ok()?;
    let s = l.fs.fstat(d.fd).ok()?;
    let key = (s.ino, s.generation);
    remember(d, key);
    Some(key)
}

pub(super) fn remember(d: &Arc<Desc>, key: Key) {
    let mut st = STATE.lock();
    st.known.retain(|(w, _)| w.strong_count() > 0);
    if !(st.known.iter()).any(|(w, _)| w.as_ptr() == Arc::as_ptr(d)) {
        st.known.push((Arc::downgrade(d), key));
    }
}

/// The description of easyio descriptor `kfd` and the object of its file, if this
/// process maps that file shared.
pub(super) fn object_of(kfd: c_int) -> Option<(Arc<Desc>, Arc<Object>)> {
    let d = table::get(kfd)?;
    let key = key_of(&d)?;
    let obj = (STATE.lock().objects.iter())
        .find(|o| o.key == key)
        .cloned()?;
    Some((d, obj))
}
