//! The DRAM index of a file's data: page offset → block.
//!
//! Files are mostly dense, and a write of N pages updates N entries, so the index keeps
//! the pages below a bound in a vector (one store an entry) and only the pages beyond
//! it in an ordered map. The vector grows to cover a new page only while it stays at
//! least about half full, so a sparse file (one page at 1 TiB) costs no more than the
//! map alone.

use std::collections::BTreeMap;

/// Block number standing for a hole in the vector: block 0 holds the superblock, never
/// file data.
const HOLE: u64 = 0;

/// Pages the vector may cover beyond twice its filled entries.
const DENSE_SLACK: u64 = 64;

/// Page offset → block, ordered.
#[derive(Clone, Debug, Default)]
pub struct PageIndex {
    /// Pages `0..dense.len()`; [`HOLE`] where there is none.
    dense: Vec<u64>,
    /// Filled entries of `dense`.
    filled: u64,
    /// Pages at or beyond `dense.len()`.
    sparse: BTreeMap<u64, u64>,
}

impl PageIndex {
    /// The block holding page `pg`.
    pub fn get(&self, pg: u64) -> Option<u64> {
        match self.dense.get(pg as usize) {
            Some(&HOLE) => None,
            Some(&b) => Some(b),
            None => self.sparse.get(&pg).copied(),
        }
    }

    /// Maps page `pg` to `block`; returns the block it replaces.
    pub fn insert(&mut self, pg: u64, block: u64) -> Option<u64> {
        assert_ne!(block, HOLE, "block 0 is never file data");
        if pg >= self.dense.len() as u64 && pg < 2 * (self.filled + 1) + DENSE_SLACK {
            self.grow_to(pg + 1);
        }
        match self.dense.get_mut(pg as usize) {
            Some(slot) => {
                let old = std::mem::replace(slot, block);
                if old == HOLE {
                    self.filled += 1;
                    None
                } else {
                    Some(old)
                }
            }
            None => self.sparse.insert(pg, block),
        }
    }

    /// Extends the vector over pages below `len`, taking them out of the map.
    fn grow_to(&mut self, len: u64) {
        let len = len.max(2 * self.dense.len() as u64);
        let moved = {
            let beyond = self.sparse.split_off(&len);
            std::mem::replace(&mut self.sparse, beyond)
        };
        self.dense.resize(len as usize, HOLE);
        for (pg, b) in moved {
            self.dense[pg as usize] = b;
            self.filled += 1;
        }
    }

    /// Removes every page at or beyond `keep`; returns their blocks in page order.
    pub fn remove_from(&mut self, keep: u64) -> Vec<u64> {
        let mut out = Vec::new();
        if (keep as usize) < self.dense.len() {
            let cut = self.dense.split_off(keep as usize);
            out.extend(cut.into_iter().filter(|&b| b != HOLE));
            self.filled -= out.len() as u64;
        }
        out.extend(self.sparse.split_off(&keep).into_values());
        out
    }

    /// Removes pages `start..end`; returns their blocks in page order.
    pub fn remove_range(&mut self, start: u64, end: u64) -> Vec<u64> {
        let mut out = Vec::new();
        let dense_end = end.min(self.dense.len() as u64);
        for pg in start..dense_end.max(start) {
            let slot = &mut self.dense[pg as usize];
            if *slot != HOLE {
                out.push(std::mem::replace(slot, HOLE));
                self.filled -= 1;
            }
        }
        if start < end {
            let keys: Vec<u64> = self.sparse.range(start..end).map(|(&p, _)| p).collect();
            for pg in keys {
                out.extend(self.sparse.remove(&pg));
            }
        }
        out
    }

    /// The first mapped page at or after `from`.
    pub fn next_mapped(&self, from: u64) -> Option<u64> {
        let dense_len = self.dense.len() as u64;
        if from < dense_len {
            let hit = self.dense[from as usize..].iter().position(|&b| b != HOLE);
            if let Some(i) = hit {
                return Some(from + i as u64);
            }
        }
        self.sparse
            .range(from.max(dense_len)..)
            .next()
            .map(|(&p, _)| p)
    }

    /// The first page at or after `from` that is not mapped.
    pub fn next_hole(&self, from: u64) -> u64 {
        let mut pg = from;
        let dense_len = self.dense.len() as u64;
        while pg < dense_len {
            if self.dense[pg as usize] == HOLE {
                return pg;
            }
            pg += 1;
        }
        for (&p, _) in self.sparse.range(pg..) {
            if p != pg {
                break;
            }
            pg += 1;
        }
        pg
    }

    /// Forgets every page.
    pub fn clear(&mut self) {
        *self = PageIndex::default();
    }

    /// Pages mapped.
    pub fn len(&self) -> usize {
        (self.filled as usize) + self.sparse.len()
    }

    /// Every (page, block), in page order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let dense = self
            .dense
            .iter()
            .enumerate()
            .filter(|&(_, &b)| b != HOLE)
            .map(|(pg, &b)| (pg as u64, b));
        dense.chain(self.sparse.iter().map(|(&pg, &b)| (pg, b)))
    }

    /// Every block, in page order.
    pub fn blocks(&self) -> impl Iterator<Item = u64> + '_ {
        self.iter().map(|(_, b)| b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u64, u64),
        RemoveFrom(u64),
        RemoveRange(u64, u64),
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        // Mostly dense offsets, some far out, so both halves and the moves between
        // them are exercised.
        let pg = prop_oneof![4 => 0u64..300, 1 => 0u64..(1 << 40)];
        prop_oneof![
            20 => (pg.clone(), 1u64..1000).prop_map(|(p, b)| Op::Insert(p, b)),
            2 => pg.clone().prop_map(Op::RemoveFrom),
            2 => (pg, 0u64..400).prop_map(|(p, n)| Op::RemoveRange(p, p + n)),
            1 => Just(Op::Clear),
        ]
    }

    proptest! {
        #[test]
        fn behaves_like_an_ordered_map(ops in proptest::collection::vec(op(), 0..400)) {
            let mut idx = PageIndex::default();
            let mut model = BTreeMap::new();
            for o in ops {
                match o {
                    Op::Insert(p, b) => prop_assert_eq!(idx.insert(p, b), model.insert(p, b)),
                    Op::RemoveFrom(k) => {
                        let want: Vec<u64> = model.split_off(&k).into_values().collect();
                        prop_assert_eq!(idx.remove_from(k), want);
                    }
                    Op::RemoveRange(a, b) => {
                        let keys: Vec<u64> = model.range(a..b).map(|(&p, _)| p).collect();
                        let want: Vec<u64> =
                            keys.iter().map(|p| model.remove(p).unwrap()).collect();
                        prop_assert_eq!(idx.remove_range(a, b), want);
                    }
                    Op::Clear => {
                        idx.clear();
                        model.clear();
                    }
                }
                prop_assert_eq!(idx.len(), model.len());
                let got: Vec<(u64, u64)> = idx.iter().collect();
                let want: Vec<(u64, u64)> = model.iter().map(|(&p, &b)| (p, b)).collect();
                prop_assert_eq!(got, want);
            }
            for (&p, &b) in &model {
                prop_assert_eq!(idx.get(p), Some(b));
            }
            prop_assert_eq!(idx.get(1 << 41), None);
            for from in [0u64, 1, 5, 64, 150, 299, 300, 1 << 39] {
                let want = model.range(from..).next().map(|(&p, _)| p);
                prop_assert_eq!(idx.next_mapped(from), want);
                let mut hole = from;
                while model.contains_key(&hole) {
                    hole += 1;
                }
                prop_assert_eq!(idx.next_hole(from), hole);
            }
        }
    }

    #[test]
    fn a_far_page_does_not_grow_the_vector() {
        let mut idx = PageIndex::default();
        idx.insert(1 << 28, 7);
        assert!(idx.dense.is_empty());
        for pg in 0..1000 {
            idx.insert(pg, pg + 1);
        }
        assert!(idx.dense.len() >= 1000 && idx.dense.len() <= 2048);
        assert_eq!(idx.get(1 << 28), Some(7));
        assert_eq!(idx.len(), 1001);
    }
}
