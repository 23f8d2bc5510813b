//! Work-queue portals and the instructions that write descriptors into them.
//!
//! A dedicated work queue takes descriptors written with MOVDIR64B (a 64-byte
//! direct store; software must keep no more descriptors in flight than the queue
//! holds). A shared work queue takes ENQCMD, which reports whether the queue accepted
//! the descriptor. Submissions rotate through the 64-byte slots of the 4 KiB portal
//! page: every slot reaches the same queue, and consecutive direct stores do not
//! target the same line.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::hw::{HwDesc, DESC_BYTES};
use super::sysfs::WqInfo;
use crate::error::{Error, Result};

/// Bytes of a portal mapping.
pub const PORTAL_BYTES: usize = 4096;
/// Descriptor slots in a portal page.
pub const PORTAL_SLOTS: usize = PORTAL_BYTES / DESC_BYTES;

/// A work queue as the DSA backend sees it: somewhere to write 64-byte descriptors,
/// and its limits.
pub trait Portal: Send + Sync {
    /// A one-line description (queue name, mode, size).
    fn describe(&self) -> String;
    /// Descriptors the queue holds; the backend keeps fewer in flight.
    fn wq_size(&self) -> usize;
    /// Largest descriptor count of a batch.
    fn max_batch(&self) -> usize;
    /// Largest transfer size of one descriptor.
    fn max_transfer(&self) -> u64;
    /// Writes one descriptor to the queue. False when a shared queue refused it for
    /// now (full); the caller retries.
    fn submit(&self, desc: &HwDesc) -> bool;
    /// A pending software error of the device (an error it could not report in a
    /// completion record), as its status code; clears it.
    fn take_software_error(&self) -> Option<u8>;
}

/// MOVDIR64B: one 64-byte direct store of `src` to `dst`.
///
/// # Safety
/// The CPU must have MOVDIR64B; `dst` must be 64-byte aligned and writable (a portal,
/// or ordinary memory).
#[inline]
pub unsafe fn movdir64b(dst: *mut u8, src: &HwDesc) {
    // SAFETY: per the caller; `src` is a 64-byte aligned, 64-byte descriptor.
    unsafe {
        std::arch::asm!(
            "movdir64b {dst}, zmmword ptr [{src}]",
            dst = in(reg) dst,
            src = in(reg) src as *const HwDesc,
            options(nostack, preserves_flags),
        );
    }
}

/// ENQCMD: offers `src` to the shared work queue whose portal is `dst`; true when the
/// queue accepted it.
///
/// # Safety
/// The CPU must have ENQCMD, the process a PASID, and `dst` must be a shared work
/// queue's portal.
#[inline]
pub unsafe fn enqcmd(dst: *mut u8, src: &HwDesc) -> bool {
    let retry: u8;
    // SAFETY: per the caller.
    unsafe {
        std::arch::asm!(
            "enqcmd {dst}, zmmword ptr [{src}]",
            "setz {retry}",
            dst = in(reg) dst,
            src = in(reg) src as *const HwDesc,
            retry = out(reg_byte) retry,
            options(nostack),
        );
    }
    retry == 0
}

/// A real work queue: `/dev/dsa/wqX.Y` opened and its portal mapped.
pub struct WqPortal {
    info: WqInfo,
    portal: *mut u8,
    next_slot: AtomicUsize,
    file: File,
}

// SAFETY: the portal is device MMIO written only with whole-descriptor stores, which
// the device accepts from any thread.
unsafe impl Send for WqPortal {}
// SAFETY: as above; the slot counter is atomic.
unsafe impl Sync for WqPortal {}

impl WqPortal {
    /// Opens and maps the portal of a discovered work queue.
    pub fn open(info: WqInfo) -> Result<WqPortal> {
        let f = pmem::persist::features();
        let (have, insn) = if info.shared {
            (f.enqcmd, "ENQCMD")
        } else {
            (f.movdir64b, "MOVDIR64B")
        };
        if !have {
            return Err(Error::DsaUnavailable(format!(
                "{} is a {} work queue, which needs {insn}; this CPU does not have it",
                info.name,
                if info.shared { "shared" } else { "dedicated" },
            )));
        }
        let io = |what: String| move |source| Error::Io { what, source };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&info.dev_path)
            .map_err(io(format!("opening {}", info.dev_path.display())))?;
        // SAFETY: mapping one page of the work queue's portal, as the idxd driver
        // offers it; the result is checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PORTAL_BYTES,
                libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io(format!(
                "mapping the portal of {}",
                info.dev_path.display()
            ))(std::io::Error::last_os_error()));
        }
        Ok(WqPortal {
            info,
            portal: p as *mut u8,
            next_slot: AtomicUsize::new(0),
            file,
        })
    }
}

impl Drop for WqPortal {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the portal page we mapped.
        unsafe { libc::munmap(self.portal as *mut libc::c_void, PORTAL_BYTES) };
    }
}

impl Portal for WqPortal {
    fn describe(&self) -> String {
        self.info.describe()
    }

    fn wq_size(&self) -> usize {
        self.info.size
    }

    fn max_batch(&self) -> usize {
        self.info.max_batch
    }

    fn max_transfer(&self) -> u64 {
        self.info.max_transfer
    }

    fn submit(&self, desc: &HwDesc) -> bool {
        let slot = self.next_slot.fetch_add(1, Ordering::Relaxed) % PORTAL_SLOTS;
        // Descriptor lists and zeroed completion records must be visible to the
        // device before it can read the descriptor.
        std::sync::atomic::fence(Ordering::SeqCst);
        // SAFETY: the slot lies inside the mapped portal page and is 64-byte aligned;
        // `open` checked the CPU has the instruction for this queue's mode.
        unsafe {
            let dst = self.portal.add(slot * DESC_BYTES);
            if self.info.shared {
                enqcmd(dst, desc)
            } else {
                movdir64b(dst, desc);
                true
            }
        }
    }

    fn take_software_error(&self) -> Option<u8> {
        // The driver marks the queue's file readable when the device has logged a
        // software error, and shows the SWERROR register in sysfs (code in bits 15:8).
        let mut pfd = libc::pollfd {
            fd: self.file.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: polling one descriptor we own, without blocking.
        let ready = unsafe { libc::poll(&mut pfd, 1, 0) } > 0 && pfd.revents & libc::POLLIN != 0;
        if !ready {
            return None;
        }
        let errors = std::fs::read_to_string(self.info.device_sysfs().join("errors")).ok();
        let word = errors
            .as_deref()
            .and_then(|s| s.split_whitespace().next())
            .and_then(|w| u64::from_str_radix(w.trim_start_matches("0x"), 16).ok());
        Some(word.map_or(0, |w| (w >> 8) as u8))
    }
}
