//! The data seal: a 64-bit hash of whole cache lines, computed while they are copied.
//!
//! A file system that commits a write by a log entry alone — one fence for the data
//! and the entry, no separate commit store — cannot order the entry after the data:
//! after a crash the entry may be durable while some data line is not. The entry then
//! carries the seal of the data it names, and recovery recomputes the seal over what
//! is durable and keeps the entry only if the two agree.
//!
//! The hash is xxHash3's accumulation step over 64-byte stripes: eight 64-bit lanes,
//! each adding the 32×32-bit product of the halves of (word XOR key) and the word
//! itself. The key of stripe `i` is a fixed key plus `i` times a constant, so moving
//! or swapping lines changes the result. [`Seal::update`] is the reference;
//! [`crate::Region`] computes the same value in the registers of its non-temporal
//! copy ([`copy_nt_sealed_avx512`]), which is what makes the seal nearly free.
//!
//! The sixteen lanes (eight products, eight plain sums) and the stripe count are then
//! finished into 64 bits, in one of two ways ([`Finish`]), each named by the log entry
//! kind that carries it, so that an image keeps verifying under the finish it was
//! written with:
//!
//! - [`Seal::finish_v1`] (format version 4's sealed write entry): one chain of 17
//!   splitmix finalisers, each lane folded into the running hash in turn. Every step
//!   waits on the one before: about 220 dependent cycles.
//! - [`Seal::finish`] (format version 5's sealed write entry): each lane is mixed on its
//!   own with a key of its own, `mix(lane ^ key)`, the sixteen results are rotated by
//!   lane and folded by XOR, and one last mix takes the fold and the stripe count. The
//!   sixteen mixes do not depend on each other, so the CPU runs them side by side:
//!   the dependent path is two mixes and the fold.
//!
//! Both change with any changed, moved or swapped line and with the length (the tests
//! below check each).

/// Bytes per stripe (one cache line).
pub const STRIPE: usize = 64;

const KEY: [u64; 8] = [
    0xbe4b_a423_396c_feb8,
    0x1cad_21f7_2c81_017c,
    0xdb97_9083_e96d_d4de,
    0x1f67_b3b7_a4a4_4072,
    0x78e5_c0cc_4ee6_79cb,
    0x2172_ffcc_7dd0_5a82,
    0x8e24_4c2d_e1a0_5c38,
    0xf8b3_4ea7_a08b_3d96,
];
const STEP: u64 = 0x9e37_79b9_7f4a_7c15;
/// [`Seal::finish`]'s keys: the product lanes' first, then the sum lanes'.
const LANE_KEY: [u64; 16] = [
    0xf893_a2ee_fb32_555e,
    0x71c1_8690_ee42_c90b,
    0x71bb_54d8_d101_b5b9,
    0xc34d_0bff_9015_0280,
    0xe099_ec6c_d736_3ca5,
    0x85e7_bb0f_1227_8575,
    0x4917_18de_357e_3da8,
    0xcb43_5c8e_7461_6796,
    0x6775_dc77_0156_4f61,
    0x9afc_d44d_14cf_8bfe,
    0x7476_cf8a_4baa_5dc0,
    0x87b3_41d6_90d7_a28a,
    0x6f9b_6dae_6f4c_57a8,
    0x2ac2_ce17_a579_4a3b,
    0xa534_a6a6_b7fd_0b63,
    0xd0ba_d0da_572b_aaf1,
];

/// How a seal's lanes are finished into 64 bits (see the module docs): each sealed
/// write entry kind names one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// [`Seal::finish_v1`]: format version 4's sealed write entries.
    V1,
    /// [`Seal::finish`]: format version 5's sealed write entries.
    V2,
}

/// A seal being computed: feed whole stripes in order, then [`Seal::finish`] (or
/// [`Seal::finish_v1`] for an entry of format version 4).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Seal {
    acc: [u64; 8],
    sum: [u64; 8],
    stripes: u64,
}

impl Seal {
    /// An empty seal.
    pub fn new() -> Seal {
        Seal::default()
    }

    /// Adds `bytes`, a whole number of stripes, after what was added before.
    ///
    /// # Panics
    /// If `bytes.len()` is not a multiple of [`STRIPE`].
    pub fn update(&mut self, bytes: &[u8]) {
        assert!(
            bytes.len().is_multiple_of(STRIPE),
            "seal of a partial stripe"
        );
        for stripe in bytes.chunks_exact(STRIPE) {
            let add = self.stripes.wrapping_mul(STEP);
            for (j, w) in stripe.chunks_exact(8).enumerate() {
                let w = u64::from_le_bytes(w.try_into().unwrap());
                let x = w ^ KEY[j].wrapping_add(add);
                self.acc[j] = self.acc[j].wrapping_add((x & 0xffff_ffff) * (x >> 32));
                self.sum[j] = self.sum[j].wrapping_add(w);
            }
            self.stripes += 1;
        }
    }

    /// The 64-bit seal of everything added, finished as `how` says.
    pub fn finish_as(&self, how: Finish) -> u64 {
        match how {
            Finish::V1 => self.finish_v1(),
            Finish::V2 => self.finish(),
        }
    }

    /// The 64-bit seal of everything added (format version 5): each lane mixed on its
    /// own, the results folded, one final mix (see the module docs).
    pub fn finish(&self) -> u64 {
        let mut m = [0u64; 16];
        for j in 0..8 {
            m[j] = mix(self.acc[j] ^ LANE_KEY[j]).rotate_left(j as u32 * 8);
            m[8 + j] = mix(self.sum[j] ^ LANE_KEY[8 + j]).rotate_left(j as u32 * 8 + 4);
        }
        // A tree, so the fold adds four steps to the path, not sixteen.
        for half in [8, 4, 2, 1] {
            for j in 0..half {
                m[j] ^= m[j + half];
            }
        }
        mix(self.stripes.wrapping_mul(STEP) ^ m[0])
    }

    /// The 64-bit seal of everything added as format version 4 finished it: one chain
    /// of mixes through every lane in turn (see the module docs).
    pub fn finish_v1(&self) -> u64 {
        let mut h = mix(self.stripes.wrapping_mul(STEP));
        for j in 0..8 {
            h = mix(h ^ self.acc[j]);
            h = mix(h ^ self.sum[j].rotate_left(j as u32 * 8 + 1));
        }
        h
    }
}

/// The seal of `bytes` (a whole number of stripes), finished by [`Seal::finish`].
pub fn seal_of(bytes: &[u8]) -> u64 {
    seal_as(bytes, Finish::V2)
}

/// The seal of `bytes` (a whole number of stripes), finished as `how` says.
pub fn seal_as(bytes: &[u8], how: Finish) -> u64 {
    let mut s = Seal::new();
    s.update(bytes);
    s.finish_as(how)
}

/// splitmix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Copies `len` bytes from `src` to `dst` with AVX-512 non-temporal stores, adding
/// them to `seal` as [`Seal::update`] would. Issues no fence.
///
/// # Safety
/// AVX-512F present; `dst` 64-byte aligned; `len` a multiple of 64; `src` readable
/// and `dst` writable for `len` bytes, not overlapping.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub unsafe fn copy_nt_sealed_avx512(dst: *mut u8, src: *const u8, len: usize, seal: &mut Seal) {
    use std::arch::x86_64 as arch;
    // SAFETY: the seal's arrays are 64 bytes each (unaligned loads and stores); every
    // offset i + 64 <= len per the caller, and dst + i is 64-byte aligned.
    unsafe {
        let mut acc = arch::_mm512_loadu_si512(seal.acc.as_ptr() as *const _);
        let mut sum = arch::_mm512_loadu_si512(seal.sum.as_ptr() as *const _);
        let step = arch::_mm512_set1_epi64(STEP as i64);
        let key = arch::_mm512_loadu_si512(KEY.as_ptr() as *const _);
        let first = arch::_mm512_set1_epi64(seal.stripes.wrapping_mul(STEP) as i64);
        let mut kv = arch::_mm512_add_epi64(key, first);
        let mut i = 0;
        while i < len {
            let a = arch::_mm512_loadu_si512(src.add(i) as *const _);
            arch::_mm512_stream_si512(dst.add(i) as *mut _, a);
            let x = arch::_mm512_xor_si512(a, kv);
            let p = arch::_mm512_mul_epu32(x, arch::_mm512_srli_epi64::<32>(x));
            acc = arch::_mm512_add_epi64(acc, p);
            sum = arch::_mm512_add_epi64(sum, a);
            kv = arch::_mm512_add_epi64(kv, step);
            i += STRIPE;
        }
        arch::_mm512_storeu_si512(seal.acc.as_mut_ptr() as *mut _, acc);
        arch::_mm512_storeu_si512(seal.sum.as_mut_ptr() as *mut _, sum);
    }
    seal.stripes += (len / STRIPE) as u64;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(n: usize, salt: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31) ^ salt ^ (i >> 8) as u8)
            .collect()
    }

    #[test]
    fn any_changed_or_moved_line_changes_the_seal() {
        for how in [Finish::V1, Finish::V2] {
            let seal = |b: &[u8]| seal_as(b, how);
            let a = pattern(4096, 7);
            let base = seal(&a);
            for line in 0..64 {
                let mut b = a.clone();
                b[line * 64 + (line % 64)] ^= 1;
                assert_ne!(seal(&b), base, "{how:?}: line {line} flipped");
                let mut z = a.clone();
                z[line * 64..line * 64 + 64].fill(0);
                assert_ne!(seal(&z), base, "{how:?}: line {line} zeroed");
            }
            let mut swapped = a.clone();
            swapped[..64].copy_from_slice(&a[640..704]);
            swapped[640..704].copy_from_slice(&a[..64]);
            assert_ne!(seal(&swapped), base, "{how:?}: two lines swapped");
            let mut words = a.clone();
            words[..8].copy_from_slice(&a[8..16]);
            words[8..16].copy_from_slice(&a[..8]);
            assert_ne!(seal(&words), base, "{how:?}: two words of a line swapped");
            assert_ne!(seal(&vec![0; 4096]), seal(&vec![0; 8192]), "{how:?}");
            assert_ne!(seal(&a[..4032]), base, "{how:?}: one line shorter");
        }
    }

    /// The seals of `pattern(4096, 7)`.
    const V1_OF_PATTERN: u64 = 0x6d01_b1ca_82ad_44a3;
    const V2_OF_PATTERN: u64 = 0x2186_b6d9_94aa_af86;

    #[test]
    fn the_two_finishes_differ_and_keep_the_values_images_hold() {
        let a = pattern(4096, 7);
        assert_ne!(seal_as(&a, Finish::V1), seal_as(&a, Finish::V2));
        // Values written to images: neither may ever change.
        assert_eq!(seal_as(&a, Finish::V1), V1_OF_PATTERN);
        assert_eq!(seal_of(&a), V2_OF_PATTERN);
    }

    #[test]
    fn pieces_seal_as_the_whole() {
        let a = pattern(3 * 4096, 3);
        let mut s = Seal::new();
        s.update(&a[..4096]);
        s.update(&a[4096..]);
        assert_eq!(s.finish(), seal_of(&a));
        assert_eq!(s.finish_v1(), seal_as(&a, Finish::V1));
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_fused_copy_seals_as_the_reference() {
        if !crate::persist::features().avx512f {
            return;
        }
        let src = pattern(2 * 4096 + 128, 9);
        let mut dst = vec![0u8; src.len() + 64];
        let off = dst.as_ptr().align_offset(64);
        let mut s = Seal::new();
        s.update(&src[..64]);
        // SAFETY: AVX-512F checked; dst + off is 64-byte aligned and has room.
        unsafe {
            copy_nt_sealed_avx512(
                dst.as_mut_ptr().add(off),
                src[64..].as_ptr(),
                src.len() - 64,
                &mut s,
            )
        };
        crate::persist::fence();
        assert_eq!(&dst[off..off + src.len() - 64], &src[64..]);
        assert_eq!(s.finish(), seal_of(&src));
        assert_eq!(s.finish_v1(), seal_as(&src, Finish::V1));
    }
}
