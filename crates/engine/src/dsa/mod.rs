//! The `dsa` backend: Intel DSA through user-mode work queues, one channel per queue.
//!
//! Every submission is one batch descriptor whose list holds a MEMMOVE per copy and,
//! last, a MEMFILL with the fence flag that writes the channel's new counter (as its
//! 8-byte pattern) into the channel's persistent record. The fence makes the device
//! run the counter write only after every copy of the batch succeeded, and copies into
//! the region carry destination readback with cache control clear, so each is durable
//! in memory before the next descriptor starts: the counter never runs ahead of
//! durable data. A failed copy abandons the fenced counter write.
//!
//! DSA does not promise that two batches on one queue complete in order, and a later
//! batch's counter overtaking an earlier batch's data would break the record's
//! meaning. A channel therefore has one batch in flight at a time (its copies run in
//! parallel inside the device); a submission while one is in flight answers busy.
//! Completion is reaped by the callers of submit, poll and wait: the batch's own
//! completion record is polled, and on failure the copy descriptors' records name
//! the first error as a typed [`DsaError`]. A batch counts as over, failed or not, only
//! once its own record is written: until then the device may still run its other
//! members, so its buffers and the callers' stay in use. After a failure the channel
//! completes nothing more: its counter must not pass the copy that failed.

pub(crate) mod hw;
#[cfg(feature = "testing")]
pub mod model;
mod portal;
mod sysfs;

use std::alloc::Layout;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use pmem::Pmem;

pub use hw::{flags, opcode, status, Completion, DsaError, HwDesc, COMPLETION_BYTES, DESC_BYTES};
pub use portal::{enqcmd, movdir64b, Portal, WqPortal, PORTAL_BYTES, PORTAL_SLOTS};
pub use sysfs::{discover, WqInfo, DEV_DSA, SYSFS_DSA};

use crate::channel::ChannelCore;
use crate::desc::{Desc, Direction};
use crate::error::{Error, Result};
use crate::Sn;

/// Times a submitter offers a descriptor to a full shared queue before answering busy.
const ENQCMD_RETRIES: usize = 64;
/// Flags of every copy descriptor: a completion record, always written; no block on
/// fault (a fault is reported, not waited out).
const COPY_FLAGS: u32 = flags::CRAV | flags::RCR;
/// Extra flags of a copy into the region: durable in memory before completion.
const DURABLE_FLAGS: u32 = flags::DRDBK;
/// Extra flags of a copy out of the region: leave the data in the cache for its reader.
const READ_FLAGS: u32 = flags::CC;

/// Damage a test can ask for in the next batch's first copy descriptor
/// ([`crate::Testing::corrupt_next`]; `testing` feature).
#[cfg(feature = "testing")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Corruption {
    /// Set a flag bit the specification reserves.
    InvalidFlags,
    /// Move its completion record address off 32-byte alignment.
    MisalignedCompletion,
}

/// The reserved flag bit [`Corruption::InvalidFlags`] sets.
#[cfg(feature = "testing")]
const RESERVED_FLAG: u32 = 1 << 6;

// A batch's descriptor list starts its page-aligned buffers (`BatchMem::list`).
const _: () = assert!(pmem::PAGE_SIZE.is_multiple_of(hw::LIST_ALIGN));

/// Descriptor list and completion records of one channel's in-flight batch, in DRAM
/// the device reads and writes directly.
struct BatchMem {
    base: *mut u8,
    layout: Layout,
    /// Descriptors the list holds (copies plus the counter write).
    slots: usize,
}

// SAFETY: plain memory owned by one channel and touched only under its lock (and by
// the device while a batch is in flight).
unsafe impl Send for BatchMem {}

impl BatchMem {
    fn new(slots: usize) -> BatchMem {
        let bytes = slots * (DESC_BYTES + COMPLETION_BYTES) + COMPLETION_BYTES;
        let layout = Layout::from_size_align(bytes, pmem::PAGE_SIZE as usize).expect("layout");
        // SAFETY: non-zero size; checked for null below.
        let base = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!base.is_null(), "out of memory for DSA batch buffers");
        BatchMem {
            base,
            layout,
            slots,
        }
    }

    /// The descriptor list (64-byte aligned: the base is page aligned).
    fn list(&self) -> *mut HwDesc {
        self.base as *mut HwDesc
    }

    /// Completion record of list entry `i` (32-byte aligned).
    fn member_cr(&self, i: usize) -> *mut u8 {
        // SAFETY: inside the allocation: the records follow the list.
        unsafe {
            self.base
                .add(self.slots * DESC_BYTES + i * COMPLETION_BYTES)
        }
    }

    /// Completion record of the batch descriptor itself.
    fn batch_cr(&self) -> *mut u8 {
        self.member_cr(self.slots)
    }

    fn clear_records(&self) {
        // SAFETY: the records are inside the allocation; no batch is in flight.
        unsafe { std::ptr::write_bytes(self.member_cr(0), 0, (self.slots + 1) * COMPLETION_BYTES) };
    }
}

impl Drop for BatchMem {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.base, self.layout) };
    }
}

struct InFlight {
    last: u64,
    members: usize,
    bytes: u64,
    since: Instant,
    /// Counted in the channel's statistics and queue depth already ([`DsaBackend::settle`]),
    /// while the batch's own record is still to come.
    accounted: bool,
}

impl InFlight {
    fn account(&mut self, core: &ChannelCore) {
        if !self.accounted {
            self.accounted = true;
            core.note_completed(self.last);
            core.account(
                self.members as u64,
                self.bytes,
                self.since.elapsed().as_nanos() as u64,
            );
        }
    }
}

struct ChanState {
    mem: BatchMem,
    inflight: Option<InFlight>,
    failed: Option<DsaError>,
    /// A software error the device raised while the in-flight batch had no record yet:
    /// kept to classify the batch's failure once its record says the device is done.
    swerr: Option<u8>,
    #[cfg(feature = "testing")]
    corrupt: Option<Corruption>,
}

struct DsaChannel {
    core: Arc<ChannelCore>,
    portal: Box<dyn Portal>,
    state: Mutex<ChanState>,
    suspended: AtomicBool,
    stopped: AtomicBool,
    max_transfer: u64,
}

/// The DSA backend's channels.
pub(crate) struct Dsa {
    /// The region the device copies to and from; held so that its mapping outlives
    /// every batch.
    region: Arc<dyn Pmem>,
    /// Where usable offset 0 of the region lies for the device ([`Pmem::device_base`]).
    base: u64,
    chans: Vec<DsaChannel>,
    max_batch: usize,
}

/// Opens up to `channels` portals of the machine's user-mode work queues.
pub(crate) fn open_portals(channels: usize) -> Result<Vec<Box<dyn Portal>>> {
    discover()?
        .into_iter()
        .take(channels)
        .map(|wq| WqPortal::open(wq).map(|p| Box::new(p) as Box<dyn Portal>))
        .collect()
}

impl Dsa {
    pub fn new(
        region: Arc<dyn Pmem>,
        cores: &[Arc<ChannelCore>],
        portals: Vec<Box<dyn Portal>>,
    ) -> Result<Dsa> {
        let base = region.device_base().ok_or_else(|| {
            Error::Config(
                "the dsa engine copies by address: it needs a mapped region (a devdax \
                 device or a file), not one whose stores are traced, held in memory or \
                 emulated"
                    .into(),
            )
        })? as u64;
        let max_batch = portals
            .iter()
            .map(|p| p.max_batch())
            .min()
            .unwrap_or(0)
            .saturating_sub(1);
        if max_batch == 0 || portals.iter().any(|p| p.wq_size() == 0) {
            return Err(Error::Config(
                "DSA work queues need a size and a maximum batch size of at least 2".into(),
            ));
        }
        let chans = cores
            .iter()
            .zip(portals)
            .map(|(core, portal)| DsaChannel {
                core: core.clone(),
                max_transfer: portal.max_transfer().min(u32::MAX as u64),
                state: Mutex::new(ChanState {
                    mem: BatchMem::new(max_batch + 1),
                    inflight: None,
                    failed: None,
                    swerr: None,
                    #[cfg(feature = "testing")]
                    corrupt: None,
                }),
                portal,
                suspended: AtomicBool::new(false),
                stopped: AtomicBool::new(false),
            })
            .collect();
        Ok(Dsa {
            region,
            base,
            chans,
            max_batch,
        })
    }

    /// Copies per batch (one list entry is the counter write).
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// Writes the batch's list into `mem`: a MEMMOVE per copy and the fenced MEMFILL
    /// that stores `last` into the channel's counter; returns the bytes copied. No batch
    /// of the channel may be in flight.
    fn write_list(&self, ch: &DsaChannel, mem: &BatchMem, descs: &[Desc], last: u64) -> u64 {
        // List entries: the copies, then the counter write. Under the test fault
        // `PublishBeforeData` the counter write comes first instead, in batches that
        // only copy into the region (a copy out of it would write a buffer its owner
        // already took back).
        let publish_first = crate::fault::active(crate::fault::Fault::PublishBeforeData)
            && descs.iter().all(|d| d.direction() == Direction::ToRegion);
        let (first_copy, publish_at) = if publish_first {
            (1, 0)
        } else {
            (0, descs.len())
        };
        let mut bytes = 0;
        for (k, d) in descs.iter().enumerate() {
            let i = first_copy + k;
            let region = self.device_addr(d.region_off(), d.len() as u64);
            let dram = d.dram() as u64;
            let (src, dst, extra) = match d.direction() {
                Direction::ToRegion => (dram, region, DURABLE_FLAGS),
                Direction::FromRegion => (region, dram, READ_FLAGS),
            };
            let desc = HwDesc::memmove(
                src,
                dst,
                d.len() as u32,
                COPY_FLAGS | extra,
                mem.member_cr(i) as u64,
            );
            // SAFETY: `i` < slots; no batch is in flight, so the list is ours.
            unsafe { mem.list().add(i).write(desc) };
            bytes += d.len() as u64;
        }
        let counter = self.device_addr(ch.core.counter_off, 8);
        let publish = HwDesc::memfill(
            last,
            counter,
            8,
            COPY_FLAGS | DURABLE_FLAGS | flags::FENCE,
            mem.member_cr(publish_at) as u64,
        );
        // SAFETY: publish_at <= descs.len() <= max_batch < slots.
        unsafe { mem.list().add(publish_at).write(publish) };
        bytes
    }

    /// # Safety
    /// As [`crate::Engine::try_submit`]; descriptors already validated.
    pub unsafe fn try_submit(&self, channel: u16, descs: &[Desc]) -> Result<Sn> {
        let ch = &self.chans[channel as usize];
        let mut st = ch.state.lock();
        self.reap_locked(ch, &mut st)?;
        if ch.stopped.load(Ordering::SeqCst) {
            return Err(Error::ShutDown { channel });
        }
        if st.inflight.is_some() || ch.suspended.load(Ordering::SeqCst) {
            return Err(Error::Busy {
                channel,
                free: 0,
                needed: descs.len(),
            });
        }
        if let Some(d) = descs.iter().find(|d| d.len() as u64 > ch.max_transfer) {
            return Err(Error::BadBatch(format!(
                "a {}-byte copy exceeds the work queue's maximum transfer of {} bytes",
                d.len(),
                ch.max_transfer
            )));
        }
        let mut next = ch.core.next.lock();
        let last = crate::channel::advance(channel, *next, descs.len())?;
        #[cfg(feature = "testing")]
        let corrupt = st.corrupt.take();
        let mem = &st.mem;
        mem.clear_records();
        let bytes = self.write_list(ch, mem, descs, last);
        #[cfg(feature = "testing")]
        if let Some(how) = corrupt {
            // SAFETY: entry 0 exists (batches are never empty) and is ours.
            let first = unsafe { &mut *mem.list() };
            match how {
                Corruption::InvalidFlags => first.set_flags(first.flags() | RESERVED_FLAG),
                Corruption::MisalignedCompletion => first.set_completion(first.completion() + 8),
            }
        }
        let batch = HwDesc::batch(
            mem.list() as u64,
            descs.len() as u32 + 1,
            flags::CRAV | flags::RCR,
            mem.batch_cr() as u64,
        );
        if !(0..ENQCMD_RETRIES).any(|_| ch.portal.submit(&batch)) {
            return Err(Error::Busy {
                channel,
                free: 0,
                needed: descs.len(),
            });
        }
        *next = last;
        ch.core.note_submitted(last);
        st.inflight = Some(InFlight {
            last,
            members: descs.len(),
            bytes,
            since: Instant::now(),
            accounted: false,
        });
        Ok(Sn::new(channel, last).expect("counter checked by advance"))
    }

    /// The device's address of region offset `off`, for `len` bytes.
    fn device_addr(&self, off: u64, len: u64) -> u64 {
        pmem::check_range(off, len, self.region.len());
        self.base + off
    }

    /// Checks the in-flight batch of `channel`; fails if the channel has failed.
    pub fn reap(&self, channel: u16) -> Result<()> {
        let ch = &self.chans[channel as usize];
        let mut st = ch.state.lock();
        self.reap_locked(ch, &mut st)
    }

    /// Called once the record of `channel` says `counter` is done. The batch that
    /// carried it wrote its counter fill, its last member, which runs only after every
    /// copy before it succeeded; the batch's own record comes a moment later. Counts the
    /// batch in the channel's statistics and queue depth now, so that they include it
    /// by the time its waiter returns; the batch stays in flight (its buffers are not
    /// reused) until a reap sees its record.
    pub fn settle(&self, channel: u16, counter: u64) {
        let ch = &self.chans[channel as usize];
        let mut st = ch.state.lock();
        if let Some(inf) = st.inflight.as_mut().filter(|inf| inf.last <= counter) {
            inf.account(&ch.core);
        }
    }

    fn reap_locked(&self, ch: &DsaChannel, st: &mut ChanState) -> Result<()> {
        let channel = ch.core.index;
        if let Some(err) = &st.failed {
            return Err(Error::Device {
                channel,
                error: err.clone(),
            });
        }
        let Some(inf) = &st.inflight else {
            return Ok(());
        };
        // SAFETY: the batch record lives in our buffers as long as the channel.
        let code = unsafe { Completion::status_at(st.mem.batch_cr()) } & status::MASK;
        let error = match code {
            // The device may raise a software error (a member it cannot report on) before
            // it writes the batch's record, while the batch's other members still copy
            // into the callers' buffers and write our records. The batch stays in flight
            // until its record comes; the error is kept to classify it then, so the error
            // does not depend on which of the two the reaper saw first.
            status::NONE => {
                if let Some(code) = ch.portal.take_software_error() {
                    st.swerr = Some(code);
                }
                return Ok(());
            }
            status::SUCCESS => {
                st.swerr = None;
                if let Some(mut inf) = st.inflight.take() {
                    inf.account(&ch.core);
                }
                return Ok(());
            }
            status::BATCH_FAIL => {
                let swerr = st.swerr.take().or_else(|| ch.portal.take_software_error());
                self.first_member_error(st, inf.members + 1, swerr)
            }
            _ => {
                // SAFETY: as above; the status was seen non-zero.
                DsaError::from_completion(&unsafe { Completion::read_at(st.mem.batch_cr()) })
            }
        };
        // The batch's record is written: the device is done with the batch, its members'
        // DRAM ranges and our buffers.
        st.inflight = None;
        st.swerr = None;
        st.failed = Some(error.clone());
        Err(Error::Device { channel, error })
    }

    /// The first failure among a failed batch's `n` list entries, given the software
    /// error the device reported, if any.
    fn first_member_error(&self, st: &ChanState, n: usize, swerr: Option<u8>) -> DsaError {
        for i in 0..n {
            // SAFETY: entry `i` < n <= slots was written by `try_submit`, and the batch
            // has completed, so the device no longer touches it.
            let desc = unsafe { st.mem.list().add(i).read() };
            if !desc.completion().is_multiple_of(hw::COMPLETION_ALIGN) {
                return DsaError::CompletionRecordAlign {
                    addr: desc.completion(),
                };
            }
            // SAFETY: the record of entry `i` is in our buffers.
            let c = unsafe { Completion::read_at(st.mem.member_cr(i)) };
            match c.status & status::MASK {
                status::SUCCESS => continue,
                // Not run: skipped by the fence after an earlier failure, or rejected
                // without a record (a software error says why).
                status::NONE => continue,
                _ => return DsaError::from_completion(&c),
            }
        }
        match swerr {
            Some(code) => DsaError::SoftwareError { code },
            None => DsaError::Status {
                code: status::BATCH_FAIL,
            },
        }
    }

    pub fn set_suspended(&self, channel: u16, suspended: bool) {
        self.chans[channel as usize]
            .suspended
            .store(suspended, Ordering::SeqCst);
    }

    pub fn is_suspended(&self, channel: u16) -> bool {
        self.chans[channel as usize]
            .suspended
            .load(Ordering::Relaxed)
    }

    #[cfg(feature = "testing")]
    pub fn corrupt_next(&self, channel: u16, how: Corruption) {
        self.chans[channel as usize].state.lock().corrupt = Some(how);
    }

    /// Refuses new batches and waits for the ones in flight.
    pub fn shutdown(&self) {
        for ch in &self.chans {
            ch.stopped.store(true, Ordering::SeqCst);
            let mut pause = crossbeam_utils::Backoff::new();
            loop {
                let mut st = ch.state.lock();
                if self.reap_locked(ch, &mut st).is_err() || st.inflight.is_none() {
                    break;
                }
                drop(st);
                if pause.is_completed() {
                    std::thread::sleep(std::time::Duration::from_micros(20));
                    pause = crossbeam_utils::Backoff::new();
                } else {
                    pause.snooze();
                }
            }
        }
    }
}
