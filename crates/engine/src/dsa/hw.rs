//! Intel DSA descriptor and completion-record encoding, from the DSA architecture
//! specification (the same layout as Linux's `include/uapi/linux/idxd.h`).
//!
//! # Work descriptor (64 bytes, 64-byte aligned)
//!
//! | offset | size | field                                                            |
//! |--------|------|------------------------------------------------------------------|
//! | 0      | 4    | PASID (bits 19:0), reserved (30:20), privileged (31)             |
//! | 4      | 4    | flags (bits 23:0), opcode (31:24)                                |
//! | 8      | 8    | completion record address                                        |
//! | 16     | 8    | source address / fill pattern / descriptor list address (batch)  |
//! | 24     | 8    | destination address                                              |
//! | 32     | 4    | transfer size / descriptor count (batch)                         |
//! | 36     | 2    | completion interrupt handle                                      |
//! | 38     | 2    | reserved                                                         |
//! | 40     | 24   | operation-specific (zero for batch, memmove, memfill)            |
//!
//! # Completion record (32 bytes, 32-byte aligned)
//!
//! | offset | size | field                                                            |
//! |--------|------|------------------------------------------------------------------|
//! | 0      | 1    | status (bits 6:0; bit 7 set: the page fault was on a write)      |
//! | 1      | 1    | result                                                           |
//! | 2      | 2    | reserved                                                         |
//! | 4      | 4    | bytes completed / descriptors completed (batch)                  |
//! | 8      | 8    | fault address                                                    |
//! | 16     | 4    | invalid flags (bits 23:0), for status "invalid flags"            |
//! | 20     | 12   | operation-specific                                               |
//!
//! The device writes the status byte last; software polls it.

use std::sync::atomic::{AtomicU8, Ordering};

/// Bytes of a work descriptor, written to a portal in one 64-byte store.
pub const DESC_BYTES: usize = 64;
/// Bytes of a DSA completion record.
pub const COMPLETION_BYTES: usize = 32;
/// Alignment a completion record address must have.
pub const COMPLETION_ALIGN: u64 = 32;
/// Alignment of a batch's descriptor list.
pub const LIST_ALIGN: u64 = 64;

/// Operation codes.
pub mod opcode {
    /// No operation.
    pub const NOOP: u8 = 0x00;
    /// Batch: runs a list of descriptors.
    pub const BATCH: u8 = 0x01;
    /// Drain: completes after earlier descriptors of the queue.
    pub const DRAIN: u8 = 0x02;
    /// Memory move (copy).
    pub const MEMMOVE: u8 = 0x03;
    /// Memory fill with an 8-byte pattern.
    pub const MEMFILL: u8 = 0x04;
}

/// Descriptor flags (bits 23:0 of the second dword).
pub mod flags {
    /// Wait for earlier descriptors of the batch; skip if any of them failed.
    pub const FENCE: u32 = 1 << 0;
    /// Block on fault: wait for the OS to resolve page faults instead of failing.
    pub const BOF: u32 = 1 << 1;
    /// Completion record address valid.
    pub const CRAV: u32 = 1 << 2;
    /// Request a completion record (also on success).
    pub const RCR: u32 = 1 << 3;
    /// Request a completion interrupt.
    pub const RCI: u32 = 1 << 4;
    /// Completion record steering.
    pub const CRSTS: u32 = 1 << 5;
    /// Check result (compare operations).
    pub const CR: u32 = 1 << 7;
    /// Cache control: 1 allocates written lines in the LLC, 0 writes to memory.
    pub const CC: u32 = 1 << 8;
    /// Address 1 traffic class selector.
    pub const ADDR1_TCS: u32 = 1 << 9;
    /// Address 2 traffic class selector.
    pub const ADDR2_TCS: u32 = 1 << 10;
    /// Address 3 traffic class selector.
    pub const ADDR3_TCS: u32 = 1 << 11;
    /// Completion record traffic class selector.
    pub const CR_TCS: u32 = 1 << 12;
    /// Strict ordering of destination writes.
    pub const STORD: u32 = 1 << 13;
    /// Destination readback: the writes are durable before completion is reported.
    pub const DRDBK: u32 = 1 << 14;
    /// Destination steering.
    pub const DSTS: u32 = 1 << 15;
    /// Every flag the specification defines for the operations used here.
    pub const DEFINED: u32 = FENCE
        | BOF
        | CRAV
        | RCR
        | RCI
        | CRSTS
        | CR
        | CC
        | ADDR1_TCS
        | ADDR2_TCS
        | ADDR3_TCS
        | CR_TCS
        | STORD
        | DRDBK
        | DSTS;
}

/// Completion status codes (bits 6:0 of the status byte).
pub mod status {
    /// Not yet completed (the record is still as software zeroed it).
    pub const NONE: u8 = 0x00;
    /// Success.
    pub const SUCCESS: u8 = 0x01;
    /// Page fault with block-on-fault clear; bytes completed and fault address valid.
    pub const PAGE_FAULT_NOBOF: u8 = 0x03;
    /// One or more descriptors of a batch failed.
    pub const BATCH_FAIL: u8 = 0x05;
    /// Page fault reading a batch's descriptor list.
    pub const BATCH_PAGE_FAULT: u8 = 0x06;
    /// Unsupported operation code.
    pub const BAD_OPCODE: u8 = 0x10;
    /// Flags not valid for the operation; invalid-flags field valid.
    pub const INVALID_FLAGS: u8 = 0x11;
    /// A reserved field is not zero.
    pub const NOZERO_RESERVE: u8 = 0x12;
    /// Transfer size zero or above the queue's maximum.
    pub const XFER_ERANGE: u8 = 0x13;
    /// Batch descriptor count below 2 or above the queue's maximum batch size.
    pub const DESC_CNT_ERANGE: u8 = 0x14;
    /// Descriptor list address not 64-byte aligned.
    pub const DESCLIST_ALIGN: u8 = 0x18;
    /// Completion record address translation failed.
    pub const CRA_XLAT: u8 = 0x1a;
    /// Completion record address not 32-byte aligned.
    pub const CRA_ALIGN: u8 = 0x1b;
    /// Privileged descriptor from a user portal.
    pub const PRIV_BAD: u8 = 0x1d;
    /// Mask of the status code within the status byte.
    pub const MASK: u8 = 0x7f;
    /// Status-byte bit: the page fault happened on a write.
    pub const WRITE_FAULT: u8 = 0x80;

    /// A short name for a status code.
    pub fn name(code: u8) -> &'static str {
        match code & MASK {
            NONE => "not completed",
            SUCCESS => "success",
            PAGE_FAULT_NOBOF => "page fault",
            BATCH_FAIL => "batch: a descriptor failed",
            BATCH_PAGE_FAULT => "page fault reading the batch list",
            BAD_OPCODE => "unsupported operation",
            INVALID_FLAGS => "invalid flags",
            NOZERO_RESERVE => "reserved field not zero",
            XFER_ERANGE => "transfer size out of range",
            DESC_CNT_ERANGE => "descriptor count out of range",
            DESCLIST_ALIGN => "descriptor list misaligned",
            CRA_XLAT => "completion record address not translatable",
            CRA_ALIGN => "completion record address misaligned",
            PRIV_BAD => "privileged descriptor from a user portal",
            _ => "other error",
        }
    }
}

const PASID_OFF: usize = 0;
const FLAGS_OFF: usize = PASID_OFF + 4;
const COMPLETION_OFF: usize = FLAGS_OFF + 4;
const SRC_OFF: usize = COMPLETION_OFF + 8;
const DST_OFF: usize = SRC_OFF + 8;
const SIZE_OFF: usize = DST_OFF + 8;
const INT_HANDLE_OFF: usize = SIZE_OFF + 4;
const RSVD_OFF: usize = INT_HANDLE_OFF + 2;
const OP_SPECIFIC_OFF: usize = RSVD_OFF + 2;
const _: () = assert!(OP_SPECIFIC_OFF + 24 == DESC_BYTES);

/// Bits of the first dword: PASID, reserved, privileged.
const PASID_MASK: u32 = (1 << 20) - 1;
const PRIV_BIT: u32 = 1 << 31;
const FLAGS_MASK: u32 = (1 << 24) - 1;
const OPCODE_SHIFT: u32 = 24;

const CR_STATUS_OFF: usize = 0;
const CR_RESULT_OFF: usize = CR_STATUS_OFF + 1;
const CR_BYTES_OFF: usize = CR_RESULT_OFF + 3;
const CR_FAULT_OFF: usize = CR_BYTES_OFF + 4;
const CR_INVALID_FLAGS_OFF: usize = CR_FAULT_OFF + 8;

/// One work descriptor, laid out as the device reads it.
#[repr(C, align(64))]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct HwDesc(pub [u8; DESC_BYTES]);

const _: () = assert!(std::mem::size_of::<HwDesc>() == DESC_BYTES);

impl std::fmt::Debug for HwDesc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HwDesc")
            .field("opcode", &self.opcode())
            .field("flags", &format_args!("{:#x}", self.flags()))
            .field("completion", &format_args!("{:#x}", self.completion()))
            .field("src", &format_args!("{:#x}", self.src()))
            .field("dst", &format_args!("{:#x}", self.dst()))
            .field("size", &self.size())
            .finish()
    }
}

impl HwDesc {
    /// A zeroed descriptor with `opcode` and `flags`, completion record at `cr`.
    pub fn new(opcode: u8, flags: u32, cr: u64) -> HwDesc {
        let mut d = HwDesc([0; DESC_BYTES]);
        d.put_u32(
            FLAGS_OFF,
            (flags & FLAGS_MASK) | (opcode as u32) << OPCODE_SHIFT,
        );
        d.put_u64(COMPLETION_OFF, cr);
        d
    }

    /// Memory move of `len` bytes from `src` to `dst`.
    pub fn memmove(src: u64, dst: u64, len: u32, flags: u32, cr: u64) -> HwDesc {
        let mut d = HwDesc::new(opcode::MEMMOVE, flags, cr);
        d.put_u64(SRC_OFF, src);
        d.put_u64(DST_OFF, dst);
        d.put_u32(SIZE_OFF, len);
        d
    }

    /// Fill of `len` bytes at `dst` with the 8-byte `pattern`.
    pub fn memfill(pattern: u64, dst: u64, len: u32, flags: u32, cr: u64) -> HwDesc {
        let mut d = HwDesc::new(opcode::MEMFILL, flags, cr);
        d.put_u64(SRC_OFF, pattern);
        d.put_u64(DST_OFF, dst);
        d.put_u32(SIZE_OFF, len);
        d
    }

    /// Batch of `count` descriptors listed at `list`.
    pub fn batch(list: u64, count: u32, flags: u32, cr: u64) -> HwDesc {
        let mut d = HwDesc::new(opcode::BATCH, flags, cr);
        d.put_u64(SRC_OFF, list);
        d.put_u32(SIZE_OFF, count);
        d
    }

    /// Operation code.
    pub fn opcode(&self) -> u8 {
        (self.u32_at(FLAGS_OFF) >> OPCODE_SHIFT) as u8
    }

    /// Flags.
    pub fn flags(&self) -> u32 {
        self.u32_at(FLAGS_OFF) & FLAGS_MASK
    }

    /// Replaces the flags.
    pub fn set_flags(&mut self, flags: u32) {
        let op = (self.opcode() as u32) << OPCODE_SHIFT;
        self.put_u32(FLAGS_OFF, op | (flags & FLAGS_MASK));
    }

    /// Completion record address.
    pub fn completion(&self) -> u64 {
        self.u64_at(COMPLETION_OFF)
    }

    /// Replaces the completion record address.
    pub fn set_completion(&mut self, cr: u64) {
        self.put_u64(COMPLETION_OFF, cr);
    }

    /// Source address, fill pattern or descriptor list address.
    pub fn src(&self) -> u64 {
        self.u64_at(SRC_OFF)
    }

    /// Destination address.
    pub fn dst(&self) -> u64 {
        self.u64_at(DST_OFF)
    }

    /// Transfer size or descriptor count.
    pub fn size(&self) -> u32 {
        self.u32_at(SIZE_OFF)
    }

    /// PASID field.
    pub fn pasid(&self) -> u32 {
        self.u32_at(PASID_OFF) & PASID_MASK
    }

    /// Privileged bit.
    pub fn privileged(&self) -> bool {
        self.u32_at(PASID_OFF) & PRIV_BIT != 0
    }

    /// True when every reserved bit is zero: first-dword bits 30:20, the reserved
    /// halfword, the interrupt handle unless an interrupt is requested, and the
    /// operation-specific bytes (the operations used here have none).
    pub fn reserved_clear(&self) -> bool {
        let dw0 = self.u32_at(PASID_OFF) & !(PASID_MASK | PRIV_BIT);
        let rsvd = u16::from_le_bytes([self.0[RSVD_OFF], self.0[RSVD_OFF + 1]]);
        let handle = u16::from_le_bytes([self.0[INT_HANDLE_OFF], self.0[INT_HANDLE_OFF + 1]]);
        let handle_ok = handle == 0 || self.flags() & flags::RCI != 0;
        dw0 == 0 && rsvd == 0 && handle_ok && self.0[OP_SPECIFIC_OFF..].iter().all(|&b| b == 0)
    }

    fn u32_at(&self, o: usize) -> u32 {
        u32::from_le_bytes(self.0[o..o + 4].try_into().unwrap())
    }

    fn u64_at(&self, o: usize) -> u64 {
        u64::from_le_bytes(self.0[o..o + 8].try_into().unwrap())
    }

    fn put_u32(&mut self, o: usize, v: u32) {
        self.0[o..o + 4].copy_from_slice(&v.to_le_bytes());
    }

    fn put_u64(&mut self, o: usize, v: u64) {
        self.0[o..o + 8].copy_from_slice(&v.to_le_bytes());
    }
}

/// A completion record's contents.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    /// Whole status byte (code in bits 6:0, write-fault flag in bit 7).
    pub status: u8,
    /// Result byte.
    pub result: u8,
    /// Bytes completed, or descriptors completed for a batch.
    pub bytes_completed: u32,
    /// Faulting address of a page fault.
    pub fault_addr: u64,
    /// Offending flags of an invalid-flags error.
    pub invalid_flags: u32,
}

impl Completion {
    /// The 32 bytes the device writes.
    pub fn encode(&self) -> [u8; COMPLETION_BYTES] {
        let mut b = [0u8; COMPLETION_BYTES];
        b[CR_STATUS_OFF] = self.status;
        b[CR_RESULT_OFF] = self.result;
        b[CR_BYTES_OFF..CR_BYTES_OFF + 4].copy_from_slice(&self.bytes_completed.to_le_bytes());
        b[CR_FAULT_OFF..CR_FAULT_OFF + 8].copy_from_slice(&self.fault_addr.to_le_bytes());
        let inv = self.invalid_flags & FLAGS_MASK;
        b[CR_INVALID_FLAGS_OFF..CR_INVALID_FLAGS_OFF + 4].copy_from_slice(&inv.to_le_bytes());
        b
    }

    /// Decodes 32 bytes of a completion record.
    pub fn decode(b: &[u8; COMPLETION_BYTES]) -> Completion {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        Completion {
            status: b[CR_STATUS_OFF],
            result: b[CR_RESULT_OFF],
            bytes_completed: u32_at(CR_BYTES_OFF),
            fault_addr: u64::from_le_bytes(b[CR_FAULT_OFF..CR_FAULT_OFF + 8].try_into().unwrap()),
            invalid_flags: u32_at(CR_INVALID_FLAGS_OFF) & FLAGS_MASK,
        }
    }

    /// Reads the status byte of the record at `cr` with acquire ordering.
    ///
    /// # Safety
    /// `cr` must point to a live completion record in this process.
    pub unsafe fn status_at(cr: *const u8) -> u8 {
        // SAFETY: per the caller; the device (or model) writes the byte concurrently,
        // hence the atomic access.
        unsafe { (*(cr as *const AtomicU8)).load(Ordering::Acquire) }
    }

    /// Reads a whole record, after its status byte was seen non-zero.
    ///
    /// # Safety
    /// `cr` must point to a live, 32-byte completion record in this process.
    pub unsafe fn read_at(cr: *const u8) -> Completion {
        let mut b = [0u8; COMPLETION_BYTES];
        for (i, byte) in b.iter_mut().enumerate() {
            // SAFETY: inside the caller's 32-byte record; volatile because the device
            // wrote it behind the compiler's back.
            *byte = unsafe { std::ptr::read_volatile(cr.add(i)) };
        }
        Completion::decode(&b)
    }
}

/// A completion status other than success, as the DSA backend reports it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DsaError {
    /// A page the copy touched was not present (block on fault is off).
    #[error(
        "page fault at {addr:#x} ({}) after {bytes_completed} bytes",
        if *write { "write" } else { "read" }
    )]
    PageFault {
        /// The faulting address.
        addr: u64,
        /// Whether the access was a write.
        write: bool,
        /// Bytes copied before the fault.
        bytes_completed: u32,
    },
    /// The descriptor carried flags the device does not accept.
    #[error("invalid descriptor flags {flags:#x}")]
    InvalidFlags {
        /// The descriptor's flags.
        flags: u32,
    },
    /// A completion record address was not 32-byte aligned, so the device could not
    /// report through it.
    #[error(
        "completion record address {addr:#x} is not {} -byte aligned",
        COMPLETION_ALIGN
    )]
    CompletionRecordAlign {
        /// The misaligned address.
        addr: u64,
    },
    /// Any other completion status.
    #[error("completion status {code:#04x} ({})", status::name(*code))]
    Status {
        /// The status byte.
        code: u8,
    },
    /// The device logged a software error instead of writing a completion record.
    #[error("device software error {code:#04x} ({})", status::name(*code))]
    SoftwareError {
        /// The status byte of the software error register.
        code: u8,
    },
}

impl DsaError {
    /// The errno this error corresponds to.
    pub fn errno(&self) -> i32 {
        match self {
            DsaError::PageFault { .. } => libc::EFAULT,
            DsaError::InvalidFlags { .. } | DsaError::CompletionRecordAlign { .. } => libc::EINVAL,
            DsaError::Status { .. } | DsaError::SoftwareError { .. } => libc::EIO,
        }
    }

    pub(super) fn from_completion(c: &Completion) -> DsaError {
        match c.status & status::MASK {
            status::PAGE_FAULT_NOBOF => DsaError::PageFault {
                addr: c.fault_addr,
                write: c.status & status::WRITE_FAULT != 0,
                bytes_completed: c.bytes_completed,
            },
            status::INVALID_FLAGS => DsaError::InvalidFlags {
                flags: c.invalid_flags,
            },
            code => DsaError::Status { code },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_fields_land_at_their_offsets() {
        let d = HwDesc::memmove(0x1111, 0x2222, 4096, flags::CRAV | flags::RCR, 0x3320);
        assert_eq!(d.0[7], opcode::MEMMOVE, "opcode in byte 7");
        assert_eq!(
            u32::from_le_bytes(d.0[4..8].try_into().unwrap()) & 0xff_ffff,
            0xc
        );
        assert_eq!(u64::from_le_bytes(d.0[8..16].try_into().unwrap()), 0x3320);
        assert_eq!(u64::from_le_bytes(d.0[16..24].try_into().unwrap()), 0x1111);
        assert_eq!(u64::from_le_bytes(d.0[24..32].try_into().unwrap()), 0x2222);
        assert_eq!(u32::from_le_bytes(d.0[32..36].try_into().unwrap()), 4096);
        assert!(d.reserved_clear());
        let mut bad = d;
        bad.0[39] = 1;
        assert!(!bad.reserved_clear());
    }

    #[test]
    fn completion_round_trips() {
        let c = Completion {
            status: status::PAGE_FAULT_NOBOF | status::WRITE_FAULT,
            result: 0,
            bytes_completed: 8192,
            fault_addr: 0xdead_b000,
            invalid_flags: 0x40,
        };
        assert_eq!(Completion::decode(&c.encode()), c);
    }
}
