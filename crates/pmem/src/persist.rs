//! Persistence primitives chosen at run time from CPUID: cache-line write-back, store
//! fence and non-temporal copies that are correct for any alignment.
//!
//! These functions work on raw pointers; [`crate::Region`] calls them after checking
//! bounds. They are public so that benchmarks and tests can exercise each instruction
//! variant the CPU offers, not only the best one.

use std::sync::OnceLock;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64 as arch;

/// Size of a cache line, the unit the hardware writes back.
pub const CACHE_LINE: usize = 64;

/// Below this many bytes a persistent copy uses ordinary stores plus write-back: the
/// non-temporal path's head/tail handling costs more than it saves (PMDK's
/// `PMEM_MOVNT_THRESHOLD` makes the same trade).
pub const NT_MIN_BYTES: usize = 256;

/// A cache-line write-back instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushKind {
    /// Write back, keep the line valid (best for data read again soon).
    Clwb,
    /// Write back and invalidate, weakly ordered (needs a fence).
    Clflushopt,
    /// Write back and invalidate, strongly ordered (slow; every x86-64 has it).
    Clflush,
}

/// A family of non-temporal store instructions used for bulk copies into the region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyKind {
    /// 64-byte `vmovntdq` (AVX-512F).
    Avx512,
    /// 32-byte `vmovntdq` (AVX2).
    Avx2,
    /// 16-byte `movntdq` (SSE2; every x86-64 has it).
    Sse2,
}

impl FlushKind {
    /// Lower-case instruction name.
    pub fn name(self) -> &'static str {
        match self {
            FlushKind::Clwb => "clwb",
            FlushKind::Clflushopt => "clflushopt",
            FlushKind::Clflush => "clflush",
        }
    }
}

impl CopyKind {
    /// Lower-case name of the instruction set.
    pub fn name(self) -> &'static str {
        match self {
            CopyKind::Avx512 => "avx512",
            CopyKind::Avx2 => "avx2",
            CopyKind::Sse2 => "sse2",
        }
    }
}

/// The CPU features easyio cares about, read once from CPUID.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuFeatures {
    /// Cache-line write-back that keeps the line cached.
    pub clwb: bool,
    /// Optimised cache-line flush (unordered with other flushes).
    pub clflushopt: bool,
    /// 512-bit vector instructions (non-temporal copies 64 bytes at a time).
    pub avx512f: bool,
    /// 256-bit vector instructions.
    pub avx2: bool,
    /// 64-byte direct store, used to submit to dedicated DSA work queues.
    pub movdir64b: bool,
    /// Enqueue command, used to submit to shared DSA work queues.
    pub enqcmd: bool,
    /// Memory protection keys for user pages (`pkey_mprotect`), and the kernel's
    /// enabling of them (OSPKE): both are needed to use them.
    pub pku: bool,
}

/// The features of the CPU we run on.
pub fn features() -> &'static CpuFeatures {
    static FEATURES: OnceLock<CpuFeatures> = OnceLock::new();
    FEATURES.get_or_init(detect)
}

fn detect() -> CpuFeatures {
    // Structured extended feature flags: CPUID leaf 7, sub-leaf 0 (Intel SDM vol. 2A,
    // table 3-8): EBX bit 23 CLFLUSHOPT, bit 24 CLWB; ECX bit 3 PKU, bit 4 OSPKE, bit 28
    // MOVDIR64B, bit 29 ENQCMD.
    let leaf7 = arch::__cpuid_count(7, 0);
    let bit = |reg: u32, n: u32| reg & (1 << n) != 0;
    CpuFeatures {
        clwb: bit(leaf7.ebx, 24),
        clflushopt: bit(leaf7.ebx, 23),
        avx512f: std::arch::is_x86_feature_detected!("avx512f"),
        avx2: std::arch::is_x86_feature_detected!("avx2"),
        movdir64b: bit(leaf7.ecx, 28),
        enqcmd: bit(leaf7.ecx, 29),
        pku: bit(leaf7.ecx, 3) && bit(leaf7.ecx, 4),
    }
}

/// Every write-back instruction this CPU has, best first.
pub fn available_flushes() -> Vec<FlushKind> {
    let f = features();
    let mut kinds = Vec::new();
    if f.clwb {
        kinds.push(FlushKind::Clwb);
    }
    if f.clflushopt {
        kinds.push(FlushKind::Clflushopt);
    }
    kinds.push(FlushKind::Clflush);
    kinds
}

/// Every non-temporal copy variant this CPU has, best first.
pub fn available_copies() -> Vec<CopyKind> {
    let f = features();
    let mut kinds = Vec::new();
    if f.avx512f {
        kinds.push(CopyKind::Avx512);
    }
    if f.avx2 {
        kinds.push(CopyKind::Avx2);
    }
    kinds.push(CopyKind::Sse2);
    kinds
}

/// The write-back instruction used by default.
pub fn best_flush() -> FlushKind {
    static BEST: OnceLock<FlushKind> = OnceLock::new();
    *BEST.get_or_init(|| available_flushes()[0])
}

/// The copy variant used by default.
pub fn best_copy() -> CopyKind {
    static BEST: OnceLock<CopyKind> = OnceLock::new();
    *BEST.get_or_init(|| available_copies()[0])
}

/// Writes back every cache line overlapping `ptr..ptr + len` with `kind`.
///
/// # Safety
/// `kind` must be supported by the CPU (see [`available_flushes`]) and the range must
/// lie inside one mapping owned by the caller.
pub unsafe fn flush_with(kind: FlushKind, ptr: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    let start = ptr as usize & !(CACHE_LINE - 1);
    let end = ptr as usize + len;
    let mut line = start;
    while line < end {
        // SAFETY: the caller guarantees the line is mapped and the instruction exists;
        // write-back changes no memory contents.
        unsafe {
            match kind {
                FlushKind::Clwb => {
                    std::arch::asm!("clwb [{}]", in(reg) line, options(nostack, preserves_flags))
                }
                FlushKind::Clflushopt => std::arch::asm!(
                    "clflushopt [{}]", in(reg) line, options(nostack, preserves_flags)
                ),
                FlushKind::Clflush => arch::_mm_clflush(line as *const u8),
            }
        }
        line += CACHE_LINE;
    }
}

/// Writes back the lines of a range with the best instruction.
///
/// # Safety
/// The range must lie inside one mapping owned by the caller.
#[inline]
pub unsafe fn flush(ptr: *const u8, len: usize) {
    // SAFETY: best_flush() only returns an instruction the CPU has; the caller
    // guarantees the range.
    unsafe { flush_with(best_flush(), ptr, len) }
}

/// Store fence: orders earlier write-backs and non-temporal stores before later stores.
#[inline]
pub fn fence() {
    // SAFETY: sfence touches no memory; SSE is part of the x86-64 baseline.
    unsafe { arch::_mm_sfence() }
}

/// Copies `len` bytes from `src` to `dst` with non-temporal stores of family `kind`
/// (the unaligned head and tail with ordinary stores, then written back). Issues no
/// fence: the data is durable after the caller's next [`fence`].
///
/// # Safety
/// `kind` must be supported by the CPU (see [`available_copies`]); `src` must be
/// readable and `dst` writable for `len` bytes, and the two must not overlap.
pub unsafe fn copy_nt_with(kind: CopyKind, dst: *mut u8, src: *const u8, len: usize) {
    let whole_lines = (dst as usize | len) & (CACHE_LINE - 1) == 0;
    if len < NT_MIN_BYTES && !whole_lines {
        // SAFETY: ranges valid and disjoint per the caller.
        unsafe {
            std::ptr::copy_nonoverlapping(src, dst, len);
            flush(dst, len);
        }
        return;
    }
    let head = (CACHE_LINE - (dst as usize & (CACHE_LINE - 1))) & (CACHE_LINE - 1);
    let body = (len - head) & !(CACHE_LINE - 1);
    let tail = len - head - body;
    // SAFETY: head + body + tail == len, so every access stays inside the caller's
    // ranges; the body starts at a 64-byte aligned destination as the NT loops need.
    unsafe {
        if head > 0 {
            std::ptr::copy_nonoverlapping(src, dst, head);
            flush(dst, head);
        }
        let (bdst, bsrc) = (dst.add(head), src.add(head));
        match kind {
            CopyKind::Avx512 => nt_body_avx512(bdst, bsrc, body),
            CopyKind::Avx2 => nt_body_avx2(bdst, bsrc, body),
            CopyKind::Sse2 => nt_body_sse2(bdst, bsrc, body),
        }
        if tail > 0 {
            let (tdst, tsrc) = (bdst.add(body), bsrc.add(body));
            std::ptr::copy_nonoverlapping(tsrc, tdst, tail);
            flush(tdst, tail);
        }
    }
}

/// [`copy_nt_with`] using the best variant the CPU has.
///
/// # Safety
/// As for [`copy_nt_with`], minus the CPU requirement.
#[inline]
pub unsafe fn copy_nt(dst: *mut u8, src: *const u8, len: usize) {
    // SAFETY: best_copy() only returns a variant the CPU has; the rest is the caller's.
    unsafe { copy_nt_with(best_copy(), dst, src, len) }
}

/// Lines moved per loop iteration of the non-temporal bodies: four lines keep enough
/// stores in flight to fill the write-combining buffers.
const UNROLL_LINES: usize = 4;

/// # Safety
/// AVX-512F present; `dst` 64-byte aligned; `len` a multiple of 64; ranges valid.
#[target_feature(enable = "avx512f")]
unsafe fn nt_body_avx512(dst: *mut u8, src: *const u8, len: usize) {
    let mut i = 0;
    // SAFETY: every offset i + k*64 + 64 <= len; dst + i is 64-byte aligned.
    unsafe {
        while i + UNROLL_LINES * CACHE_LINE <= len {
            let a = arch::_mm512_loadu_si512(src.add(i) as *const _);
            let b = arch::_mm512_loadu_si512(src.add(i + 64) as *const _);
            let c = arch::_mm512_loadu_si512(src.add(i + 128) as *const _);
            let d = arch::_mm512_loadu_si512(src.add(i + 192) as *const _);
            arch::_mm512_stream_si512(dst.add(i) as *mut _, a);
            arch::_mm512_stream_si512(dst.add(i + 64) as *mut _, b);
            arch::_mm512_stream_si512(dst.add(i + 128) as *mut _, c);
            arch::_mm512_stream_si512(dst.add(i + 192) as *mut _, d);
            i += UNROLL_LINES * CACHE_LINE;
        }
        while i < len {
            let a = arch::_mm512_loadu_si512(src.add(i) as *const _);
            arch::_mm512_stream_si512(dst.add(i) as *mut _, a);
            i += CACHE_LINE;
        }
    }
}

/// # Safety
/// AVX2 present; `dst` 64-byte aligned; `len` a multiple of 64; ranges valid.
#[target_feature(enable = "avx2")]
unsafe fn nt_body_avx2(dst: *mut u8, src: *const u8, len: usize) {
    let mut i = 0;
    // SAFETY: every offset i + 32 <= len; dst + i is 32-byte aligned.
    unsafe {
        while i < len {
            let a = arch::_mm256_loadu_si256(src.add(i) as *const _);
            let b = arch::_mm256_loadu_si256(src.add(i + 32) as *const _);
            arch::_mm256_stream_si256(dst.add(i) as *mut _, a);
            arch::_mm256_stream_si256(dst.add(i + 32) as *mut _, b);
            i += CACHE_LINE;
        }
    }
}

/// # Safety
/// `dst` 64-byte aligned; `len` a multiple of 64; ranges valid. SSE2 is baseline.
unsafe fn nt_body_sse2(dst: *mut u8, src: *const u8, len: usize) {
    let mut i = 0;
    // SAFETY: every offset i + 16 <= len; dst + i is 16-byte aligned.
    unsafe {
        while i < len {
            for k in 0..4 {
                let v = arch::_mm_loadu_si128(src.add(i + 16 * k) as *const _);
                arch::_mm_stream_si128(dst.add(i + 16 * k) as *mut _, v);
            }
            i += CACHE_LINE;
        }
    }
}

/// Plain copy out of the region (reads are not made non-temporal: the data is about
/// to be used by the caller).
///
/// # Safety
/// `src` readable and `dst` writable for `len` bytes, not overlapping.
#[inline]
pub unsafe fn copy_out(dst: *mut u8, src: *const u8, len: usize) {
    // SAFETY: per the caller.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    use testkit::pattern;

    const MAX: usize = 4 << 20;

    /// Copies with `kind` between buffers offset by the given alignments and checks the
    /// result against `copy_from_slice`, including that no byte outside the
    /// destination range was touched.
    fn check_copy(kind: CopyKind, len: usize, src_align: usize, dst_align: usize) {
        let src = pattern(7, len + src_align);
        let mut dst = vec![0xA5u8; len + dst_align + 128];
        let mut expect = dst.clone();
        expect[dst_align..dst_align + len].copy_from_slice(&src[src_align..src_align + len]);
        // SAFETY: both ranges lie inside their vectors, which do not overlap; `kind`
        // comes from available_copies().
        unsafe {
            copy_nt_with(
                kind,
                dst.as_mut_ptr().add(dst_align),
                src.as_ptr().add(src_align),
                len,
            )
        };
        fence();
        assert!(
            dst == expect,
            "{kind:?} len {len} src+{src_align} dst+{dst_align}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]
        #[test]
        fn nt_copy_matches_memcpy(
            len in prop_oneof![0usize..=1024, 0usize..=65536, 0usize..=MAX],
            src_align in 0usize..128,
            dst_align in 0usize..128,
        ) {
            for kind in available_copies() {
                check_copy(kind, len, src_align, dst_align);
            }
        }
    }

    #[test]
    fn nt_copy_edges() {
        for kind in available_copies() {
            for len in [0, 1, 63, 64, 65, 255, 256, 257, 4095, 4096, 4097, MAX] {
                for (s, d) in [(0, 0), (1, 0), (0, 1), (63, 1), (17, 63)] {
                    check_copy(kind, len, s, d);
                }
            }
        }
    }

    #[test]
    fn copy_out_matches_memcpy() {
        let src = pattern(3, 70_000);
        let mut dst = vec![0u8; 70_000];
        // SAFETY: distinct vectors of 70 000 bytes.
        unsafe { copy_out(dst.as_mut_ptr().add(3), src.as_ptr().add(5), 69_990) };
        assert_eq!(dst[3..69_993], src[5..69_995]);
    }

    #[test]
    fn every_flush_instruction_runs_and_keeps_data() {
        let mut buf = pattern(9, 4096 + 64);
        let before = buf.clone();
        for kind in available_flushes() {
            // SAFETY: the range is inside `buf`; `kind` is one the CPU has.
            unsafe { flush_with(kind, buf.as_mut_ptr().add(3), 4096) };
            fence();
            assert_eq!(buf, before, "{kind:?} changed memory");
        }
        // Writes after a flush of each kind still land (clflush/clflushopt invalidate).
        buf[100] = 0;
        // SAFETY: inside `buf`.
        unsafe { flush(buf.as_ptr().add(100), 1) };
        assert_eq!(buf[100], 0);
    }

    #[test]
    fn detection_is_consistent() {
        let f = features();
        assert_eq!(available_flushes().contains(&FlushKind::Clwb), f.clwb);
        assert_eq!(available_copies().contains(&CopyKind::Avx512), f.avx512f);
        assert_eq!(*available_flushes().last().unwrap(), FlushKind::Clflush);
        assert_eq!(*available_copies().last().unwrap(), CopyKind::Sse2);
    }
}
