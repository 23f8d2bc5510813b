//! Per-inode logs (NOVA): chains of 4 KiB pages holding fixed-size, checksummed entries.
//!
//! An inode's log is committed by an 8-byte atomic store of its tail: entries between
//! the head and the tail are the inode's history. Past the tail, sealed write entries
//! (format version 4, and their second kind of format version 5) commit themselves: recovery goes on from the tail through every
//! sealed write whose checksum holds, following the chain to the next page where the
//! trailer's count of used slots says the log moved on, and stops at the first slot
//! that is not one; the last such entry is kept only if the seal of its data matches
//! (it is the only one whose data may not have been durable). Anything after that is
//! garbage; a writable mount voids a sealed write it finds there, so it cannot come to
//! life when a later entry fills the slot before it. Log pages are zeroed when they
//! are allocated, so no page holds an older log's entries. A sealed write that moves
//! the log on to a new page stores the tail it leaves behind (the end of the full
//! page), so only the last page's sealed entries lie past a stored tail: a damaged
//! entry of an earlier page is reported, not read as the end of the log. Where the
//! sealed writes end at a full page, its count of used slots must be 0 (the log had
//! not durably moved on) or full, and a count of 0 with sealed writes past the first
//! slot of the next page is damage too: reported, not read as the end of the log.
//!
//! Log page (one block):
//!
//! | offset             | size | field                                           |
//! |--------------------|------|-------------------------------------------------|
//! | 0                  | 4032 | [`SLOTS_PER_PAGE`] entry slots of [`SLOT`] bytes |
//! | [`TRAILER_OFF`]    | 8    | byte offset of the next page (0: none)          |
//! | `TRAILER_OFF + 8`  | 8    | owning inode number                             |
//! | `TRAILER_OFF + 16` | 8    | magic `b"EIOLOGPG"`                             |
//!
//! Entry header (first 8 bytes of the first slot of every entry):
//!
//! | offset | size | field                                                        |
//! |--------|------|--------------------------------------------------------------|
//! | 0      | 1    | kind ([`Kind`])                                              |
//! | 1      | 1    | slots the entry covers (1..=[`MAX_ENTRY_SLOTS`])             |
//! | 2      | 2    | name length (directory entries), else 0                      |
//! | 4      | 4    | CRC-32C of all the entry's bytes with this field zeroed      |
//!
//! Payloads (offsets from the start of the entry):
//!
//! - write: 8 page offset u64 · 16 first block u64 · 24 page count u32 · 32 file size
//!   after the write u64 · 40 mtime ns i64 · 48 SN u64 (0: data durable before commit)
//! - sealed write (format version 4, kind [`Kind::SealedWrite`]; format version 5,
//!   kind [`Kind::SealedWrite2`]): the write's payload with SN 0, and 56 the seal u64
//!   of the data of its blocks ([`pmem::seal`]). It commits itself: see above. The two
//!   kinds differ only in how the seal is finished: [`Kind::SealedWrite`]'s by
//!   [`pmem::seal::Seal::finish_v1`], [`Kind::SealedWrite2`]'s by
//!   [`pmem::seal::Seal::finish`] (the lanes mixed in parallel, see [`pmem::seal`]).
//!   This build writes only the second; recovery checks each with its own.
//! - attr: 8 field mask u32 · 12 mode u32 · 16 uid u32 · 20 gid u32 · 24 size u64 ·
//!   32 atime i64 · 40 mtime i64 · 48 ctime i64
//! - link: 8 link count u32 · 16 ctime i64
//! - dentry add / remove: 8 inode u64 · 16 ctime i64 · 24 name bytes (spilling into
//!   further slots)
//! - xattr (format version 3): 2 extent count u16 (0: no extended attributes) · 8
//!   bytes of the encoded set u32 · 12 CRC-32C of those bytes u32 · 16 ctime i64 · 24
//!   extents, 12 bytes each: first block u64, block count u32 (spilling into further
//!   slots, at most [`MAX_XATTR_EXTENTS`]). The inode's whole set of extended
//!   attributes now lives in those blocks, in order (layout in `crate::xattr`); the
//!   blocks of the set before are dropped.
//! - punch (format version 3): 8 first page u64 · 16 page count u64 · 24 time i64
//!   (mtime and ctime). Pages `first..first + count` become holes.
//!
//! A recovered write entry whose SN never completed is voided in place: one atomic store
//! replaces its first word with kind [`Kind::Void`], so it can never come back to life
//! when the completion counter later passes its SN.

use crate::error::{Error, Result};
use crate::layout::{get32, get64, put32, put64, BLOCK_SIZE};
use pmem::seal::Finish;

/// Bytes per entry slot (one cache line).
pub const SLOT: u64 = 64;
/// Entry slots per log page; the last slot holds the trailer.
pub const SLOTS_PER_PAGE: u64 = BLOCK_SIZE / SLOT - 1;
/// Offset of the trailer inside a log page.
pub const TRAILER_OFF: u64 = SLOTS_PER_PAGE * SLOT;
/// Magic of a log page trailer.
pub const PAGE_MAGIC: u64 = u64::from_le_bytes(*b"EIOLOGPG");
/// Largest entry: a directory entry with a 255-byte name.
pub const MAX_ENTRY_SLOTS: u64 = (DENTRY_NAME_OFF as u64 + crate::MAX_NAME as u64).div_ceil(SLOT);

const DENTRY_NAME_OFF: usize = 24;
/// Offset of the data seal in a sealed write entry.
const SEAL_OFF: usize = 56;
/// Offset of the extents of an xattr entry, and the bytes of each.
const XATTR_EXTENTS_OFF: usize = 24;
const XATTR_EXTENT_BYTES: usize = 12;
/// Most extents an xattr entry names (it stays within [`MAX_ENTRY_SLOTS`]).
pub const MAX_XATTR_EXTENTS: usize = 16;
const _: () = assert!(
    XATTR_EXTENTS_OFF + MAX_XATTR_EXTENTS * XATTR_EXTENT_BYTES <= MAX_ENTRY_SLOTS as usize * 64
);
/// Bytes of the largest entry.
const MAX_ENTRY_BYTES: usize = (MAX_ENTRY_SLOTS * SLOT) as usize;

/// An encoded entry: its stored bytes, held inline (encoding sits on the write path).
#[derive(Clone)]
pub struct Encoded {
    buf: [u8; MAX_ENTRY_BYTES],
    len: usize,
}

impl std::ops::Deref for Encoded {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl std::ops::DerefMut for Encoded {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }
}

/// Entry kinds as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Write = 1,
    Attr = 2,
    Link = 3,
    DentryAdd = 4,
    DentryDel = 5,
    Xattr = 6,
    Punch = 7,
    /// A write committed by itself, its seal finished by
    /// [`pmem::seal::Seal::finish_v1`] (format version 4): no longer written, still
    /// read.
    SealedWrite = 8,
    /// A write committed by itself, its seal finished by [`pmem::seal::Seal::finish`]
    /// (format version 5): see [`Entry::encode_sealed`].
    SealedWrite2 = 9,
    Void = 0xFF,
}

/// Fields an attribute entry sets.
pub mod attr {
    pub const MODE: u32 = 1;
    pub const UID: u32 = 2;
    pub const GID: u32 = 4;
    pub const SIZE: u32 = 8;
    pub const ATIME: u32 = 16;
    pub const MTIME: u32 = 32;
    pub const CTIME: u32 = 64;
    pub const ALL: u32 = 127;
}

/// A decoded log entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// Pages `pgoff..pgoff + npages` of the file now live in blocks `block..`.
    Write {
        pgoff: u64,
        block: u64,
        npages: u32,
        size: u64,
        mtime: i64,
        sn: u64,
    },
    /// Attribute change: the fields named in `mask` take the values given.
    Attr {
        mask: u32,
        mode: u32,
        uid: u32,
        gid: u32,
        size: u64,
        atime: i64,
        mtime: i64,
        ctime: i64,
    },
    /// The link count becomes `nlink`.
    Link { nlink: u32, ctime: i64 },
    /// Directory entry `name` → `ino` added (replacing any entry of that name).
    DentryAdd { ino: u64, ctime: i64, name: String },
    /// Directory entry `name` removed.
    DentryDel { ino: u64, ctime: i64, name: String },
    /// The inode's extended attributes are now the set encoded in the first `bytes`
    /// bytes of the blocks of `extents` (first block, count), in order (none: no
    /// attributes), whose CRC-32C is `crc`.
    Xattr {
        extents: Vec<(u64, u32)>,
        bytes: u32,
        crc: u32,
        ctime: i64,
    },
    /// Pages `pgoff..pgoff + npages` become holes (their blocks are dropped).
    Punch { pgoff: u64, npages: u64, time: i64 },
    /// An entry voided by recovery.
    Void,
}

impl Entry {
    /// Slots this entry occupies.
    pub fn slots(&self) -> u64 {
        match self {
            Entry::DentryAdd { name, .. } | Entry::DentryDel { name, .. } => {
                (DENTRY_NAME_OFF as u64 + name.len() as u64).div_ceil(SLOT)
            }
            Entry::Xattr { extents, .. } => {
                ((XATTR_EXTENTS_OFF + extents.len() * XATTR_EXTENT_BYTES) as u64).div_ceil(SLOT)
            }
            _ => 1,
        }
    }

    /// The stored bytes, a whole number of slots, checksum filled in.
    pub fn encode(&self) -> Encoded {
        let mut enc = Encoded {
            buf: [0u8; MAX_ENTRY_BYTES],
            len: (self.slots() * SLOT) as usize,
        };
        let b = &mut enc.buf[..enc.len];
        let kind = self.put_payload(b);
        b[0] = kind as u8;
        b[1] = self.slots() as u8;
        let csum = crc32c::crc32c(b);
        put32(b, 4, csum);
        enc
    }

    /// A write entry that commits itself (format version 5): kind
    /// [`Kind::SealedWrite2`], the payload of a write (SN 0) and at offset 56 the
    /// seal ([`pmem::seal`]) of the data of its blocks, finished by
    /// [`pmem::seal::Seal::finish`]. Recovery keeps one found past the committed tail
    /// only if its checksum holds and the seal of the durable data matches — the data
    /// and the entry share one fence, with no order between them.
    pub fn encode_sealed(&self, seal: u64) -> Encoded {
        self.encode_sealed_as(Kind::SealedWrite2, seal)
    }

    /// [`Entry::encode_sealed`] with the sealed `kind` given.
    fn encode_sealed_as(&self, kind: Kind, seal: u64) -> Encoded {
        assert!(
            matches!(self, Entry::Write { sn: 0, .. }),
            "only a write with no SN is sealed"
        );
        let mut enc = Encoded {
            buf: [0u8; MAX_ENTRY_BYTES],
            len: SLOT as usize,
        };
        let b = &mut enc.buf[..SLOT as usize];
        self.put_payload(b);
        b[0] = kind as u8;
        b[1] = 1;
        put64(b, SEAL_OFF, seal);
        let csum = crc32c::crc32c(b);
        put32(b, 4, csum);
        enc
    }

    /// The seal of a sealed write entry's data (see [`Entry::encode_sealed`]) and the
    /// finish its kind names, read from its first slot; `None` for every other kind.
    pub fn seal_of(first: &[u8]) -> Option<(u64, Finish)> {
        let how = match first[0] {
            k if k == Kind::SealedWrite2 as u8 => Finish::V2,
            k if k == Kind::SealedWrite as u8 => Finish::V1,
            _ => return None,
        };
        Some((get64(first, SEAL_OFF), how))
    }

    /// Stores the payload of an entry of version 2's kinds into `b` (everything but the
    /// kind, slot count and checksum); returns the kind.
    fn put_payload(&self, b: &mut [u8]) -> Kind {
        match self {
            Entry::Write {
                pgoff,
                block,
                npages,
                size,
                mtime,
                sn,
            } => {
                put64(b, 8, *pgoff);
                put64(b, 16, *block);
                put32(b, 24, *npages);
                put64(b, 32, *size);
                put64(b, 40, *mtime as u64);
                put64(b, 48, *sn);
                Kind::Write
            }
            Entry::Attr {
                mask,
                mode,
                uid,
                gid,
                size,
                atime,
                mtime,
                ctime,
            } => {
                put32(b, 8, *mask);
                put32(b, 12, *mode);
                put32(b, 16, *uid);
                put32(b, 20, *gid);
                put64(b, 24, *size);
                put64(b, 32, *atime as u64);
                put64(b, 40, *mtime as u64);
                put64(b, 48, *ctime as u64);
                Kind::Attr
            }
            Entry::Link { nlink, ctime } => {
                put32(b, 8, *nlink);
                put64(b, 16, *ctime as u64);
                Kind::Link
            }
            Entry::DentryAdd { ino, ctime, name } | Entry::DentryDel { ino, ctime, name } => {
                put64(b, 8, *ino);
                put64(b, 16, *ctime as u64);
                b[2..4].copy_from_slice(&(name.len() as u16).to_le_bytes());
                b[DENTRY_NAME_OFF..DENTRY_NAME_OFF + name.len()].copy_from_slice(name.as_bytes());
                if matches!(self, Entry::DentryAdd { .. }) {
                    Kind::DentryAdd
                } else {
                    Kind::DentryDel
                }
            }
            Entry::Void => Kind::Void,
            _ => self.put_v3_payload(b),
        }
    }

    /// [`Entry::put_payload`] for the kinds format version 3 added.
    fn put_v3_payload(&self, b: &mut [u8]) -> Kind {
        match self {
            Entry::Xattr {
                extents,
                bytes,
                crc,
                ctime,
            } => {
                b[2..4].copy_from_slice(&(extents.len() as u16).to_le_bytes());
                put32(b, 8, *bytes);
                put32(b, 12, *crc);
                put64(b, 16, *ctime as u64);
                for (i, &(start, len)) in extents.iter().enumerate() {
                    let at = XATTR_EXTENTS_OFF + i * XATTR_EXTENT_BYTES;
                    put64(b, at, start);
                    put32(b, at + 8, len);
                }
                Kind::Xattr
            }
            Entry::Punch {
                pgoff,
                npages,
                time,
            } => {
                put64(b, 8, *pgoff);
                put64(b, 16, *npages);
                put64(b, 24, *time as u64);
                Kind::Punch
            }
            _ => unreachable!("a kind of version 2"),
        }
    }

    /// Slots announced by an entry's first slot, checked against the limits, so the
    /// caller knows how many more bytes to read.
    pub fn slots_of(first: &[u8]) -> Result<u64> {
        let slots = first[1] as u64;
        if slots == 0 || slots > MAX_ENTRY_SLOTS {
            return Err(Error::Corrupt(format!("log entry claims {slots} slots")));
        }
        Ok(slots)
    }

    /// Decodes a whole entry (all its slots), verifying the checksum.
    pub fn decode(b: &[u8]) -> Result<Entry> {
        let bad = |why: String| Error::Corrupt(format!("log entry: {why}"));
        if b[0] == Kind::Void as u8 {
            return Ok(Entry::Void);
        }
        // The checksum covers the entry with its own field read as zeros.
        let crc = crc32c::crc32c_append(crc32c::crc32c(&b[..4]), &[0; 4]);
        if crc32c::crc32c_append(crc, &b[8..]) != get32(b, 4) {
            return Err(bad("checksum mismatch".into()));
        }
        let name = || -> Result<String> {
            let len = u16::from_le_bytes([b[2], b[3]]) as usize;
            if len == 0 || len > crate::MAX_NAME || DENTRY_NAME_OFF + len > b.len() {
                return Err(bad(format!("name length {len}")));
            }
            String::from_utf8(b[DENTRY_NAME_OFF..DENTRY_NAME_OFF + len].to_vec())
                .map_err(|_| bad("name is not UTF-8".into()))
        };
        Ok(match b[0] {
            k if k == Kind::Write as u8
                || k == Kind::SealedWrite2 as u8
                || k == Kind::SealedWrite as u8 =>
            {
                Entry::Write {
                    pgoff: get64(b, 8),
                    block: get64(b, 16),
                    npages: get32(b, 24),
                    size: get64(b, 32),
                    mtime: get64(b, 40) as i64,
                    sn: get64(b, 48),
                }
            }
            k if k == Kind::Attr as u8 => Entry::Attr {
                mask: get32(b, 8),
                mode: get32(b, 12),
                uid: get32(b, 16),
                gid: get32(b, 20),
                size: get64(b, 24),
                atime: get64(b, 32) as i64,
                mtime: get64(b, 40) as i64,
                ctime: get64(b, 48) as i64,
            },
            k if k == Kind::Link as u8 => Entry::Link {
                nlink: get32(b, 8),
                ctime: get64(b, 16) as i64,
            },
            k if k == Kind::DentryAdd as u8 => Entry::DentryAdd {
                ino: get64(b, 8),
                ctime: get64(b, 16) as i64,
                name: name()?,
            },
            k if k == Kind::DentryDel as u8 => Entry::DentryDel {
                ino: get64(b, 8),
                ctime: get64(b, 16) as i64,
                name: name()?,
            },
            k if k == Kind::Xattr as u8 => {
                let count = u16::from_le_bytes([b[2], b[3]]) as usize;
                let end = XATTR_EXTENTS_OFF + count * XATTR_EXTENT_BYTES;
                if count > MAX_XATTR_EXTENTS || end > b.len() {
                    return Err(bad(format!("xattr entry with {count} extents")));
                }
                let extents = (0..count)
                    .map(|i| XATTR_EXTENTS_OFF + i * XATTR_EXTENT_BYTES)
                    .map(|at| (get64(b, at), get32(b, at + 8)))
                    .collect();
                Entry::Xattr {
                    extents,
                    bytes: get32(b, 8),
                    crc: get32(b, 12),
                    ctime: get64(b, 16) as i64,
                }
            }
            k if k == Kind::Punch as u8 => Entry::Punch {
                pgoff: get64(b, 8),
                npages: get64(b, 16),
                time: get64(b, 24) as i64,
            },
            k => return Err(bad(format!("unknown kind {k}"))),
        })
    }

    /// The first word of this entry once voided: kind Void, same slot count.
    pub fn void_word(first: &[u8]) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&first[..8]);
        w[0] = Kind::Void as u8;
        u64::from_le_bytes(w)
    }
}

/// Where a log stands in DRAM: its pages in order and the committed tail.
#[derive(Clone, Debug, Default)]
pub struct LogState {
    /// Byte offset of the first page (0: no log yet).
    pub head: u64,
    /// Byte offset of the next free slot (0: empty log).
    pub tail: u64,
    /// Byte offsets of the pages, head first.
    pub pages: Vec<u64>,
    /// Entries between head and tail, voided ones included (for the cleaning policy).
    pub entries: u64,
}

/// The trailer of a fresh log page.
pub fn trailer(next: u64, owner: u64) -> [u8; 24] {
    let mut t = [0u8; 24];
    put64(&mut t, 0, next);
    put64(&mut t, 8, owner);
    put64(&mut t, 16, PAGE_MAGIC);
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Entry> {
        vec![
            Entry::Write {
                pgoff: 7,
                block: 1234,
                npages: 3,
                size: 40000,
                mtime: -5,
                sn: (3 << 48) | 99,
            },
            Entry::Attr {
                mask: attr::ALL,
                mode: 0o644,
                uid: 1,
                gid: 2,
                size: 9,
                atime: 10,
                mtime: 11,
                ctime: 12,
            },
            Entry::Link { nlink: 3, ctime: 4 },
            Entry::DentryAdd {
                ino: 5,
                ctime: 6,
                name: "x".repeat(crate::MAX_NAME),
            },
            Entry::DentryDel {
                ino: 5,
                ctime: 6,
                name: "short".into(),
            },
            Entry::Xattr {
                extents: (0..MAX_XATTR_EXTENTS as u64)
                    .map(|i| (77 + 9 * i, 3))
                    .collect(),
                bytes: 65_000,
                crc: 0xDEAD_BEEF,
                ctime: 8,
            },
            Entry::Xattr {
                extents: vec![(5, 1)],
                bytes: 10,
                crc: 1,
                ctime: 8,
            },
            Entry::Xattr {
                extents: Vec::new(),
                bytes: 0,
                crc: 0,
                ctime: 9,
            },
            Entry::Punch {
                pgoff: 3,
                npages: 9,
                time: -1,
            },
        ]
    }

    #[test]
    fn entries_round_trip() {
        for e in samples() {
            let b = e.encode();
            assert_eq!(b.len() as u64, e.slots() * SLOT);
            assert!(e.slots() <= MAX_ENTRY_SLOTS);
            assert_eq!(Entry::slots_of(&b).unwrap(), e.slots());
            assert_eq!(Entry::decode(&b).unwrap(), e);
        }
    }

    #[test]
    fn any_flipped_bit_is_caught() {
        for e in samples() {
            let b = e.encode();
            for i in 0..b.len() {
                for bit in [0x01u8, 0x80] {
                    let mut bad = b.clone();
                    bad[i] ^= bit;
                    if i == 0 && bad[0] == Kind::Void as u8 {
                        continue;
                    }
                    assert!(Entry::decode(&bad).is_err(), "{e:?}: flip at {i} accepted");
                }
            }
        }
    }

    #[test]
    fn a_sealed_write_of_either_kind_decodes_as_its_write_and_carries_its_seal() {
        let e = Entry::Write {
            pgoff: 2,
            block: 77,
            npages: 1,
            size: 12288,
            mtime: 5,
            sn: 0,
        };
        let new = e.encode_sealed(0x1234_5678_9abc_def0);
        assert_eq!(
            new[0],
            Kind::SealedWrite2 as u8,
            "this build writes the new kind"
        );
        let old = e.encode_sealed_as(Kind::SealedWrite, 0x0fed_cba9_8765_4321);
        for (b, seal, how) in [
            (new, 0x1234_5678_9abc_def0, Finish::V2),
            (old, 0x0fed_cba9_8765_4321, Finish::V1),
        ] {
            assert_eq!(b.len() as u64, SLOT);
            assert_eq!(Entry::decode(&b).unwrap(), e);
            assert_eq!(Entry::seal_of(&b), Some((seal, how)));
            for i in 0..b.len() {
                let mut bad = b.clone();
                bad[i] ^= 0x10;
                assert!(
                    Entry::decode(&bad).is_err(),
                    "{how:?}: flip at {i} accepted"
                );
            }
        }
        assert_eq!(Entry::seal_of(&e.encode()), None);
    }

    #[test]
    fn voided_entry_decodes_as_void() {
        let b = Entry::Link { nlink: 1, ctime: 0 }.encode();
        let w = Entry::void_word(&b).to_le_bytes();
        let mut v = b.clone();
        v[..8].copy_from_slice(&w);
        assert_eq!(Entry::decode(&v).unwrap(), Entry::Void);
        assert_eq!(Entry::slots_of(&v).unwrap(), 1);
    }
}
