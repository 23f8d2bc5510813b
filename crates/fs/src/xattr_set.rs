//! An inode's extended attributes as they are stored: the encoded *set* and where it
//! lives ([`SetRef`]), with the limits of names and values. The calls that read and
//! change attributes are in `xattr.rs`.
//!
//! Storage (format version 3): an inode's extended attributes are stored together, as
//! one encoded *set*, in pool blocks; the inode's log names them with an xattr entry
//! (`crate::log`: up to `MAX_XATTR_EXTENTS` (16) extents, bytes, CRC-32C of the
//! bytes). A change writes the whole new set into freshly allocated blocks, makes them
//! durable, and only then commits the entry naming them with the inode's usual single
//! atomic tail store — copy-on-write, so a crash leaves the old set or the new one,
//! never a mix. The blocks of the set before are retired like displaced data blocks.
//! Removing the last attribute commits an entry with no blocks. Recovery replays the
//! entries (the last one wins), accounts the run's blocks to the inode, and checks the
//! set's checksum and encoding; fsck does the same, so a leaked or doubly referenced
//! block is found as for file data. Log cleaning keeps the current run.
//!
//! Encoded set, in the first `bytes` bytes of the extents' blocks taken in order,
//! attributes in name order:
//!
//! | offset | size | field                     |
//! |--------|------|---------------------------|
//! | 0      | 1    | name length n (1..=255)   |
//! | 1      | 4    | value length v (≤ 64 KiB) |
//! | 5      | n    | name (with its namespace) |
//! | 5 + n  | v    | value                     |
//!
//! repeated until `bytes`. The rest of the last block is zero.

use crate::alloc::Extent;
use crate::layout::BLOCK_SIZE;
use crate::log::Entry;

/// Longest name of an extended attribute, namespace prefix included (`XATTR_NAME_MAX`).
pub const MAX_XATTR_NAME: usize = 255;
/// Largest value of an extended attribute (`XATTR_SIZE_MAX`).
pub const MAX_XATTR_VALUE: usize = 64 * 1024;
/// Largest list of names `listxattr` returns into a buffer (`XATTR_LIST_MAX`).
pub const MAX_XATTR_LIST: usize = 64 * 1024;
/// Largest encoded set of one inode's extended attributes.
pub const MAX_XATTR_SET_BYTES: usize = 1 << 20;
/// Bytes of an attribute's header in the encoded set.
const RECORD_HEADER: usize = 5;

/// Namespaces whose attributes are stored.
pub(crate) const STORED_PREFIXES: [&str; 3] = ["user.", "trusted.", "security."];

/// Where an inode's encoded set of extended attributes lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetRef {
    /// The blocks, in order.
    pub extents: Vec<Extent>,
    /// Bytes of the encoded set.
    pub bytes: u32,
    /// CRC-32C of those bytes.
    pub crc: u32,
}

impl SetRef {
    /// The set an xattr entry names (`None`: the entry removes the last attribute).
    pub(crate) fn of_entry(extents: &[(u64, u32)], bytes: u32, crc: u32) -> Option<SetRef> {
        (!extents.is_empty()).then(|| SetRef {
            extents: extents
                .iter()
                .map(|&(start, len)| Extent {
                    start,
                    len: len as u64,
                })
                .collect(),
            bytes,
            crc,
        })
    }

    /// The log entry that names this set.
    pub fn entry(&self, ctime: i64) -> Entry {
        Entry::Xattr {
            extents: self
                .extents
                .iter()
                .map(|e| (e.start, e.len as u32))
                .collect(),
            bytes: self.bytes,
            crc: self.crc,
            ctime,
        }
    }

    /// Reads the set from the region, checking its checksum and encoding.
    pub fn load(&self, pm: &dyn pmem::Pmem) -> std::result::Result<Set, String> {
        let blocks: u64 = self.extents.iter().map(|e| e.len).sum();
        if self.bytes as u64 > blocks * BLOCK_SIZE {
            return Err(format!(
                "extended attributes: {} bytes in {blocks} blocks",
                self.bytes
            ));
        }
        let mut b = vec![0u8; self.bytes as usize];
        let mut at = 0;
        for e in &self.extents {
            let n = ((e.len * BLOCK_SIZE) as usize).min(b.len() - at);
            pm.read(e.start * BLOCK_SIZE, &mut b[at..at + n]);
            at += n;
        }
        if crc32c::crc32c(&b) != self.crc {
            return Err("extended attributes: checksum mismatch".into());
        }
        Set::decode(&b)
    }
}

/// One inode's extended attributes, in name order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Set(pub(crate) Vec<(Vec<u8>, Vec<u8>)>);

impl Set {
    /// Where `name` is, or where it would go.
    pub(crate) fn find(&self, name: &[u8]) -> std::result::Result<usize, usize> {
        self.0.binary_search_by(|(n, _)| n.as_slice().cmp(name))
    }

    /// The encoded set.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        for (n, v) in &self.0 {
            out.push(n.len() as u8);
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            out.extend_from_slice(n);
            out.extend_from_slice(v);
        }
        out
    }

    /// Bytes of the encoded set.
    pub(crate) fn encoded_len(&self) -> usize {
        self.0
            .iter()
            .map(|(n, v)| RECORD_HEADER + n.len() + v.len())
            .sum()
    }

    /// Decodes an encoded set; every name must be legal, in order, and unique.
    pub(crate) fn decode(b: &[u8]) -> std::result::Result<Set, String> {
        let bad = |why: &str| format!("extended attributes: {why}");
        let mut out: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut at = 0;
        while at < b.len() {
            if at + RECORD_HEADER > b.len() {
                return Err(bad("truncated record"));
            }
            let n = b[at] as usize;
            let v = u32::from_le_bytes(b[at + 1..at + 5].try_into().unwrap()) as usize;
            let start = at + RECORD_HEADER;
            if n == 0 || v > MAX_XATTR_VALUE || start + n + v > b.len() {
                return Err(bad("record of impossible length"));
            }
            let name = &b[start..start + n];
            if !STORED_PREFIXES.iter().any(|p| stored_name(name, p)) {
                return Err(bad("name outside the stored namespaces"));
            }
            if out.last().is_some_and(|(last, _)| last.as_slice() >= name) {
                return Err(bad("names out of order"));
            }
            out.push((name.to_vec(), b[start + n..start + n + v].to_vec()));
            at = start + n + v;
        }
        Ok(Set(out))
    }
}

fn stored_name(name: &[u8], prefix: &str) -> bool {
    name.len() > prefix.len() && name.starts_with(prefix.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_round_trip_and_bad_encodings_are_refused() {
        let set = Set(vec![
            (b"security.x".to_vec(), vec![]),
            (b"trusted.t".to_vec(), vec![1, 2, 3]),
            (b"user.a".to_vec(), vec![7; MAX_XATTR_VALUE]),
        ]);
        let b = set.encode();
        assert_eq!(b.len(), set.encoded_len());
        assert_eq!(Set::decode(&b).unwrap(), set);
        assert!(Set::decode(&b[..b.len() - 1]).is_err(), "truncated");
        let mut unordered = Set(set.0.clone());
        unordered.0.swap(0, 1);
        assert!(Set::decode(&unordered.encode()).is_err(), "out of order");
        let foreign = Set(vec![(b"system.x".to_vec(), vec![])]);
        assert!(Set::decode(&foreign.encode()).is_err(), "foreign namespace");
        let bare = Set(vec![(b"user.".to_vec(), vec![])]);
        assert!(Set::decode(&bare.encode()).is_err(), "prefix alone");
    }
}
