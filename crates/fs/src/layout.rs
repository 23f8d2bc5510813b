//! The on-region layout: where every structure lives, and the superblock that records it.
//!
//! The usable region (after the `pmem` region header) is divided into 4 KiB blocks:
//!
//! | block(s)                       | what                                                        |
//! |--------------------------------|-------------------------------------------------------------|
//! | [`SB_BLOCK`] = 0               | superblock                                                  |
//! | [`SB_REPLICA_BLOCK`] = 1       | superblock replica (identical; used when the first is bad)  |
//! | [`RECORDS_BLOCK`] = 2          | persistent completion records of the engine's channels      |
//! | [`MOUNT_BLOCK`] = 3            | mount state: clean-unmount flag and saved-allocator checksum|
//! | `journal_start ..+ JOURNALS`   | per-CPU undo journals, one block each                       |
//! | `inode_start ..+ inode_blocks` | inode table, [`INODE_SIZE`] bytes per inode                 |
//! | `bitmap_start ..+ bitmap_blocks`| free-block bitmap saved at clean unmount                   |
//! | `pool_start .. total_blocks`   | pool: inode log pages and file data blocks                  |
//!
//! Superblock (block 0 and its replica in block 1), little endian:
//!
//! | offset | size | field                                              |
//! |--------|------|----------------------------------------------------|
//! | 0      | 8    | magic `b"EASYIOFS"`                                |
//! | 8      | 4    | format version ([`FORMAT_VERSION`]; see below)     |
//! | 12     | 4    | block size (4096)                                  |
//! | 16     | 8    | total blocks                                       |
//! | 24     | 8    | first journal block                                |
//! | 32     | 8    | number of journals                                 |
//! | 40     | 8    | first inode-table block                            |
//! | 48     | 8    | number of inodes                                   |
//! | 56     | 8    | first saved-bitmap block                           |
//! | 64     | 8    | first pool block                                   |
//! | 72     | 8    | engine channels with completion records            |
//! | 80     | 16   | file system identity (random at format)            |
//! | 96     | 4    | CRC-32C of bytes 0..96                             |
//!
//! Every later offset is derived from the geometry, never stored twice.
//!
//! Format versions: 2 sealed the log head and tail words; 3 added the xattr and punch
//! log entries (`crate::log`); 4 added the sealed write entry, which commits itself
//! past the log's tail (`crate::log`), and zeroes log pages when they are allocated;
//! 5 added a second sealed write entry kind, whose seal is finished with its lanes
//! mixed in parallel (`pmem::seal`), and writes only that kind. Nothing else changed —
//! the layout and every structure of version 2 are unchanged, and an image of version
//! 2, 3 or 4 is a valid image of version 5 (version 4's sealed entries are still
//! checked with their own finish; an image of version 2 or 3 has no sealed entries, and
//! recovery finds none in its unzeroed pages: no older build wrote the kinds) — so
//! this build reads all four ([`OLDEST_READ_VERSION`] ..= [`FORMAT_VERSION`]). An
//! older image is upgraded by its first writable mount, before anything else is
//! written: the replica is rewritten first, then the primary, each durable before the
//! next, so a crash leaves a valid superblock of the old version (and the next
//! writable mount upgrades again) or both of the new one; the primary is only ever the
//! new version once the replica is, and entries of the new version are written only
//! after both say so — so an older build, which refuses the newer version, never meets
//! an entry kind it does not know. A read-only mount (and `fsck`) never writes the
//! version. An image of a version newer than this build reads is refused with both
//! versions named.

use crate::error::{Error, Result};
use pmem::Pmem;

/// Bytes per block, the unit of data, log pages and allocation.
pub const BLOCK_SIZE: u64 = 4096;
/// Block of the primary superblock.
pub const SB_BLOCK: u64 = 0;
/// Block of the superblock replica.
pub const SB_REPLICA_BLOCK: u64 = 1;
/// Block of the engine's persistent completion records: 64 channels of 64 bytes.
pub const RECORDS_BLOCK: u64 = 2;
/// Block of the mount state.
pub const MOUNT_BLOCK: u64 = 3;
/// First block of the journals.
pub const JOURNAL_START: u64 = 4;
/// Number of per-CPU journals; operations pick one by thread and serialise on it.
pub const JOURNALS: u64 = 16;
/// Bytes per persistent inode.
pub const INODE_SIZE: u64 = 128;
/// Inodes per block of the inode table.
pub const INODES_PER_BLOCK: u64 = BLOCK_SIZE / INODE_SIZE;
/// Completion records the layout reserves room for (one 64-byte line each).
pub const MAX_RECORDS: u64 = BLOCK_SIZE / engine::RECORD_BYTES;
const _: () = assert!(MAX_RECORDS * engine::RECORD_BYTES == engine::AREA_BYTES);
/// For another process that maps the region read-only (a client of a server): the
/// region offset of the word that says how far the channel of raw SN `raw` has
/// durably completed, and the value it must reach for `raw` to be done (see
/// `engine::record`: the word is stored after the counter's write-back and fence, so
/// reaching it means the copy and its record are durable). `None` for a raw value
/// that names no SN.
pub fn sn_progress_word(raw: u64) -> Option<(u64, u64)> {
    let sn = engine::Sn::from_raw(raw)?;
    Some((
        engine::record::durable_off(RECORDS_BLOCK * BLOCK_SIZE, sn.channel()),
        sn.counter(),
    ))
}

/// Default data bytes per inode at format time: one inode per 16 KiB.
pub const DEFAULT_BYTES_PER_INODE: u64 = 16 * 1024;
/// Inode number of the root directory. Inode 0 is never used, so 0 can mean "none".
pub const ROOT_INO: u64 = 1;

/// Format version written by this code (2: sealed log head and tail words; 3: xattr
/// and punch log entries; 4: sealed write entries, zeroed log pages; 5: sealed write
/// entries of a second kind, their seal's lanes finished in parallel).
pub const FORMAT_VERSION: u32 = 5;
/// Oldest format version this code mounts (upgrading it on a writable mount).
pub const OLDEST_READ_VERSION: u32 = 2;

/// Bits of a sealed log word that hold the region offset; the region can be at most
/// 2^48 bytes (256 TiB).
pub const LOG_WORD_OFFSET_BITS: u32 = 48;
const LOG_WORD_OFFSET_MASK: u64 = (1 << LOG_WORD_OFFSET_BITS) - 1;

/// Which of an inode's two log words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogWord {
    /// The first page of the log.
    Head,
    /// The next free slot of the log.
    Tail,
}

impl LogWord {
    fn name(self) -> &'static str {
        match self {
            LogWord::Head => "head",
            LogWord::Tail => "tail",
        }
    }
}

/// The stored form of an inode's log head or tail: the byte offset in the low 48 bits
/// and, in the high 16, a check of (inode, which word, offset) — so a flipped bit that
/// still leaves a plausible offset (a tail moved back a slot would silently drop the
/// entries after it) is caught at mount. Still one 8-byte store, so a commit stays
/// atomic. "None" (0) is stored as 0.
pub fn seal_log_word(ino: u64, which: LogWord, off: u64) -> u64 {
    if off == 0 {
        return 0;
    }
    assert!(
        off <= LOG_WORD_OFFSET_MASK,
        "log offset {off:#x} beyond 48 bits"
    );
    off | log_word_check(ino, which, off) << LOG_WORD_OFFSET_BITS
}

/// The offset a sealed log word holds, or why it is not a valid one.
pub fn unseal_log_word(ino: u64, which: LogWord, word: u64) -> std::result::Result<u64, String> {
    let off = word & LOG_WORD_OFFSET_MASK;
    if word == 0 || word >> LOG_WORD_OFFSET_BITS == log_word_check(ino, which, off) && off != 0 {
        return Ok(off);
    }
    Err(format!(
        "log {} word {word:#x} fails its check (damaged)",
        which.name()
    ))
}

fn log_word_check(ino: u64, which: LogWord, off: u64) -> u64 {
    let mut b = [0u8; 17];
    b[..8].copy_from_slice(&ino.to_le_bytes());
    b[8..16].copy_from_slice(&off.to_le_bytes());
    b[16] = which as u8;
    (crc32c::crc32c(&b) & 0xFFFF) as u64
}
const SB_MAGIC: [u8; 8] = *b"EASYIOFS";

const SB_MAGIC_OFF: usize = 0;
const SB_VERSION_OFF: usize = SB_MAGIC_OFF + 8;
const SB_BLOCK_SIZE_OFF: usize = SB_VERSION_OFF + 4;
const SB_TOTAL_OFF: usize = SB_BLOCK_SIZE_OFF + 4;
const SB_JOURNAL_START_OFF: usize = SB_TOTAL_OFF + 8;
const SB_JOURNALS_OFF: usize = SB_JOURNAL_START_OFF + 8;
const SB_INODE_START_OFF: usize = SB_JOURNALS_OFF + 8;
const SB_INODES_OFF: usize = SB_INODE_START_OFF + 8;
const SB_BITMAP_START_OFF: usize = SB_INODES_OFF + 8;
const SB_POOL_START_OFF: usize = SB_BITMAP_START_OFF + 8;
const SB_CHANNELS_OFF: usize = SB_POOL_START_OFF + 8;
const SB_ID_OFF: usize = SB_CHANNELS_OFF + 8;
const SB_CSUM_OFF: usize = SB_ID_OFF + 16;
const SB_LEN: usize = SB_CSUM_OFF + 4;

/// Where everything is, derived from the region size and the inode count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Blocks of the usable region.
    pub total_blocks: u64,
    /// First block of the journals.
    pub journal_start: u64,
    /// Number of journals.
    pub journals: u64,
    /// First block of the inode table.
    pub inode_start: u64,
    /// Inodes in the table (inode 0 is never used).
    pub inodes: u64,
    /// First block of the saved free-block bitmap.
    pub bitmap_start: u64,
    /// First block of the pool.
    pub pool_start: u64,
    /// Engine channels with completion records.
    pub channels: u64,
    /// File system identity, random at format.
    pub id: [u8; 16],
    /// Format version of the image: [`FORMAT_VERSION`] for a new one, else what its
    /// superblock says (until a writable mount upgrades it).
    pub version: u32,
}

impl Geometry {
    /// Lays out a region of `region_len` usable bytes with `inodes` inodes (or the
    /// default density) and `channels` completion records.
    pub fn new(region_len: u64, inodes: Option<u64>, channels: u64) -> Result<Geometry> {
        if region_len > LOG_WORD_OFFSET_MASK {
            return Err(Error::Invalid(format!(
                "region of {region_len} bytes: at most 2^{LOG_WORD_OFFSET_BITS} bytes \
                 (256 TiB) are supported"
            )));
        }
        let total_blocks = region_len / BLOCK_SIZE;
        let inodes = inodes
            .unwrap_or(total_blocks * BLOCK_SIZE / DEFAULT_BYTES_PER_INODE)
            .max(16);
        if channels == 0 || channels > MAX_RECORDS {
            return Err(Error::Invalid(format!(
                "{channels} engine channels; the layout holds 1 to {MAX_RECORDS}"
            )));
        }
        let inode_start = JOURNAL_START + JOURNALS;
        let inode_blocks = inodes.div_ceil(INODES_PER_BLOCK);
        let bitmap_start = inode_start + inode_blocks;
        let bitmap_blocks = total_blocks.div_ceil(8 * BLOCK_SIZE);
        let pool_start = bitmap_start + bitmap_blocks;
        // A root directory needs one log page; anything smaller is useless.
        if pool_start + 8 > total_blocks {
            return Err(Error::Invalid(format!(
                "region of {region_len} bytes is too small for {inodes} inodes \
                 ({} blocks of metadata, {total_blocks} blocks in all)",
                pool_start
            )));
        }
        Ok(Geometry {
            total_blocks,
            journal_start: JOURNAL_START,
            journals: JOURNALS,
            inode_start,
            inodes,
            bitmap_start,
            pool_start,
            channels,
            id: random_id(),
            version: FORMAT_VERSION,
        })
    }

    /// Byte offset of block `b`.
    pub fn block_off(b: u64) -> u64 {
        b * BLOCK_SIZE
    }

    /// Byte offset of the persistent inode `ino`.
    pub fn inode_off(&self, ino: u64) -> u64 {
        debug_assert!(ino < self.inodes);
        self.inode_start * BLOCK_SIZE + ino * INODE_SIZE
    }

    /// Byte offset of journal `j`.
    pub fn journal_off(&self, j: u64) -> u64 {
        (self.journal_start + j) * BLOCK_SIZE
    }

    /// Byte offset of the completion-record area.
    pub fn records_off(&self) -> u64 {
        RECORDS_BLOCK * BLOCK_SIZE
    }

    /// Whether the copy named by raw SN `raw` reached the region, according to the
    /// persistent completion records. An SN naming no channel of this file system
    /// never completed.
    pub fn sn_done(&self, pm: &dyn Pmem, raw: u64) -> bool {
        match engine::Sn::from_raw(raw) {
            Some(sn) if (sn.channel() as u64) < self.channels => {
                engine::record_is_done(pm, self.records_off(), sn)
            }
            _ => false,
        }
    }

    /// Byte offset of the saved free-block bitmap.
    pub fn bitmap_off(&self) -> u64 {
        self.bitmap_start * BLOCK_SIZE
    }

    /// Blocks in the pool.
    pub fn pool_blocks(&self) -> u64 {
        self.total_blocks - self.pool_start
    }

    /// Whether `off` is the start of a block inside the pool.
    pub fn is_pool_block_off(&self, off: u64) -> bool {
        off.is_multiple_of(BLOCK_SIZE)
            && off / BLOCK_SIZE >= self.pool_start
            && off / BLOCK_SIZE < self.total_blocks
    }

    fn encode(&self) -> [u8; SB_LEN] {
        let mut b = [0u8; SB_LEN];
        b[SB_MAGIC_OFF..SB_VERSION_OFF].copy_from_slice(&SB_MAGIC);
        put32(&mut b, SB_VERSION_OFF, self.version);
        put32(&mut b, SB_BLOCK_SIZE_OFF, BLOCK_SIZE as u32);
        put64(&mut b, SB_TOTAL_OFF, self.total_blocks);
        put64(&mut b, SB_JOURNAL_START_OFF, self.journal_start);
        put64(&mut b, SB_JOURNALS_OFF, self.journals);
        put64(&mut b, SB_INODE_START_OFF, self.inode_start);
        put64(&mut b, SB_INODES_OFF, self.inodes);
        put64(&mut b, SB_BITMAP_START_OFF, self.bitmap_start);
        put64(&mut b, SB_POOL_START_OFF, self.pool_start);
        put64(&mut b, SB_CHANNELS_OFF, self.channels);
        b[SB_ID_OFF..SB_CSUM_OFF].copy_from_slice(&self.id);
        let csum = crc32c::crc32c(&b[..SB_CSUM_OFF]);
        put32(&mut b, SB_CSUM_OFF, csum);
        b
    }

    fn decode(b: &[u8; SB_LEN], region_len: u64) -> std::result::Result<Geometry, String> {
        if b[SB_MAGIC_OFF..SB_VERSION_OFF] != SB_MAGIC {
            return Err("no easyio file system here (bad superblock magic)".into());
        }
        if get32(b, SB_CSUM_OFF) != crc32c::crc32c(&b[..SB_CSUM_OFF]) {
            return Err("superblock checksum mismatch".into());
        }
        let version = get32(b, SB_VERSION_OFF);
        if version > FORMAT_VERSION {
            return Err(format!(
                "format version {version} was written by a newer easyio; this build \
                 reads versions {OLDEST_READ_VERSION} to {FORMAT_VERSION}"
            ));
        }
        if version < OLDEST_READ_VERSION {
            return Err(format!(
                "format version {version} was written by an older easyio; this build \
                 reads versions {OLDEST_READ_VERSION} to {FORMAT_VERSION}"
            ));
        }
        if get32(b, SB_BLOCK_SIZE_OFF) as u64 != BLOCK_SIZE {
            return Err("unsupported block size".into());
        }
        let mut id = [0u8; 16];
        id.copy_from_slice(&b[SB_ID_OFF..SB_CSUM_OFF]);
        let g = Geometry {
            total_blocks: get64(b, SB_TOTAL_OFF),
            journal_start: get64(b, SB_JOURNAL_START_OFF),
            journals: get64(b, SB_JOURNALS_OFF),
            inode_start: get64(b, SB_INODE_START_OFF),
            inodes: get64(b, SB_INODES_OFF),
            bitmap_start: get64(b, SB_BITMAP_START_OFF),
            pool_start: get64(b, SB_POOL_START_OFF),
            channels: get64(b, SB_CHANNELS_OFF),
            id,
            version,
        };
        // Checked first: a block count beyond the region would also overflow the byte
        // arithmetic below.
        if g.total_blocks > region_len / BLOCK_SIZE {
            return Err(format!(
                "superblock claims {} blocks but the region has {}",
                g.total_blocks,
                region_len / BLOCK_SIZE
            ));
        }
        // The checksum only says the bytes are what was written; check that what was
        // written is a layout this code would have produced for this region.
        let expect = Geometry::new(g.total_blocks * BLOCK_SIZE, Some(g.inodes), g.channels)
            .map_err(|e| format!("superblock geometry is impossible: {e}"))?;
        let consistent = g.journal_start == expect.journal_start
            && g.journals == expect.journals
            && g.inode_start == expect.inode_start
            && g.bitmap_start == expect.bitmap_start
            && g.pool_start == expect.pool_start;
        if !consistent {
            return Err("superblock geometry is inconsistent".into());
        }
        Ok(g)
    }

    /// Writes the superblock and its replica, each durable before the next.
    pub fn write(&self, pm: &dyn Pmem) {
        let b = self.encode();
        pm.write_persist(SB_BLOCK * BLOCK_SIZE, &b);
        pm.write_persist(SB_REPLICA_BLOCK * BLOCK_SIZE, &b);
    }

    /// Rewrites an image of an older format version as [`FORMAT_VERSION`]: the replica
    /// first, then the primary, each durable before the next (see the module docs).
    pub fn upgrade(&mut self, pm: &dyn Pmem) {
        self.version = FORMAT_VERSION;
        let b = self.encode();
        pm.write_persist(SB_REPLICA_BLOCK * BLOCK_SIZE, &b);
        pm.write_persist(SB_BLOCK * BLOCK_SIZE, &b);
    }

    /// Reads the superblock, falling back to the replica. Returns the geometry and
    /// whether the primary had to be skipped (and why).
    pub fn read(pm: &dyn Pmem) -> Result<(Geometry, Option<String>)> {
        let region_len = pm.len();
        if region_len < 2 * BLOCK_SIZE {
            return Err(Error::Corrupt("region too small for a superblock".into()));
        }
        let mut b = [0u8; SB_LEN];
        pm.read(SB_BLOCK * BLOCK_SIZE, &mut b);
        let primary = Geometry::decode(&b, region_len);
        if let Ok(g) = primary {
            return Ok((g, None));
        }
        let why = primary.unwrap_err();
        let newer = newer_version(&b);
        pm.read(SB_REPLICA_BLOCK * BLOCK_SIZE, &mut b);
        match Geometry::decode(&b, region_len) {
            Ok(g) => Ok((g, Some(why))),
            // Not damage: an image this build is too old for.
            Err(_) if newer.is_some() => Err(Error::Invalid(why)),
            Err(replica) => Err(Error::Corrupt(format!(
                "superblock: {why}; replica: {replica}"
            ))),
        }
    }
}

/// The format version of a superblock that is intact but newer than this build reads.
fn newer_version(b: &[u8; SB_LEN]) -> Option<u32> {
    let intact = b[SB_MAGIC_OFF..SB_VERSION_OFF] == SB_MAGIC
        && get32(b, SB_CSUM_OFF) == crc32c::crc32c(&b[..SB_CSUM_OFF]);
    let version = get32(b, SB_VERSION_OFF);
    (intact && version > FORMAT_VERSION).then_some(version)
}

/// Whether two superblocks (primary, replica) differ only as an interrupted upgrade
/// leaves them: the replica already of the newer version, the primary of the older one
/// or torn on its way there (version written, checksum not yet), all else alike.
pub fn differ_in_version_only(primary: &[u8], replica: &[u8]) -> bool {
    if primary.len() < SB_LEN || replica.len() < SB_LEN {
        return false;
    }
    let outside = |i: usize| {
        !(SB_VERSION_OFF..SB_VERSION_OFF + 4).contains(&i) && !(SB_CSUM_OFF..SB_LEN).contains(&i)
    };
    let same_rest = (0..primary.len().min(replica.len()))
        .filter(|&i| outside(i))
        .all(|i| primary[i] == replica[i]);
    same_rest && get32(replica, SB_VERSION_OFF) >= get32(primary, SB_VERSION_OFF)
}

fn random_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    // SAFETY: getrandom fills at most id.len() bytes of a buffer we own.
    let n = unsafe { libc::getrandom(id.as_mut_ptr().cast(), id.len(), 0) };
    if n != id.len() as isize {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        id.copy_from_slice(&t.to_le_bytes());
    }
    id
}

/// Stores `v` little endian at `off` of `b` (a field helper shared by every on-region
/// structure, as are the three below).
pub fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Stores `v` little endian at `off` of `b`.
pub fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// The little-endian u64 at `off` of `b`.
pub fn get64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

/// The little-endian u32 at `off` of `b`.
pub fn get32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_round_trips_and_rejects_corruption() {
        let g = Geometry::new(64 << 20, None, 8).unwrap();
        assert!(g.pool_start > g.bitmap_start && g.bitmap_start > g.inode_start);
        let b = g.encode();
        assert_eq!(Geometry::decode(&b, 64 << 20).unwrap(), g);
        for i in 0..SB_LEN {
            let mut bad = b;
            bad[i] ^= 1;
            assert!(
                Geometry::decode(&bad, 64 << 20).is_err(),
                "flip at {i} accepted"
            );
        }
        assert!(
            Geometry::decode(&b, 32 << 20).is_err(),
            "larger than region accepted"
        );
        // A block count whose byte size overflows, checksum intact: refused, not
        // wrapped (found by fuzzing).
        let mut huge = g;
        huge.total_blocks = u64::MAX / 3;
        assert!(Geometry::decode(&huge.encode(), 64 << 20).is_err());
    }

    #[test]
    fn older_versions_read_and_newer_ones_are_refused_by_name() {
        let mut g = Geometry::new(64 << 20, None, 8).unwrap();
        g.version = 2;
        assert_eq!(Geometry::decode(&g.encode(), 64 << 20).unwrap().version, 2);
        g.version = 3;
        assert_eq!(Geometry::decode(&g.encode(), 64 << 20).unwrap().version, 3);
        g.version = 4;
        assert_eq!(Geometry::decode(&g.encode(), 64 << 20).unwrap().version, 4);
        g.version = FORMAT_VERSION + 1;
        let e = Geometry::decode(&g.encode(), 64 << 20).unwrap_err();
        assert!(
            e.contains("version 6") && e.contains("newer") && e.contains("to 5"),
            "{e}"
        );
        g.version = 1;
        let e = Geometry::decode(&g.encode(), 64 << 20).unwrap_err();
        assert!(e.contains("version 1") && e.contains("older"), "{e}");
    }

    #[test]
    fn tiny_regions_are_refused() {
        assert!(Geometry::new(64 * 1024, None, 8).is_err());
        assert!(Geometry::new(64 << 20, None, 0).is_err());
    }
}
