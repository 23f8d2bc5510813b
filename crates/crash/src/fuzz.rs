//! Fuzzing the on-region format: what the cargo-fuzz targets in `fuzz/` and the
//! corpus-replay test run.
//!
//! - [`mount_image`]: an arbitrary image — the input is a list of patches over a zeroed
//!   region ([`decode_patches`]), so real images encode compactly as seeds
//!   ([`encode_patches`]) and the fuzzer can still reach any byte.
//! - [`corrupt_field`]: a valid image (cleanly unmounted, or crashed with an open
//!   unlinked file) with one field of one structure — superblock, inode, log entry,
//!   log-page trailer, journal, completion record, mount state — set to a value drawn
//!   from the input, its checksum optionally recomputed so the value gets past the
//!   checksum to the code that interprets it.
//!
//! Both mount the image, read back everything, write, unmount and fsck. Neither may
//! panic, hang, or access the region out of bounds ([`MemPmem`] panics if it does). The
//! valid images are made by workload operations ([`sample_ops`]) and checked against
//! the reference model before they are corrupted.
//!
//! The field tables follow the layout documented in `fs` (`layout.rs`, `inode.rs`,
//! `log.rs`, `commit.rs`, `journal.rs`, `recovery.rs`, `engine`'s `record.rs`). They
//! steer the fuzzer; a table out of date makes it less sharp, never wrong.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use fs::layout::{unseal_log_word, Geometry, LogWord, BLOCK_SIZE, MOUNT_BLOCK};
use fs::{FileSystem, FormatOptions, MountOptions, OpenFlags};
use pmem::{MemPmem, Pmem};
use rand::RngCore;

use crate::model::Shadow;
use crate::ops::Op;

/// Bytes of a fuzzed region.
pub const FUZZ_REGION_BYTES: usize = 1 << 20;
/// Inodes of a fuzzed region (few, so a scan is quick).
const FUZZ_INODES: u64 = 64;
/// Bytes of a patch header: offset u32, length u16.
const PATCH_HEADER: usize = 6;
/// Directory entries and bytes at either end of each file that a read-back visits.
const READ_BACK_ENTRIES: usize = 4096;
const READ_BACK_BYTES: usize = 64 * 1024;
/// Zero bytes inside a run that [`encode_patches`] still keeps in one patch.
const MAX_ZERO_GAP: usize = 16;

/// Applies the patches in `input` to a zeroed region of [`FUZZ_REGION_BYTES`]: each
/// patch is a little-endian u32 offset (taken modulo the region), a u16 length, and
/// that many bytes (fewer if the input ends first).
pub fn decode_patches(input: &[u8]) -> Vec<u8> {
    let mut img = vec![0u8; FUZZ_REGION_BYTES];
    let mut at = 0;
    while at + PATCH_HEADER <= input.len() {
        let off =
            u32::from_le_bytes(input[at..at + 4].try_into().unwrap()) as usize % FUZZ_REGION_BYTES;
        let len = u16::from_le_bytes([input[at + 4], input[at + 5]]) as usize;
        at += PATCH_HEADER;
        let n = len.min(input.len() - at).min(FUZZ_REGION_BYTES - off);
        img[off..off + n].copy_from_slice(&input[at..at + n]);
        at += n;
    }
    img
}

/// Encodes an image as the patches of its non-zero runs: a seed for [`mount_image`].
pub fn encode_patches(img: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < img.len() {
        if img[i] == 0 {
            i += 1;
            continue;
        }
        let start = i;
        let mut end = i;
        while i < img.len() && i - end <= MAX_ZERO_GAP && i - start < u16::MAX as usize {
            if img[i] != 0 {
                end = i + 1;
            }
            i += 1;
        }
        out.extend_from_slice(&(start as u32).to_le_bytes());
        out.extend_from_slice(&((end - start) as u16).to_le_bytes());
        out.extend_from_slice(&img[start..end]);
        i = end;
    }
    out
}

/// Mounts `image` and, if that works, reads everything back, writes a file, unmounts;
/// then runs fsck. Results are ignored: only panics, hangs and stray accesses count.
pub fn mount_and_check(image: Vec<u8>) {
    let pm = Arc::new(MemPmem::from_image(image));
    if let Ok((fs, _)) = FileSystem::mount(pm.clone() as Arc<dyn Pmem>, MountOptions::default()) {
        read_back(&fs);
        if let Ok(fd) = fs.open(
            crate::oracle::PROBE,
            OpenFlags::CREAT | OpenFlags::WRONLY,
            0o600,
        ) {
            let _ = fs.write(fd, &[0x5A; 5000]);
            let _ = fs.close(fd);
        }
        let _ = fs.rename("/a", "/moved");
        let _ = fs.unlink("/moved");
        let _ = fs.unmount();
    }
    let _ = fs::fsck::check(&*pm);
}

/// Walks the namespace as a reader would, within bounds: a corrupt image may claim
/// files of terabytes (sparse, so legitimate to the file system) or huge directories.
fn read_back(fs: &FileSystem) {
    let mut dirs = vec![String::from("/")];
    let mut visited = 0;
    while let Some(dir) = dirs.pop() {
        let Ok(list) = fs.readdir(&dir) else {
            continue;
        };
        for ent in list {
            visited += 1;
            if visited > READ_BACK_ENTRIES {
                return;
            }
            let path = format!("{}/{}", dir.trim_end_matches('/'), ent.name);
            let Ok(st) = fs.lstat(&path) else {
                continue;
            };
            match st.kind {
                fs::FileKind::Dir => dirs.push(path),
                fs::FileKind::Symlink => {
                    let _ = fs.readlink(&path);
                    let _ = fs.stat(&path);
                }
                fs::FileKind::File => {
                    if let Ok(fd) = fs.open(&path, OpenFlags::RDONLY, 0) {
                        let mut buf = vec![0u8; READ_BACK_BYTES];
                        let _ = fs.pread(fd, &mut buf, 0);
                        let _ =
                            fs.pread(fd, &mut buf, st.size.saturating_sub(READ_BACK_BYTES as u64));
                        let _ = fs.close(fd);
                    }
                }
                // FIFOs, sockets and devices hold no data to read back.
                _ => {}
            }
        }
    }
}

/// The arbitrary-image target.
pub fn mount_image(input: &[u8]) {
    mount_and_check(decode_patches(input));
}

/// A field of an on-region structure: `width` bytes at `off`, and the checksum that
/// covers it, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// Offset in the region.
    pub off: u64,
    /// Bytes.
    pub width: u8,
    /// The checksum that covers it.
    pub csum: Option<Csum>,
}

/// A CRC-32C stored at `at` over `start..end`, computed with its own four bytes zeroed
/// when they lie inside the range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Csum {
    /// First byte covered.
    pub start: u64,
    /// End of the bytes covered.
    pub end: u64,
    /// Where the checksum is stored.
    pub at: u64,
}

impl Csum {
    /// Recomputes the checksum over `img`'s bytes as they are now and stores it.
    pub fn fix(&self, img: &mut [u8]) {
        let (s, e, at) = (self.start as usize, self.end as usize, self.at as usize);
        let mut data = img[s..e].to_vec();
        if (s..e).contains(&at) {
            data[at - s..at - s + 4].fill(0);
        }
        let c = crc32c::crc32c(&data);
        img[at..at + 4].copy_from_slice(&c.to_le_bytes());
    }
}

/// A valid image to corrupt and the fields found in it.
pub struct Target {
    /// The image.
    pub image: Vec<u8>,
    /// Its fields.
    pub fields: Vec<Field>,
}

/// The valid images [`corrupt_field`] starts from: one cleanly unmounted, one left as
/// a crash leaves it (an unlinked file still open, allocator not saved).
pub fn targets() -> &'static [Target] {
    static T: OnceLock<Vec<Target>> = OnceLock::new();
    T.get_or_init(|| {
        [true, false]
            .into_iter()
            .map(|clean| {
                let image = sample_image(clean);
                let fields = fields_of(&image);
                Target { image, fields }
            })
            .collect()
    })
}

/// The operations that make the sample images: every kind of inode and entry, a file
/// with a hole, a hard link, a renamed and truncated file, and (last) an unlinked file
/// still open in slot 0.
pub fn sample_ops() -> Vec<Op> {
    let s = |v: &str| v.to_string();
    let write = |path: &str, off, len, fill| Op::Write {
        path: s(path),
        off,
        len,
        fill,
    };
    vec![
        Op::Mkdir {
            path: s("/d"),
            mode: 0o755,
        },
        Op::Create {
            path: s("/a"),
            mode: 0o644,
        },
        write("/a", 0, 5000, 1),
        write("/a", 100, 30, 2),
        Op::Create {
            path: s("/d/b"),
            mode: 0o644,
        },
        write("/d/b", 8192, 300, 3),
        Op::Link {
            old: s("/a"),
            new: s("/d/a2"),
        },
        Op::Symlink {
            target: s("/d/b"),
            path: s("/s"),
        },
        Op::Rename {
            old: s("/d/b"),
            new: s("/c"),
        },
        Op::Chmod {
            path: s("/c"),
            mode: 0o600,
        },
        Op::Truncate {
            path: s("/c"),
            len: 8200,
        },
        Op::Create {
            path: s("/gone"),
            mode: 0o644,
        },
        write("/gone", 0, 10, 4),
        Op::Open {
            slot: 0,
            path: s("/gone"),
        },
        Op::Unlink { path: s("/gone") },
    ]
}

/// A small file system made by [`sample_ops`], checked against the model before it is
/// unmounted (`clean`, the open file closed first) or abandoned as a crash leaves it.
pub fn sample_image(clean: bool) -> Vec<u8> {
    let pm = Arc::new(MemPmem::new(FUZZ_REGION_BYTES));
    let opts = FormatOptions {
        inodes: Some(FUZZ_INODES),
        channels: Some(2),
    };
    FileSystem::format(&*pm, &opts).expect("format");
    let (fs, _) =
        FileSystem::mount(pm.clone() as Arc<dyn Pmem>, MountOptions::default()).expect("mount");
    let (mut model, mut fds) = (Shadow::new(), HashMap::new());
    for op in sample_ops() {
        op.apply(&mut model)
            .unwrap_or_else(|e| panic!("the model refuses {op}: errno {e}"));
        op.run(&fs, &mut fds)
            .unwrap_or_else(|e| panic!("{op}: {e}"));
    }
    let found = crate::oracle::snapshot_of(&fs).expect("read back");
    assert_eq!(
        found,
        model.snapshot(),
        "the sample image differs from the model"
    );
    if clean {
        Op::Close { slot: 0 }.run(&fs, &mut fds).expect("close");
        fs.unmount().expect("unmount");
    } else {
        fs.abandon();
    }
    Arc::try_unwrap(pm)
        .expect("region still shared")
        .into_image()
}

fn get64(img: &[u8], off: u64) -> u64 {
    u64::from_le_bytes(img[off as usize..off as usize + 8].try_into().unwrap())
}

/// Log-page layout (see `fs`'s `log.rs` and `commit.rs`).
const SLOT: u64 = 64;
const TRAILER_OFF: u64 = BLOCK_SIZE - SLOT;
/// Superblock bytes covered by its checksum, and where the checksum is.
const SB_CSUM_OFF: u64 = 96;
/// Inode record: checksummed bytes and checksum.
const INODE_CSUM_START: u64 = 24;
const INODE_CSUM_OFF: u64 = 56;
/// Bytes of a journal header before its records.
const JOURNAL_RECORDS_OFF: u64 = 16;
/// Journal records a corruption may touch.
const JOURNAL_RECORDS_TOUCHED: u64 = 4;

/// A field no checksum covers.
fn plain(off: u64, width: u8) -> Field {
    Field {
        off,
        width,
        csum: None,
    }
}

/// Every field of every structure in a valid image.
pub fn fields_of(img: &[u8]) -> Vec<Field> {
    let pm = MemPmem::from_image(img.to_vec());
    let Ok((geo, _)) = Geometry::read(&pm) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    superblock_fields(&mut out);
    // Completion records: counter, magic, channel, version.
    for c in 0..geo.channels {
        let r = geo.records_off() + c * 64;
        out.extend([
            plain(r, 8),
            plain(r + 8, 8),
            plain(r + 16, 4),
            plain(r + 20, 4),
        ]);
    }
    // Mount state: clean word, bitmap checksum, free count; a byte of the bitmap.
    let m = MOUNT_BLOCK * BLOCK_SIZE;
    out.extend([plain(m, 8), plain(m + 8, 4), plain(m + 16, 8)]);
    out.push(plain(geo.bitmap_off() + geo.pool_start / 8, 1));
    // Journals: state, count, checksum, the first records.
    for j in 0..geo.journals.min(2) {
        let b = geo.journal_off(j);
        out.extend([plain(b, 8), plain(b + 8, 4), plain(b + 12, 4)]);
        for r in 0..JOURNAL_RECORDS_TOUCHED {
            let at = b + JOURNAL_RECORDS_OFF + 16 * r;
            out.extend([plain(at, 8), plain(at + 8, 8)]);
        }
    }
    inode_fields(img, &geo, &mut out);
    out
}

/// Both superblocks: 4-byte version and block size, then 8-byte fields, then the id.
fn superblock_fields(out: &mut Vec<Field>) {
    for sb in [0, BLOCK_SIZE] {
        let csum = Some(Csum {
            start: sb,
            end: sb + SB_CSUM_OFF,
            at: sb + SB_CSUM_OFF,
        });
        for (off, width) in [(0, 8), (8, 4), (12, 4)]
            .into_iter()
            .chain((16..80).step_by(8).map(|o| (o, 8)))
            .chain([(80, 8), (88, 8), (96, 4)])
        {
            out.push(Field {
                off: sb + off,
                width,
                csum,
            });
        }
    }
}

/// Inodes in use (and one free slot), their logs' trailers and entries.
fn inode_fields(img: &[u8], geo: &Geometry, out: &mut Vec<Field>) {
    let mut free_slot_done = false;
    for ino in 1..geo.inodes {
        let base = geo.inode_off(ino);
        let used = get64(img, base) != 0;
        if !used && free_slot_done {
            continue;
        }
        free_slot_done |= !used;
        let csum = Some(Csum {
            start: base + INODE_CSUM_START,
            end: base + INODE_CSUM_OFF,
            at: base + INODE_CSUM_OFF,
        });
        out.extend([plain(base, 8), plain(base + 8, 8), plain(base + 16, 8)]);
        for (off, width) in [
            (24, 8),
            (32, 4),
            (36, 4),
            (40, 4),
            (44, 4),
            (48, 8),
            (56, 4),
        ] {
            out.push(Field {
                off: base + off,
                width,
                csum,
            });
        }
        if used {
            let word = |which, at| unseal_log_word(ino, which, get64(img, at)).unwrap_or(0);
            log_fields(
                img,
                geo,
                word(LogWord::Head, base + 8),
                word(LogWord::Tail, base + 16),
                out,
            );
        }
    }
}

fn log_fields(img: &[u8], geo: &Geometry, head: u64, tail: u64, out: &mut Vec<Field>) {
    let mut page = head;
    let mut hops = 0;
    while page != 0 && geo.is_pool_block_off(page) && hops < geo.pool_blocks() {
        hops += 1;
        let t = page + TRAILER_OFF;
        for k in 0..4 {
            out.push(Field {
                off: t + 8 * k,
                width: 8,
                csum: None,
            });
        }
        let end = if tail - tail % BLOCK_SIZE == page {
            tail % BLOCK_SIZE / SLOT
        } else {
            get64(img, t + 24).min(TRAILER_OFF / SLOT)
        };
        let mut slot = 0;
        while slot < end {
            let at = page + slot * SLOT;
            let slots = (img[at as usize + 1] as u64).max(1);
            let csum = Some(Csum {
                start: at,
                end: (at + slots * SLOT).min(page + TRAILER_OFF),
                at: at + 4,
            });
            for (off, width) in [(0, 1), (1, 1), (2, 2), (4, 4)]
                .into_iter()
                .chain((8..64).step_by(8).map(|o| (o, 8)))
            {
                out.push(Field {
                    off: at + off,
                    width,
                    csum,
                });
            }
            slot += slots;
        }
        if tail - tail % BLOCK_SIZE == page {
            break;
        }
        page = get64(img, t);
    }
}

/// Bytes of input one corruption takes: target, field, value kind, value, flags.
pub const CORRUPTION_BYTES: usize = 1 + 2 + 1 + 8 + 1;

/// Applies the corruptions encoded in `input` ([`CORRUPTION_BYTES`] each; a partial
/// trailing one is ignored) to one of the valid [`targets`] and returns the image.
pub fn corrupt(input: &[u8]) -> Vec<u8> {
    let targets = targets();
    let Some(&which) = input.first() else {
        return targets[0].image.clone();
    };
    let t = &targets[which as usize % targets.len()];
    let mut img = t.image.clone();
    for c in input[1..].chunks_exact(CORRUPTION_BYTES - 1) {
        if t.fields.is_empty() {
            break;
        }
        let f = t.fields[u16::from_le_bytes([c[0], c[1]]) as usize % t.fields.len()];
        let raw = u64::from_le_bytes(c[3..11].try_into().unwrap());
        let (off, w) = (f.off as usize, f.width as usize);
        let mut old = [0u8; 8];
        old[..w].copy_from_slice(&img[off..off + w]);
        let old = u64::from_le_bytes(old);
        let value = match c[2] % 8 {
            0 => 0,
            1 => u64::MAX,
            2 => old.wrapping_add(raw % 3 + 1),
            3 => old.wrapping_sub(raw % 3 + 1),
            4 => old ^ (1 << (raw % (8 * w as u64))),
            5 => (raw % (FUZZ_REGION_BYTES as u64 / BLOCK_SIZE)) * BLOCK_SIZE,
            6 => (raw % FUZZ_REGION_BYTES as u64) & !7,
            _ => raw,
        };
        img[off..off + w].copy_from_slice(&value.to_le_bytes()[..w]);
        if c[11] & 1 == 0 {
            if let Some(cs) = f.csum {
                cs.fix(&mut img);
            }
        }
    }
    img
}

/// The structure-aware target.
pub fn corrupt_field(input: &[u8]) {
    mount_and_check(corrupt(input));
}

/// `n` seeded corruption inputs of one field each, for runs without a fuzzer.
pub fn seeded_corruptions(seed: u64, n: usize) -> impl Iterator<Item = Vec<u8>> {
    let mut rng = crate::rng::seeded(seed);
    (0..n).map(move |_| {
        let mut input = vec![0u8; CORRUPTION_BYTES];
        rng.fill_bytes(&mut input);
        input
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_round_trip_a_real_image() {
        let img = sample_image(true);
        let enc = encode_patches(&img);
        assert!(enc.len() < img.len() / 4, "{} bytes", enc.len());
        assert_eq!(decode_patches(&enc), img);
    }

    #[test]
    fn the_valid_targets_mount_and_have_fields() {
        for t in targets() {
            assert!(t.fields.len() > 100, "{} fields", t.fields.len());
            let pm = Arc::new(MemPmem::from_image(t.image.clone()));
            let (fs, _) = FileSystem::mount(pm as Arc<dyn Pmem>, MountOptions::default()).unwrap();
            assert!(fs.stat("/d/a2").is_ok());
        }
    }

    #[test]
    fn an_unfixed_checksum_keeps_the_corruption_visible() {
        let t = &targets()[0];
        let input = [0u8, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let img = corrupt(&input);
        assert_ne!(img, t.image);
        assert_eq!(&img[..8], &[0xFF; 8]);
    }
}
