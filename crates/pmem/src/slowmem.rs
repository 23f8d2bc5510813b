//! Slow-memory emulation for machines without slow memory: a model of the medium's
//! read and write bandwidth and access latency, shared by every copy into or out of the
//! region. Results measured with it are emulated and must be labelled so.
//!
//! Each direction of the medium keeps a timeline of reserved transfer time, so that
//! concurrent copies share its bandwidth; a copy completes one access latency after its
//! transfer ends.
//!
//! - A CPU copy moves in [`CHUNK`]-byte pieces (the medium's interleave unit) and
//!   *stalls* — spins — until each piece's transfer ends, as a CPU does on slow memory.
//!   A piece waits in full behind the pieces other CPU copies reserved before it, but
//!   behind the transfers a copy engine has queued for at most one piece: an engine's
//!   transfer enters the medium at the medium's pace, interleaved with the CPU's
//!   stores, so a small store does not wait for the whole of it. Its bytes still delay
//!   every later reservation, so the medium's bandwidth holds over time.
//! - A copy engine thread calls [`defer_stalls`] once: its copies then reserve their
//!   whole transfer at once, in order, move at DRAM speed and record their modelled
//!   completion, which the engine reads with [`deferred_deadline`] and reports its
//!   copies done no earlier than; the modelled time passes without burning a core.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::{Durability, Pmem};

/// Bytes a copy moves per reservation of the medium: the 4 KiB at which the memory
/// controller interleaves Optane DIMMs (OdinFS §3.2).
pub const CHUNK: usize = 4096;

/// A slow medium.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Model {
    /// Preset name, printed beside every emulated result.
    pub name: &'static str,
    /// Read bandwidth of the whole medium, bytes per second.
    pub read_bw: f64,
    /// Write bandwidth of the whole medium, bytes per second.
    pub write_bw: f64,
    /// Added to every read, after its transfer.
    pub read_latency: Duration,
    /// Added to every write, after its transfer.
    pub write_latency: Duration,
    /// Bandwidth one CPU core's copy into the medium reaches on its own, bytes per
    /// second, if less than the medium's: a core keeps only a few writes in flight, so
    /// on a medium with long write latency one core cannot fill the medium's bandwidth
    /// (EASYIO §2.2: "memcpy requires multiple cores"). Copies of copy-engine threads
    /// are not limited by it. `None`: a core can fill the medium.
    pub cpu_write_bw: Option<f64>,
    /// Where the figures come from.
    pub source: &'static str,
}

impl Model {
    /// Intel Optane DC persistent memory as measured on EASYIO's test machine: peak
    /// read 37.6 GB/s and write 13.2 GB/s (EASYIO §6.1); read latency set so that a
    /// 4 KiB read takes 952 ns (Fastmove §2.2); write latency 90 ns for a write-back to
    /// the persistence domain (an assumption; the seeds give no figure). One core writes
    /// at most 2.5 GB/s: the slope of Fastmove's single-thread CPU-copy write latencies
    /// (Table 4, local: 8.7 µs at 16 KiB to 106.2 µs at 256 KiB, 97.5 µs per 240 KiB).
    pub const OPTANE: Model = Model {
        name: "optane",
        read_bw: 37.6e9,
        write_bw: 13.2e9,
        read_latency: Duration::from_nanos(843),
        write_latency: Duration::from_nanos(90),
        cpu_write_bw: Some(2.5e9),
        source: "EASYIO §6.1 bandwidths, Fastmove §2.2 4 KiB read time, Fastmove Table 4 \
                 one-core write bandwidth",
    };

    /// A CXL type-3 memory expander on a PCIe 5.0 x8 link: about 26 GB/s each way and
    /// 270 ns added latency (approximate public vendor figures, not from the seeds).
    pub const CXL: Model = Model {
        name: "cxl",
        read_bw: 26e9,
        write_bw: 26e9,
        read_latency: Duration::from_nanos(270),
        write_latency: Duration::from_nanos(270),
        cpu_write_bw: None,
        source: "approximate figures for a PCIe 5.0 x8 CXL expander",
    };

    /// A preset by name (`optane`, `cxl`).
    pub fn preset(name: &str) -> Option<Model> {
        match name {
            "optane" => Some(Model::OPTANE),
            "cxl" => Some(Model::CXL),
            _ => None,
        }
    }
}

thread_local! {
    static DEFER: Cell<bool> = const { Cell::new(false) };
    static DEADLINE: Cell<u64> = const { Cell::new(0) };
}

/// Makes this thread's copies through a [`SlowMem`] record their modelled completion
/// instead of spinning for it (for copy engine threads).
pub fn defer_stalls() {
    DEFER.with(|d| d.set(true));
    // The sleeps of a deferring thread model copies of microseconds: without this the
    // default 50 µs timer slack would stretch each of them several-fold.
    // SAFETY: PR_SET_TIMERSLACK only changes the calling thread's timer slack.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1usize, 0usize, 0usize, 0usize) };
}

/// The latest modelled completion of this thread's deferred copies since the last
/// call, if it lies in the future; resets it.
pub fn deferred_deadline() -> Option<Instant> {
    let ns = DEADLINE.with(|d| d.replace(0));
    let at = base() + Duration::from_nanos(ns);
    (ns != 0 && at > Instant::now()).then_some(at)
}

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    base().elapsed().as_nanos() as u64
}

/// A region whose copies take as long as the model says.
pub struct SlowMem {
    inner: Arc<dyn Pmem>,
    model: Model,
    read: Lane,
    write: Lane,
}

impl SlowMem {
    /// Wraps `inner` with `model`.
    pub fn new(inner: Arc<dyn Pmem>, model: Model) -> SlowMem {
        SlowMem {
            inner,
            model,
            read: Lane::new(model.read_bw),
            write: Lane::new(model.write_bw),
        }
    }

    /// The model in force.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Moves `len` bytes with `copy(start, end)` (offsets into the copy) and stalls
    /// or records until the copy completes. A deferring (engine) thread reserves the
    /// whole transfer at once; a CPU copy moves and stalls piece by piece.
    fn timed(&self, len: usize, write: bool, mut copy: impl FnMut(usize, usize)) {
        let (lane, lat) = if write {
            (&self.write, self.model.write_latency)
        } else {
            (&self.read, self.model.read_latency)
        };
        let lat = lat.as_nanos() as u64;
        if DEFER.with(Cell::get) {
            let now = now_ns();
            let done = push(&lane.busy, now, lane.transfer(len)) + lane.transfer(len);
            copy(0, len);
            DEADLINE.with(|d| d.set(d.get().max(done + lat)));
            return;
        }
        let (mut start, mut done) = (0, 0);
        loop {
            let end = len.min(start + CHUNK);
            done = self.reserve_cpu(lane, end - start, write).max(done);
            copy(start, end);
            start = end;
            if start >= len {
                break;
            }
            spin_until(done);
        }
        spin_until(done + lat);
    }

    /// Reserves `lane` for one piece of a CPU copy and returns when its transfer ends.
    fn reserve_cpu(&self, lane: &Lane, bytes: usize, write: bool) -> u64 {
        let transfer = lane.transfer(bytes);
        let now = now_ns();
        let cpu_start = push(&lane.cpu_busy, now, transfer);
        let all_start = push(&lane.busy, now, transfer);
        // Behind other CPU copies' pieces in full; behind transfers an engine has queued
        // for at most one piece of them, since those enter the medium at its pace,
        // interleaved with the CPU's stores. The engine's transfers already reserved
        // are not pushed back in turn, so while an engine runs ahead of the model the
        // medium briefly delivers more than its bandwidth (up to twice, for as long as
        // the engine's lead); the CPU's bytes still delay every later reservation.
        let start = cpu_start.max(all_start.min(now + lane.chunk_ns));
        // A core's own copy may be slower than its share of the medium.
        let core_end = match self.model.cpu_write_bw {
            Some(cpu_bw) if write => now + (bytes as f64 / cpu_bw * 1e9) as u64,
            _ => 0,
        };
        (start + transfer).max(core_end)
    }
}

/// One direction of the medium: its timelines (ns since [`base`]).
struct Lane {
    /// End of every transfer reserved so far.
    busy: AtomicU64,
    /// End of the transfers CPU copies reserved.
    cpu_busy: AtomicU64,
    ns_per_byte: f64,
    /// Transfer time of one [`CHUNK`].
    chunk_ns: u64,
}

impl Lane {
    fn new(bw: f64) -> Lane {
        let ns_per_byte = 1e9 / bw;
        Lane {
            busy: AtomicU64::new(0),
            cpu_busy: AtomicU64::new(0),
            ns_per_byte,
            chunk_ns: (CHUNK as f64 * ns_per_byte) as u64,
        }
    }

    fn transfer(&self, bytes: usize) -> u64 {
        (bytes as f64 * self.ns_per_byte) as u64
    }
}

/// Appends a transfer of `transfer` ns to a timeline, starting no earlier than `now`;
/// returns its start.
fn push(timeline: &AtomicU64, now: u64, transfer: u64) -> u64 {
    let mut cur = timeline.load(Ordering::Relaxed);
    loop {
        let start = cur.max(now);
        match timeline.compare_exchange_weak(
            cur,
            start + transfer,
            Ordering::AcqRel,
            Ordering::Relaxed,
        ) {
            Ok(_) => return start,
            Err(c) => cur = c,
        }
    }
}

fn spin_until(ns: u64) {
    while now_ns() < ns {
        std::hint::spin_loop();
    }
}

impl Pmem for SlowMem {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn protection_key(&self) -> Option<u32> {
        self.inner.protection_key()
    }
    fn durability(&self) -> Durability {
        self.inner.durability()
    }
    fn write(&self, off: u64, src: &[u8]) {
        self.timed(src.len(), true, |a, b| {
            self.inner.write(off + a as u64, &src[a..b])
        });
    }
    fn store_u64(&self, off: u64, val: u64) {
        self.inner.store_u64(off, val);
    }
    fn load_u64(&self, off: u64) -> u64 {
        self.inner.load_u64(off)
    }
    fn read(&self, off: u64, dst: &mut [u8]) {
        self.timed(dst.len(), false, |a, b| {
            self.inner.read(off + a as u64, &mut dst[a..b])
        });
    }
    fn flush(&self, off: u64, len: u64) {
        self.inner.flush(off, len);
    }
    fn fence(&self) {
        self.inner.fence();
    }
    fn take_sync_error(&self) -> Option<crate::Error> {
        self.inner.take_sync_error()
    }
    fn copy_nt(&self, off: u64, src: &[u8]) {
        self.timed(src.len(), true, |a, b| {
            self.inner.copy_nt(off + a as u64, &src[a..b])
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Region;

    #[test]
    fn copies_take_the_modelled_time_and_share_bandwidth() {
        let r: Arc<dyn Pmem> = Arc::new(Region::create_temp(8 << 20).unwrap());
        let slow = SlowMem::new(
            r,
            Model {
                name: "test",
                read_bw: 1e9,
                write_bw: 1e9,
                read_latency: Duration::from_micros(50),
                write_latency: Duration::from_micros(50),
                cpu_write_bw: None,
                source: "test",
            },
        );
        let buf = vec![1u8; 1 << 20];
        // 1 MiB at 1 GB/s is ~1 ms, plus 50 µs: the call cannot return sooner.
        let t0 = Instant::now();
        slow.copy_nt(0, &buf);
        assert!(t0.elapsed() >= Duration::from_micros(1_000));
        // A deferring thread returns at once but learns the completion time.
        let t0 = Instant::now();
        let deadline = std::thread::scope(|s| {
            s.spawn(|| {
                defer_stalls();
                slow.copy_nt(0, &buf);
                deferred_deadline()
            })
            .join()
            .unwrap()
        });
        let deadline = deadline.expect("a deadline in the future");
        assert!(deadline >= t0 + Duration::from_micros(1_000));
        let mut back = vec![0u8; 1 << 20];
        slow.read(0, &mut back);
        assert_eq!(back, buf);
    }

    #[test]
    fn one_core_writes_at_most_its_own_bandwidth_but_an_engine_fills_the_medium() {
        let r: Arc<dyn Pmem> = Arc::new(Region::create_temp(8 << 20).unwrap());
        let slow = SlowMem::new(
            r,
            Model {
                name: "test",
                read_bw: 10e9,
                write_bw: 10e9,
                read_latency: Duration::ZERO,
                write_latency: Duration::ZERO,
                cpu_write_bw: Some(1e9),
                source: "test",
            },
        );
        let buf = vec![1u8; 1 << 20];
        // 1 MiB: 0.1 ms of the medium, but 1 ms at one core's 1 GB/s.
        let t0 = Instant::now();
        slow.copy_nt(0, &buf);
        assert!(t0.elapsed() >= Duration::from_micros(1_000));
        // Reads are not limited per core.
        let mut back = vec![0u8; 1 << 20];
        let t0 = Instant::now();
        slow.read(0, &mut back);
        let read = t0.elapsed();
        // An engine thread's copy completes at the medium's pace.
        let (t0, deadline) = std::thread::scope(|s| {
            s.spawn(|| {
                defer_stalls();
                let t0 = Instant::now();
                slow.copy_nt(1 << 20, &buf);
                (t0, deadline_or_now())
            })
            .join()
            .unwrap()
        });
        assert!(
            deadline < t0 + Duration::from_micros(1_000),
            "the engine's copy was held to one core's bandwidth"
        );
        assert!(read < Duration::from_micros(1_000), "a read took {read:?}");
    }

    fn gigabyte_per_second() -> SlowMem {
        let r: Arc<dyn Pmem> = Arc::new(Region::create_temp(48 << 20).unwrap());
        SlowMem::new(
            r,
            Model {
                name: "test",
                read_bw: 1e9,
                write_bw: 1e9,
                read_latency: Duration::ZERO,
                write_latency: Duration::ZERO,
                cpu_write_bw: None,
                source: "test",
            },
        )
    }

    #[test]
    fn cpu_copies_share_the_bandwidth_piece_by_piece() {
        let slow = gigabyte_per_second();
        // Two CPU copies of 8 MiB at once: together 16.8 ms of the medium, so the
        // later one cannot finish before that; a 64-byte copy started meanwhile waits
        // behind at most a piece of each, not behind what is left of them.
        let long = vec![3u8; 8 << 20];
        let small = [4u8; 64];
        let t0 = Instant::now();
        let (a, b, took) = std::thread::scope(|s| {
            let one = s.spawn(|| {
                slow.copy_nt(0, &long);
                t0.elapsed()
            });
            let two = s.spawn(|| {
                slow.copy_nt(8 << 20, &long);
                t0.elapsed()
            });
            std::thread::sleep(Duration::from_millis(2));
            let t1 = Instant::now();
            slow.copy_nt(40 << 20, &small);
            let took = t1.elapsed();
            (one.join().unwrap(), two.join().unwrap(), took)
        });
        assert!(a.max(b) >= Duration::from_micros(16_777), "{a:?} {b:?}");
        assert!(took < Duration::from_millis(8), "64 bytes took {took:?}");
    }

    #[test]
    fn a_cpu_store_waits_for_a_piece_of_an_engines_queue_not_all_of_it() {
        let slow = gigabyte_per_second();
        let long = vec![3u8; 16 << 20];
        // The engine queues 16 MiB: 16.8 ms of the medium, recorded, not waited for.
        let engine_done = std::thread::scope(|s| {
            s.spawn(|| {
                defer_stalls();
                slow.copy_nt(0, &long);
                deferred_deadline().expect("a deadline ahead")
            })
            .join()
            .unwrap()
        });
        let t0 = Instant::now();
        slow.copy_nt(20 << 20, &[4u8; 64]);
        let took = t0.elapsed();
        assert!(took < Duration::from_millis(8), "64 bytes took {took:?}");
        // Its bytes still count: the engine's next transfer queues behind them too.
        let next = std::thread::scope(|s| {
            s.spawn(|| {
                defer_stalls();
                slow.copy_nt(24 << 20, &[5u8; 4096]);
                deferred_deadline().expect("a deadline ahead")
            })
            .join()
            .unwrap()
        });
        assert!(next >= engine_done + Duration::from_nanos(64 + 4096));
    }

    fn deadline_or_now() -> Instant {
        deferred_deadline().unwrap_or_else(Instant::now)
    }

    #[test]
    fn presets_are_found_by_name() {
        assert_eq!(Model::preset("optane"), Some(Model::OPTANE));
        assert_eq!(Model::preset("cxl"), Some(Model::CXL));
        assert_eq!(Model::preset("dram"), None);
    }
}
