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
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        // Mostly dense offsets, some far out, so both halves and the moves between
        // them are exercised.
        let pg = prop_oneof![4 => 0u64..300, 1 => 0u64..(1 << 40)];
        prop_oneof![
            20 => (pg.clone(), 1u64..1000).prop_map(|(p, b)| Op::Insert(p, b)),
            2 => pg.prop_map(Op::RemoveFrom),
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
