//! `dma-sync` mode (NOVA-DMA, Fastmove §5): the engine copies bulk requests and the
//! caller waits for it. Fastmove's scheduler decides per request: below a size
//! threshold per direction the CPU copies; above the engine's concurrency limit the
//! CPU copies; otherwise the next channel round-robin. Bulk reads are split between
//! the engine and the CPU in the ratio of their measured bandwidths (moving averages),
//! so that both finish together (§5.3).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use engine::{Desc, Engine};
use pmem::Pmem;

use crate::{
    cpu_read, cpu_write, read_bytes, submit_all, wait_engine, write_bytes, Config, Mode, Mover,
    Pending, ReadPiece, Submitted, WritePiece,
};

/// Weight of a new bandwidth sample in the moving averages (1/8, as TCP's SRTT).
const EWMA_WEIGHT: f64 = 0.125;
/// Bandwidth both averages start from (bytes/s); only their ratio matters.
const INITIAL_BW: f64 = 1e9;

/// A bandwidth moving average shared by all callers (races lose a sample, nothing more).
struct Ewma(AtomicU64);

impl Ewma {
    fn new() -> Ewma {
        Ewma(AtomicU64::new(INITIAL_BW.to_bits()))
    }
    fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
    fn add(&self, bytes: usize, since: Instant) {
        let secs = since.elapsed().as_secs_f64();
        if bytes == 0 || secs <= 0.0 {
            return;
        }
        let sample = bytes as f64 / secs;
        let new = self.get() * (1.0 - EWMA_WEIGHT) + sample * EWMA_WEIGHT;
        self.0.store(new.to_bits(), Ordering::Relaxed);
    }
}

/// Fastmove's scheduler over one engine.
pub struct DmaSyncMover {
    pm: Arc<dyn Pmem>,
    engine: Arc<Engine>,
    write_min: usize,
    read_min: usize,
    limit: usize,
    in_flight: AtomicUsize,
    next: AtomicUsize,
    bw_cpu: Ewma,
    bw_dma: Ewma,
}

/// A slot under the engine's concurrency limit; released on drop.
struct Slot<'a>(&'a AtomicUsize);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl DmaSyncMover {
    /// A mover over `pm` that hands copies to `engine` and waits for each.
    pub fn new(pm: Arc<dyn Pmem>, engine: Arc<Engine>, cfg: &Config) -> DmaSyncMover {
        DmaSyncMover {
            pm,
            engine,
            write_min: cfg.dma_write_min,
            read_min: cfg.dma_read_min,
            limit: cfg.dma_concurrency,
            in_flight: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            bw_cpu: Ewma::new(),
            bw_dma: Ewma::new(),
        }
    }

    /// A slot on the engine if it is under its concurrency limit.
    fn slot(&self) -> Option<Slot<'_>> {
        if self.in_flight.fetch_add(1, Ordering::AcqRel) < self.limit {
            Some(Slot(&self.in_flight))
        } else {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            None
        }
    }

    fn channel(&self) -> u16 {
        (self.next.fetch_add(1, Ordering::Relaxed) % self.engine.channels()) as u16
    }

    /// The share of a bulk read the engine takes: B_D / (B_D + B_C).
    pub fn dma_share(&self) -> f64 {
        let (d, c) = (self.bw_dma.get(), self.bw_cpu.get());
        d / (d + c)
    }
}

impl Mover for DmaSyncMover {
    fn mode(&self) -> Mode {
        Mode::DmaSync
    }

    unsafe fn start_write(&self, pieces: &[WritePiece<'_>]) -> Pending {
        let bytes = write_bytes(pieces);
        let slot = if bytes >= self.write_min {
            self.slot()
        } else {
            None
        };
        if let Some(_slot) = slot {
            let descs: Vec<Desc> = pieces.iter().map(|p| Desc::write(p.src, p.dst)).collect();
            let t0 = Instant::now();
            // SAFETY: `pieces` stay borrowed until the wait right after returns, `Ok` or
            // `Err`, when the engine no longer reads them; a refused request has no batch
            // left running (`submit_all`).
            let done = unsafe { submit_all(&self.engine, self.channel(), &descs) }
                .map_err(crate::Error::from)
                .and_then(|sn| wait_engine(&self.engine, sn));
            if done.is_ok() {
                self.bw_dma.add(bytes, t0);
                return Pending::Done;
            }
            // The channel failed: the copy may be partial, so the CPU redoes it all.
        }
        let t0 = Instant::now();
        cpu_write(&*self.pm, pieces);
        self.bw_cpu.add(bytes, t0);
        Pending::Done
    }

    unsafe fn start_read(&self, pieces: &mut [ReadPiece<'_>]) -> Pending {
        let bytes = read_bytes(pieces);
        let slot = if bytes >= self.read_min {
            self.slot()
        } else {
            None
        };
        let Some(_slot) = slot else {
            let t0 = Instant::now();
            cpu_read(&*self.pm, pieces);
            self.bw_cpu.add(bytes, t0);
            return Pending::Done;
        };
        // The engine takes the front of the request, the CPU the rest.
        let dma_target = (bytes as f64 * self.dma_share()) as usize;
        let mut descs = Vec::new();
        let mut cpu_part: Vec<ReadPiece<'_>> = Vec::new();
        let mut assigned = 0usize;
        for p in pieces.iter_mut() {
            let len = p.dst.len();
            let take = dma_target.saturating_sub(assigned).min(len);
            let (front, back) = p.dst.split_at_mut(take);
            if !front.is_empty() {
                descs.push(Desc::read(p.src, front));
            }
            if !back.is_empty() {
                cpu_part.push(ReadPiece {
                    src: p.src + take as u64,
                    dst: back,
                });
            }
            assigned += take;
        }
        let t0 = Instant::now();
        let submitted = if descs.is_empty() {
            None
        } else {
            // SAFETY: the engine's part of `pieces` is disjoint from the CPU's, and stays
            // borrowed until the copy is waited out: below, or by the guard's drop if the
            // CPU's share panics first. A refused request has no batch left running.
            unsafe { submit_all(&self.engine, self.channel(), &descs) }
                .ok()
                .map(|sn| Submitted::new(&self.engine, sn))
        };
        if descs.is_empty() || submitted.is_some() {
            let tc = Instant::now();
            cpu_read(&*self.pm, &mut cpu_part);
            self.bw_cpu.add(bytes - assigned, tc);
        }
        match submitted.map(Submitted::wait) {
            Some(Ok(())) => self.bw_dma.add(assigned, t0),
            Some(Err(_)) | None if !descs.is_empty() => {
                // Submission or the channel failed: the CPU copies everything.
                drop(cpu_part);
                cpu_read(&*self.pm, pieces);
            }
            _ => {}
        }
        Pending::Done
    }

    fn engine(&self) -> Option<&Arc<Engine>> {
        Some(&self.engine)
    }
}
