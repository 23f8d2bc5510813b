//! What every backend keeps per channel: its record, its counters and its statistics.

use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use pmem::Pmem;

use crate::error::{Error, Result};
use crate::record;
use crate::sn::MAX_COUNTER;

/// A snapshot of one channel's statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChannelStats {
    /// Descriptors completed since the engine started.
    pub descriptors: u64,
    /// Bytes those descriptors moved.
    pub bytes: u64,
    /// Descriptors submitted and not yet completed.
    pub queue_depth: u64,
    /// Nanoseconds the channel spent copying and publishing.
    pub busy_ns: u64,
    /// Whether the channel is suspended.
    pub suspended: bool,
}

/// Counters and record of one channel, shared by the submitting side and whoever
/// completes (a worker thread, the caller, or the device's completion reaper).
pub(crate) struct ChannelCore {
    pub index: u16,
    /// Region offset of the counter word of this channel's persistent record.
    pub counter_off: u64,
    /// Region offset of the record's durable-counter word (for other processes).
    durable_off: u64,
    /// Last counter handed out; its lock orders submissions on the channel, so that
    /// counters enter the ring in increasing order.
    pub next: Mutex<u64>,
    /// Mirror of `next` readable without the lock (queue depth).
    submitted: CachePadded<AtomicU64>,
    /// Mirror of the persistent counter (queue depth), set only once the counter is
    /// durable by the software and cpu backends (the dsa backend also counts a batch
    /// it settles before the device wrote the record).
    completed: CachePadded<AtomicU64>,
    descriptors: AtomicU64,
    bytes: AtomicU64,
    busy_ns: AtomicU64,
    /// Set once the first stamp is written; until then every published counter is
    /// visible and [`ChannelCore::visible`] reads nothing else. On a cache line of its
    /// own, away from the statistics the worker updates, since every poll reads it.
    stamped: CachePadded<AtomicBool>,
    /// Modelled visibility of published counters ([`ChannelCore::stamp`]), slot
    /// `counter % STAMP_SLOTS`.
    stamps: Box<[Stamp]>,
    /// Origin of the stamps' nanosecond times.
    epoch: Instant,
}

/// Stamps a channel keeps: a slot is reused only once the stamp in it has passed, so a
/// completer far ahead of the model waits for the model instead of losing a stamp.
pub(crate) const STAMP_SLOTS: usize = 1024;

/// When one published counter becomes visible (nanoseconds since the channel's epoch).
#[derive(Default)]
struct Stamp {
    counter: AtomicU64,
    at: AtomicU64,
}

impl ChannelCore {
    pub fn new(index: u16, area_off: u64, counter: u64) -> ChannelCore {
        ChannelCore {
            index,
            counter_off: record::counter_off(area_off, index),
            durable_off: record::durable_off(area_off, index),
            next: Mutex::new(counter),
            submitted: CachePadded::new(AtomicU64::new(counter)),
            completed: CachePadded::new(AtomicU64::new(counter)),
            descriptors: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
            stamped: CachePadded::new(AtomicBool::new(false)),
            stamps: (0..STAMP_SLOTS).map(|_| Stamp::default()).collect(),
            epoch: Instant::now(),
        }
    }

    /// Makes `counter`, not yet published, count as done only from `at` on: its
    /// modelled completion on emulated slow memory, later than its real one. Called by
    /// the one thread that completes the channel, in counter order, with `at` not
    /// decreasing, so that visibility stays in FIFO order. If the slot still holds a
    /// stamp that lies ahead, sleeps until it has passed.
    pub fn stamp(&self, counter: u64, at: Instant) {
        self.stamped.store(true, Ordering::Release);
        let slot = &self.stamps[counter as usize % STAMP_SLOTS];
        let held = Duration::from_nanos(slot.at.load(Ordering::Relaxed));
        if slot.counter.load(Ordering::Relaxed) != 0 {
            let due = self.epoch + held;
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        let at = at.saturating_duration_since(self.epoch).as_nanos() as u64;
        // A sequence lock: the slot is marked in rewrite (0, no counter) before its time
        // changes, so a reader that finds the same counter before and after reading the
        // time has read that counter's own time.
        slot.counter.store(0, Ordering::Relaxed);
        fence(Ordering::Release);
        slot.at.store(at, Ordering::Relaxed);
        slot.counter.store(counter, Ordering::Release);
    }

    /// Whether a published `counter` is visible: it has no stamp, or its stamp has
    /// passed. A slot holding another counter means either no stamp was written for
    /// `counter` or a later one replaced it, which happens only after it passed.
    #[inline]
    pub fn visible(&self, counter: u64) -> bool {
        if !self.stamped.load(Ordering::Acquire) {
            return true;
        }
        let slot = &self.stamps[counter as usize % STAMP_SLOTS];
        if slot.counter.load(Ordering::Acquire) != counter {
            return true;
        }
        let at = slot.at.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        // Rewritten meanwhile: only once `counter`'s own stamp had passed.
        slot.counter.load(Ordering::Relaxed) != counter
            || self.epoch.elapsed().as_nanos() as u64 >= at
    }

    /// The highest published counter that is visible ([`ChannelCore::visible`]): stamps
    /// do not decrease along the counters, so a binary search over the ones still in
    /// the stamp table. Counters older than the table have passed (their slots were
    /// reused only then).
    fn visible_upto(&self, done: u64) -> u64 {
        if !self.stamped.load(Ordering::Acquire) || self.visible(done) {
            return done;
        }
        // Invariant: `hi` is not visible, `lo` is (or is below the table).
        // Counter 0 (nothing completed) is visible by definition.
        let (mut lo, mut hi) = (done.saturating_sub(STAMP_SLOTS as u64 - 1), done);
        if lo > 0 && !self.visible(lo) {
            return lo - 1;
        }
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.visible(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Records that counters up to `last` have been handed out (caller holds `next`).
    pub fn note_submitted(&self, last: u64) {
        self.submitted.store(last, Ordering::Release);
    }

    /// Descriptors submitted and not completed: two loads, no lock (on emulated slow
    /// memory, completed means visible: a few more loads while stamps lie ahead).
    pub fn queue_depth(&self) -> u64 {
        let done = self.visible_upto(self.completed.load(Ordering::Acquire));
        self.submitted.load(Ordering::Acquire).saturating_sub(done)
    }

    /// Makes `counter` the channel's durable completion counter. The caller has made
    /// every descriptor up to `counter` durable (copies fenced) before calling.
    pub fn publish(&self, pmem: &dyn Pmem, counter: u64) {
        pmem.store_u64(self.counter_off, counter);
        pmem.persist(self.counter_off, 8);
        // After the fence: a process that reads this word at or past `counter` knows
        // the counter is durable, not only stored. A hint (recovery never reads it),
        // so it needs no write-back of its own.
        pmem.store_u64(self.durable_off, counter);
        self.note_completed(counter);
    }

    /// Whether `counter` is durably completed as far as this process published it:
    /// the mirror that [`ChannelCore::publish`] sets only after the record's write-back
    /// and fence (on an engine opened after a crash, the counter the record held).
    #[inline]
    pub fn completed_durably(&self, counter: u64) -> bool {
        self.completed.load(Ordering::Acquire) >= counter
    }

    /// Updates the DRAM mirror once the record says `counter` (a device wrote it).
    pub fn note_completed(&self, counter: u64) {
        self.completed.store(counter, Ordering::Release);
    }

    pub fn account(&self, descriptors: u64, bytes: u64, busy_ns: u64) {
        self.descriptors.fetch_add(descriptors, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.busy_ns.fetch_add(busy_ns, Ordering::Relaxed);
    }

    pub fn stats(&self, suspended: bool) -> ChannelStats {
        ChannelStats {
            descriptors: self.descriptors.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            queue_depth: self.queue_depth(),
            busy_ns: self.busy_ns.load(Ordering::Relaxed),
            suspended,
        }
    }
}

/// The last counter of a batch of `n` after `next`, unless it passes [`MAX_COUNTER`].
pub(crate) fn advance(channel: u16, next: u64, n: usize) -> Result<u64> {
    next.checked_add(n as u64)
        .filter(|&last| last <= MAX_COUNTER)
        .ok_or(Error::Exhausted { channel })
}
