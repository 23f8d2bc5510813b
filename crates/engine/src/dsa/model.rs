//! A software model of a DSA device with one dedicated work queue, for tests on
//! machines without DSA.
//!
//! The "portal" is an ordinary page; [`ModelPortal`] writes descriptors into its 64-byte
//! slots with MOVDIR64B, exactly as a real dedicated queue's portal is written (on a
//! CPU without MOVDIR64B, with one aligned 64-byte vector store, and
//! [`ModelPortal::uses_movdir64b`] says so). A device thread takes each descriptor
//! from the page, checks every field against the specification, performs the
//! operation — reading and writing memory through `process_vm_readv`/`writev` on this
//! process, so an unmapped page becomes a page-fault completion instead of a crash —
//! and writes the completion record, status byte last. Errors it cannot report in a
//! completion record go to a software-error register.
//!
//! A real device addresses the region's mapping. A region that is not a mapping — a
//! crash tracer, an image in memory — is given the device through a [`Window`]: an
//! address range reserved for it, whose accesses the model turns into the region's
//! [`Pmem`] operations (a copy into it as non-temporal stores, made durable by a fence
//! of the device thread when the descriptor asks for destination readback), so the
//! tracer records the device's stores as it records a software engine's.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use pmem::{Durability, Pmem};

use super::hw::{
    flags, opcode, status, Completion, HwDesc, COMPLETION_ALIGN, DESC_BYTES, LIST_ALIGN,
};
use super::portal::{movdir64b, Portal, PORTAL_BYTES, PORTAL_SLOTS};

/// Page size the model splits copies at (a fault is reported per page).
const PAGE: u64 = 4096;
/// The device thread's sleep when the portal is empty and it has spun a while.
const IDLE_SLEEP: Duration = Duration::from_micros(20);
/// Empty polls before the device thread starts sleeping.
const IDLE_SPINS: u32 = 2000;
/// Valid bit of the model's software-error register.
const SWERR_VALID: u32 = 1 << 31;

/// The model's limits, as sysfs would report them for a real queue.
#[derive(Clone, Copy, Debug)]
pub struct ModelConfig {
    /// Queue entries.
    pub wq_size: usize,
    /// Largest batch descriptor count.
    pub max_batch: usize,
    /// Largest transfer.
    pub max_transfer: u64,
    /// Pause between a batch's last member and the batch's own completion record (a
    /// real device writes it a little after the members' effects are visible).
    pub batch_record_delay: std::time::Duration,
}

impl Default for ModelConfig {
    fn default() -> ModelConfig {
        ModelConfig {
            wq_size: 16,
            max_batch: 32,
            max_transfer: 2 << 20,
            batch_record_delay: std::time::Duration::ZERO,
        }
    }
}

struct Shared {
    page: *mut u8,
    cfg: ModelConfig,
    /// The region, when the device reaches it through a window rather than by its
    /// mapping.
    window: Option<Arc<Window>>,
    stop: AtomicBool,
    swerr: AtomicU32,
    descriptors: AtomicU64,
}

// SAFETY: the page is shared memory accessed only with atomic 8-byte loads and stores
// (and MOVDIR64B); the rest is atomics.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl Shared {
    /// The window and region offset of `addr..addr + len`, if it lies inside the
    /// window. A range only partly inside reaches the window's reserved pages, which
    /// fault.
    fn in_window(&self, addr: u64, len: usize) -> Option<(&Window, u64)> {
        let w = self.window.as_deref()?;
        let off = addr.checked_sub(w.base as u64)?;
        (off.checked_add(len as u64)? <= w.region.len()).then_some((w, off))
    }

    fn slot(&self, i: usize) -> &[AtomicU64; DESC_BYTES / 8] {
        // SAFETY: slot `i % PORTAL_SLOTS` lies inside the mapped page, 64-byte aligned;
        // the page lives until the device thread has been joined and both handles
        // dropped.
        unsafe {
            &*(self.page.add((i % PORTAL_SLOTS) * DESC_BYTES) as *const [AtomicU64; DESC_BYTES / 8])
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: unmapping the page mapped in `DeviceModel::start`; no one else holds it.
        unsafe { libc::munmap(self.page as *mut libc::c_void, PORTAL_BYTES) };
    }
}

/// The device: its thread runs until the model is dropped.
pub struct DeviceModel {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// The model's portal, handed to [`crate::Engine::dsa_with_portals`].
pub struct ModelPortal {
    shared: Arc<Shared>,
    next_slot: std::sync::atomic::AtomicUsize,
    /// The device itself, when the portal owns it ([`DeviceModel::owned_portal`]):
    /// dropped (stopped) with the engine that holds the portal.
    _device: Option<DeviceModel>,
}

impl DeviceModel {
    /// Maps the portal page and starts the device thread; the device addresses
    /// memory of this process directly.
    pub fn start(cfg: ModelConfig) -> (DeviceModel, ModelPortal) {
        DeviceModel::launch(cfg, None)
    }

    /// A device whose portal owns it, reaching the region through `window` if given
    /// (else by address): for an engine that keeps its device as long as it lives
    /// ([`crate::Engine::dsa_model`]).
    pub fn owned_portal(cfg: ModelConfig, window: Option<Arc<Window>>) -> ModelPortal {
        let (device, mut portal) = DeviceModel::launch(cfg, window);
        portal._device = Some(device);
        portal
    }

    fn launch(cfg: ModelConfig, window: Option<Arc<Window>>) -> (DeviceModel, ModelPortal) {
        assert!(
            cfg.wq_size <= PORTAL_SLOTS,
            "the model's queue is one portal page"
        );
        // SAFETY: an anonymous private mapping of one page; checked below.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PORTAL_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(page != libc::MAP_FAILED, "mapping the model's portal page");
        let shared = Arc::new(Shared {
            page: page as *mut u8,
            cfg,
            window,
            stop: AtomicBool::new(false),
            swerr: AtomicU32::new(0),
            descriptors: AtomicU64::new(0),
        });
        let dev = shared.clone();
        // The engine's device, registered as one so that a trace (the crash harness)
        // attributes its copies to a copy device.
        let name = "easyio-engine-dsa-model".to_string();
        let thread = threads::spawn(threads::Role::CopyDevice, name, move || run(&dev))
            .expect("spawning the device model");
        let portal = ModelPortal {
            shared: shared.clone(),
            next_slot: Default::default(),
            _device: None,
        };
        (
            DeviceModel {
                shared,
                thread: Some(thread),
            },
            portal,
        )
    }

    /// Descriptors the device has taken from its portal (batches count once, their
    /// members once each).
    pub fn descriptors(&self) -> u64 {
        self.shared.descriptors.load(Ordering::Acquire)
    }
}

impl Drop for DeviceModel {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A region a device model reaches through an address range reserved for it rather than
/// a mapping: the engine is opened on the window (which is the region for every
/// [`Pmem`] operation, and whose [`Pmem::device_base`] is the reserved range), and the
/// model turns its accesses inside the range into the region's operations.
pub struct Window {
    region: Arc<dyn Pmem>,
    base: *mut u8,
    reserved: usize,
}

// SAFETY: `base` only names an address range that nothing dereferences (accesses inside
// it become the region's operations; the pages are inaccessible), released once, on
// drop; the region is Send + Sync.
unsafe impl Send for Window {}
// SAFETY: as above.
unsafe impl Sync for Window {}

impl Window {
    /// Reserves an inaccessible address range as long as `region`, so that no real
    /// buffer can lie inside it.
    pub fn over(region: Arc<dyn Pmem>) -> Window {
        let reserved = region.len().max(1).next_multiple_of(PAGE) as usize;
        // SAFETY: an anonymous, inaccessible, unbacked reservation; checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserved,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert!(
            base != libc::MAP_FAILED,
            "reserving the device model's window"
        );
        Window {
            region,
            base: base as *mut u8,
            reserved,
        }
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        // SAFETY: releasing the reservation made in `Window::over`; the engine that
        // handed its addresses to the device has shut down, as the device's portal
        // (which holds this window) drops with it.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.reserved) };
    }
}

impl Pmem for Window {
    fn len(&self) -> u64 {
        self.region.len()
    }

    fn protection_key(&self) -> Option<u32> {
        self.region.protection_key()
    }

    fn durability(&self) -> Durability {
        self.region.durability()
    }

    fn write(&self, off: u64, src: &[u8]) {
        self.region.write(off, src)
    }

    fn store_u64(&self, off: u64, val: u64) {
        self.region.store_u64(off, val)
    }

    fn load_u64(&self, off: u64) -> u64 {
        self.region.load_u64(off)
    }

    fn read(&self, off: u64, dst: &mut [u8]) {
        self.region.read(off, dst)
    }

    fn flush(&self, off: u64, len: u64) {
        self.region.flush(off, len)
    }

    fn fence(&self) {
        self.region.fence()
    }

    fn copy_nt(&self, off: u64, src: &[u8]) {
        self.region.copy_nt(off, src)
    }

    fn persist(&self, off: u64, len: u64) {
        self.region.persist(off, len)
    }

    fn write_persist(&self, off: u64, src: &[u8]) {
        self.region.write_persist(off, src)
    }

    fn store_u64_persist(&self, off: u64, val: u64) {
        self.region.store_u64_persist(off, val)
    }

    fn copy_persist(&self, off: u64, src: &[u8]) {
        self.region.copy_persist(off, src)
    }

    fn device_base(&self) -> Option<*mut u8> {
        Some(self.base)
    }
}

impl ModelPortal {
    /// True when descriptors reach the model with the MOVDIR64B instruction.
    pub fn uses_movdir64b() -> bool {
        pmem::persist::features().movdir64b
    }
}

impl Portal for ModelPortal {
    fn describe(&self) -> String {
        format!(
            "DSA device model (dedicated, {} entries, batch <= {}, transfer <= {} bytes)",
            self.shared.cfg.wq_size, self.shared.cfg.max_batch, self.shared.cfg.max_transfer
        )
    }

    fn wq_size(&self) -> usize {
        self.shared.cfg.wq_size
    }

    fn max_batch(&self) -> usize {
        self.shared.cfg.max_batch
    }

    fn max_transfer(&self) -> u64 {
        self.shared.cfg.max_transfer
    }

    fn submit(&self, desc: &HwDesc) -> bool {
        let slot = self.next_slot.fetch_add(1, Ordering::Relaxed) % PORTAL_SLOTS;
        std::sync::atomic::fence(Ordering::SeqCst);
        let dst = self.shared.slot(slot) as *const _ as *mut u8;
        if ModelPortal::uses_movdir64b() {
            // SAFETY: the CPU has MOVDIR64B; `dst` is a 64-byte aligned slot of the
            // model's writable page.
            unsafe { movdir64b(dst, desc) };
        } else {
            // Without MOVDIR64B: the same 64 bytes as eight atomic stores, the first
            // word (which the device polls) last.
            let words = self.shared.slot(slot);
            for i in (0..8).rev() {
                let w = u64::from_le_bytes(desc.0[i * 8..i * 8 + 8].try_into().unwrap());
                words[i].store(w, Ordering::Release);
            }
        }
        true
    }

    fn take_software_error(&self) -> Option<u8> {
        let v = self.shared.swerr.swap(0, Ordering::AcqRel);
        (v & SWERR_VALID != 0).then_some(v as u8)
    }
}

/// The device thread: take descriptors from the portal in slot order and run them.
fn run(dev: &Shared) {
    // A device's writes are not subject to protection keys: this thread stands for it.
    pmem::pkey::allow_this_thread();
    let mut next = 0usize;
    let mut idle = 0u32;
    while !dev.stop.load(Ordering::Acquire) {
        let words = dev.slot(next);
        if words[0].load(Ordering::Acquire) == 0 {
            idle += 1;
            if idle > IDLE_SPINS {
                std::thread::sleep(IDLE_SLEEP);
            } else {
                std::hint::spin_loop();
            }
            continue;
        }
        idle = 0;
        // A 64-byte direct store becomes visible as a whole: once word 0 is seen, so
        // is the rest (the fallback path stores word 0 last).
        let mut desc = HwDesc([0; DESC_BYTES]);
        for (i, w) in words.iter().enumerate() {
            desc.0[i * 8..i * 8 + 8].copy_from_slice(&w.load(Ordering::Acquire).to_le_bytes());
            w.store(0, Ordering::Release);
        }
        next += 1;
        dev.descriptors.fetch_add(1, Ordering::AcqRel);
        execute(dev, &desc, false);
    }
}

/// What a descriptor's completion record will say.
#[derive(Default)]
struct Outcome {
    status: u8,
    bytes: u32,
    fault: u64,
    invalid_flags: u32,
}

impl Outcome {
    fn ok(bytes: u32) -> Outcome {
        Outcome {
            status: status::SUCCESS,
            bytes,
            ..Outcome::default()
        }
    }

    fn err(status: u8) -> Outcome {
        Outcome {
            status,
            ..Outcome::default()
        }
    }
}

/// Runs one descriptor and reports it; returns whether it succeeded.
fn execute(dev: &Shared, d: &HwDesc, in_batch: bool) -> bool {
    let outcome = check(dev, d, in_batch).unwrap_or_else(|| perform(dev, d));
    let ok = outcome.status == status::SUCCESS;
    complete(dev, d, &outcome);
    ok
}

/// Flags the model accepts for an operation. User portals cannot request
/// interrupts, and a fence means something only inside a batch.
fn allowed_flags(op: u8, in_batch: bool) -> u32 {
    let base = match op {
        opcode::BATCH => flags::CRAV | flags::RCR | flags::BOF,
        _ => flags::DEFINED & !flags::RCI,
    };
    if in_batch {
        base
    } else {
        base & !flags::FENCE
    }
}

/// The field checks of the specification, in its order; `Some` is a failure.
fn check(dev: &Shared, d: &HwDesc, in_batch: bool) -> Option<Outcome> {
    let op = d.opcode();
    let known = matches!(
        op,
        opcode::NOOP | opcode::DRAIN | opcode::MEMMOVE | opcode::MEMFILL
    ) || (op == opcode::BATCH && !in_batch);
    if !known {
        return Some(Outcome::err(status::BAD_OPCODE));
    }
    if d.privileged() {
        return Some(Outcome::err(status::PRIV_BAD));
    }
    let invalid = d.flags() & !allowed_flags(op, in_batch);
    let rcr_without_crav = d.flags() & flags::RCR != 0 && d.flags() & flags::CRAV == 0;
    if invalid != 0 || rcr_without_crav {
        return Some(Outcome {
            invalid_flags: if invalid != 0 { invalid } else { flags::RCR },
            ..Outcome::err(status::INVALID_FLAGS)
        });
    }
    if !d.reserved_clear() {
        return Some(Outcome::err(status::NOZERO_RESERVE));
    }
    if d.flags() & flags::CRAV != 0 && !d.completion().is_multiple_of(COMPLETION_ALIGN) {
        return Some(Outcome::err(status::CRA_ALIGN));
    }
    match op {
        opcode::MEMMOVE | opcode::MEMFILL
            if d.size() == 0 || d.size() as u64 > dev.cfg.max_transfer =>
        {
            return Some(Outcome::err(status::XFER_ERANGE));
        }
        opcode::BATCH => {
            if d.size() < 2 || d.size() as usize > dev.cfg.max_batch {
                return Some(Outcome::err(status::DESC_CNT_ERANGE));
            }
            if !d.src().is_multiple_of(LIST_ALIGN) {
                return Some(Outcome::err(status::DESCLIST_ALIGN));
            }
        }
        _ => {}
    }
    None
}

/// Performs a checked descriptor.
fn perform(dev: &Shared, d: &HwDesc) -> Outcome {
    match d.opcode() {
        opcode::MEMMOVE => copy(dev, d.src(), d.dst(), d.size(), d.flags()),
        opcode::MEMFILL => {
            let pattern = d.src().to_le_bytes();
            let buf: Vec<u8> = (0..d.size() as usize).map(|i| pattern[i % 8]).collect();
            match write_mem(dev, d.dst(), &buf) {
                Ok(()) => {
                    readback(dev, d.dst(), buf.len(), d.flags());
                    Outcome::ok(d.size())
                }
                Err(done) => fault(d.dst() + done as u64, true, done as u32),
            }
        }
        opcode::BATCH => batch(dev, d),
        _ => Outcome::ok(0),
    }
}

fn batch(dev: &Shared, d: &HwDesc) -> Outcome {
    let n = d.size() as usize;
    let mut list = vec![0u8; n * DESC_BYTES];
    if let Err(done) = read_mem(dev, d.src(), &mut list) {
        return Outcome {
            fault: d.src() + done as u64,
            ..Outcome::err(status::BATCH_PAGE_FAULT)
        };
    }
    let (mut completed, mut failed) = (0u32, false);
    for raw in list.chunks_exact(DESC_BYTES) {
        let member = HwDesc(raw.try_into().unwrap());
        dev.descriptors.fetch_add(1, Ordering::AcqRel);
        if failed && member.flags() & flags::FENCE != 0 {
            // A fence after a failure abandons the rest of the batch.
            break;
        }
        if execute(dev, &member, true) {
            completed += 1;
        } else {
            failed = true;
        }
    }
    if !dev.cfg.batch_record_delay.is_zero() {
        std::thread::sleep(dev.cfg.batch_record_delay);
    }
    Outcome {
        status: if failed {
            status::BATCH_FAIL
        } else {
            status::SUCCESS
        },
        bytes: completed,
        ..Outcome::default()
    }
}

/// Copies page by page through a bounce buffer, so a fault reports how far it got.
fn copy(dev: &Shared, src: u64, dst: u64, len: u32, fl: u32) -> Outcome {
    let mut done = 0u64;
    let mut buf = vec![0u8; PAGE as usize];
    while done < len as u64 {
        let (s, t) = (src + done, dst + done);
        let chunk = (len as u64 - done)
            .min(PAGE - s % PAGE)
            .min(PAGE - t % PAGE) as usize;
        if let Err(k) = read_mem(dev, s, &mut buf[..chunk]) {
            return fault(s + k as u64, false, (done + k as u64) as u32);
        }
        if let Err(k) = write_mem(dev, t, &buf[..chunk]) {
            return fault(t + k as u64, true, (done + k as u64) as u32);
        }
        done += chunk as u64;
    }
    readback(dev, dst, len as usize, fl);
    Outcome::ok(len)
}

fn fault(addr: u64, write: bool, bytes: u32) -> Outcome {
    Outcome {
        status: status::PAGE_FAULT_NOBOF | if write { status::WRITE_FAULT } else { 0 },
        bytes,
        fault: addr & !(PAGE - 1),
        invalid_flags: 0,
    }
}

/// Destination readback: the written lines are in memory before completion.
fn readback(dev: &Shared, dst: u64, len: usize, fl: u32) {
    if fl & flags::DRDBK == 0 {
        return;
    }
    if let Some((w, _)) = dev.in_window(dst, len) {
        // The device thread's own non-temporal stores are durable after its fence.
        w.region.fence();
    } else {
        // SAFETY: the range was just written successfully, so it is mapped; write-back
        // does not change memory contents.
        unsafe { pmem::persist::flush(dst as *const u8, len) };
        pmem::persist::fence();
    }
}

/// Writes the completion record (status byte last), or logs a software error when
/// the record address is unusable.
fn complete(dev: &Shared, d: &HwDesc, o: &Outcome) {
    let wants = d.flags() & flags::CRAV != 0
        && (d.flags() & flags::RCR != 0 || o.status != status::SUCCESS);
    if !wants {
        return;
    }
    if !d.completion().is_multiple_of(COMPLETION_ALIGN) {
        software_error(dev, status::CRA_ALIGN);
        return;
    }
    let rec = Completion {
        status: o.status,
        result: 0,
        bytes_completed: o.bytes,
        fault_addr: o.fault,
        invalid_flags: o.invalid_flags,
    }
    .encode();
    if write_mem(dev, d.completion() + 1, &rec[1..]).is_err()
        || write_mem(dev, d.completion(), &rec[..1]).is_err()
    {
        software_error(dev, status::CRA_XLAT);
    }
}

fn software_error(dev: &Shared, code: u8) {
    dev.swerr
        .store(SWERR_VALID | code as u32, Ordering::Release);
}

/// Reads `buf.len()` bytes at `addr` of this process; `Err(n)` after `n` bytes when a
/// page is not readable.
fn read_mem(dev: &Shared, addr: u64, buf: &mut [u8]) -> Result<(), usize> {
    if let Some((w, off)) = dev.in_window(addr, buf.len()) {
        w.region.read(off, buf);
        return Ok(());
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: the kernel checks the remote range and fails with EFAULT instead of
    // faulting; the local range is our buffer.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n == buf.len() as isize {
        Ok(())
    } else {
        Err(n.max(0) as usize)
    }
}

/// Writes `buf` at `addr` of this process; `Err(n)` after `n` bytes when a page is not
/// writable.
fn write_mem(dev: &Shared, addr: u64, buf: &[u8]) -> Result<(), usize> {
    if let Some((w, off)) = dev.in_window(addr, buf.len()) {
        w.region.copy_nt(off, buf);
        return Ok(());
    }
    let local = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: as in read_mem; the kernel only reads the local buffer.
    let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n == buf.len() as isize {
        Ok(())
    } else {
        Err(n.max(0) as usize)
    }
}
