//! Crash states: the region images a real machine could hold after a power loss at a
//! given point of a [`Trace`].
//!
//! A crash point is a position `p` in the trace: events `0..p` happened, the rest did
//! not. At `p`, the image holds
//!
//! - every store whose line was written back and then fenced by the thread that wrote
//!   it back, and every non-temporal store followed by a fence of the thread that made
//!   it (a fence orders only its own thread's write-backs and streaming stores, as
//!   `sfence` does; the *durable* image, which a [`CrashCursor`] keeps up
//!   to date as it moves forward through the trace);
//! - for each cache line with stores not yet guaranteed durable, *some prefix* of those
//!   stores (the line may have been written back, by a flush or by eviction, at any
//!   moment, and stores to one line reach it in order);
//! - each pending non-temporal line store, in, out, or torn at word granularity.
//!
//! A [`CrashChoice`] picks one such image: [`CrashChoice::Nothing`] (no pending store
//! landed), [`CrashChoice::Everything`] (all did) or [`CrashChoice::Random`] with a
//! seed, so any image can be rebuilt exactly from (trace, position, choice).

use std::collections::BTreeMap;

use rand::{Rng, RngCore, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::trace::{EventKind, Trace, WORD};
use crate::CACHE_LINE;

const LINE: u64 = CACHE_LINE as u64;

/// Which of the images possible at a crash point to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CrashChoice {
    /// Only what is guaranteed durable.
    Nothing,
    /// Every store made before the crash point.
    Everything,
    /// A seeded sample of the pending stores.
    Random(u64),
}

impl std::fmt::Display for CrashChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CrashChoice::Nothing => write!(f, "none"),
            CrashChoice::Everything => write!(f, "all"),
            CrashChoice::Random(s) => write!(f, "random:{s:#x}"),
        }
    }
}

impl std::str::FromStr for CrashChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<CrashChoice, String> {
        match s {
            "none" => Ok(CrashChoice::Nothing),
            "all" => Ok(CrashChoice::Everything),
            _ => {
                let seed = s.strip_prefix("random:").ok_or_else(|| {
                    format!("crash state {s:?}: expected none, all or random:SEED")
                })?;
                let parsed = match seed.strip_prefix("0x") {
                    Some(hex) => u64::from_str_radix(hex, 16),
                    None => seed.parse(),
                };
                parsed
                    .map(CrashChoice::Random)
                    .map_err(|e| format!("crash state {s:?}: {e}"))
            }
        }
    }
}

/// Stores to one cache line not yet guaranteed durable.
#[derive(Clone, Debug, Default)]
struct PendingLine {
    /// Trace indices of the stores, in order.
    stores: Vec<usize>,
    /// Per thread that wrote the line back: how many of the stores its last
    /// write-back covered (durable at that thread's next fence).
    flushed: Vec<(u16, usize)>,
}

/// Walks a trace forward, keeping the durable image and the pending stores at the
/// current position, and builds crash images there.
pub struct CrashCursor<'t> {
    trace: &'t Trace,
    pos: usize,
    durable: Vec<u8>,
    lines: BTreeMap<u64, PendingLine>,
    nt: Vec<usize>,
}

impl<'t> CrashCursor<'t> {
    /// A cursor at position 0 (nothing happened yet).
    pub fn new(trace: &'t Trace) -> CrashCursor<'t> {
        CrashCursor {
            trace,
            pos: 0,
            durable: trace.base.clone(),
            lines: BTreeMap::new(),
            nt: Vec::new(),
        }
    }

    /// The current position.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Moves forward to `pos` (at most the trace length).
    ///
    /// # Panics
    /// If `pos` is behind the cursor or past the end of the trace.
    pub fn advance_to(&mut self, pos: usize) {
        assert!(
            pos >= self.pos && pos <= self.trace.len(),
            "crash cursor moves forward only, within the trace"
        );
        for i in self.pos..pos {
            let e = &self.trace.events[i];
            match e.kind {
                EventKind::Store => self.lines.entry(e.off / LINE).or_default().stores.push(i),
                EventKind::NtStore => self.nt.push(i),
                EventKind::Flush => {
                    if let Some(l) = self.lines.get_mut(&(e.off / LINE)) {
                        let n = l.stores.len();
                        match l.flushed.iter_mut().find(|f| f.0 == e.thread) {
                            Some(f) => f.1 = n,
                            None => l.flushed.push((e.thread, n)),
                        }
                    }
                }
                EventKind::Fence => self.fence(e.thread),
            }
        }
        self.pos = pos;
    }

    /// A fence by `thread`: its write-backs and non-temporal stores are durable.
    fn fence(&mut self, thread: u16) {
        let events = &self.trace.events;
        let (mut done, rest): (Vec<usize>, Vec<usize>) = std::mem::take(&mut self.nt)
            .into_iter()
            .partition(|&i| events[i].thread == thread);
        self.nt = rest;
        self.lines.retain(|_, l| {
            let Some(k) = l.flushed.iter().position(|f| f.0 == thread) else {
                return true;
            };
            let n = l.flushed.swap_remove(k).1;
            done.extend(l.stores.drain(..n));
            for f in &mut l.flushed {
                f.1 = f.1.saturating_sub(n);
            }
            l.flushed.retain(|f| f.1 > 0);
            !l.stores.is_empty()
        });
        done.sort_unstable();
        for i in done {
            apply(self.trace, &mut self.durable, i, u64::MAX);
        }
    }

    /// Only what is guaranteed durable at the current position.
    pub fn durable(&self) -> &[u8] {
        &self.durable
    }

    /// Cache lines with pending ordinary stores, and pending non-temporal line stores.
    pub fn pending(&self) -> (usize, usize) {
        (self.lines.len(), self.nt.len())
    }

    /// The distinct choices worth building here: `Nothing` alone when nothing is
    /// pending, else `Nothing`, `Everything` and `random` seeded samples.
    pub fn choices(&self, random: usize, seed: u64) -> Vec<CrashChoice> {
        if self.lines.is_empty() && self.nt.is_empty() {
            return vec![CrashChoice::Nothing];
        }
        let mut out = vec![CrashChoice::Nothing, CrashChoice::Everything];
        let mut rng =
            Pcg64Mcg::seed_from_u64(seed ^ (self.pos as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        out.extend((0..random).map(|_| CrashChoice::Random(rng.next_u64())));
        out
    }

    /// The image a crash here leaves under `choice`.
    pub fn image(&self, choice: CrashChoice) -> Vec<u8> {
        let mut img = self.durable.clone();
        // (trace index, word mask: which 8-byte words of the store land)
        let mut landed: Vec<(usize, u64)> = Vec::new();
        match choice {
            CrashChoice::Nothing => {}
            CrashChoice::Everything => {
                for l in self.lines.values() {
                    landed.extend(l.stores.iter().map(|&i| (i, u64::MAX)));
                }
                landed.extend(self.nt.iter().map(|&i| (i, u64::MAX)));
            }
            CrashChoice::Random(seed) => self.sample(seed, &mut landed),
        }
        landed.sort_unstable();
        for (i, mask) in landed {
            apply(self.trace, &mut img, i, mask);
        }
        img
    }

    /// A seeded sample. Three shapes, so that both widespread loss and a single
    /// reordering are likely to be drawn: every line an independent prefix; every
    /// line complete but one; every line empty but one.
    fn sample(&self, seed: u64, landed: &mut Vec<(usize, u64)>) {
        let mut rng = Pcg64Mcg::seed_from_u64(seed);
        let units = self.lines.len() + self.nt.len();
        let shape = below(&mut rng, 3);
        let special = below(&mut rng, units as u64) as usize;
        for (u, l) in self.lines.values().enumerate() {
            let n = l.stores.len() as u64;
            let keep = match shape {
                0 => below(&mut rng, n + 1),
                1 if u == special => below(&mut rng, n),
                1 => n,
                _ if u == special => 1 + below(&mut rng, n),
                _ => 0,
            };
            landed.extend(l.stores[..keep as usize].iter().map(|&i| (i, u64::MAX)));
        }
        for (k, &i) in self.nt.iter().enumerate() {
            let u = self.lines.len() + k;
            let mask = match shape {
                0 => match below(&mut rng, 3) {
                    0 => 0,
                    1 => u64::MAX,
                    _ => rng.next_u64(),
                },
                1 if u == special => rng.next_u64() & !1,
                1 => u64::MAX,
                _ if u == special => rng.next_u64() | 1,
                _ => 0,
            };
            if mask != 0 {
                landed.push((i, mask));
            }
        }
    }
}

/// Uniform in `0..n` (0 when `n` is 0).
fn below(rng: &mut Pcg64Mcg, n: u64) -> u64 {
    if n == 0 {
        0
    } else {
        rng.random_range(0..n)
    }
}

/// Applies store `i` of the trace to `img`; for a non-temporal store, only the words
/// whose bit is set in `mask` (bit k: the k-th word of the line).
fn apply(trace: &Trace, img: &mut [u8], i: usize, mask: u64) {
    let e = &trace.events[i];
    let data = trace.data_of(e);
    let off = e.off as usize;
    if e.kind != EventKind::NtStore || mask == u64::MAX {
        img[off..off + data.len()].copy_from_slice(data);
        return;
    }
    for (w, chunk) in data.chunks(WORD as usize).enumerate() {
        let word = (e.off % LINE) / WORD + w as u64;
        if mask & (1 << word) != 0 {
            let at = off + w * WORD as usize;
            img[at..at + chunk.len()].copy_from_slice(chunk);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TracePmem;
    use crate::Pmem;

    fn word(img: &[u8], off: usize) -> u64 {
        u64::from_le_bytes(img[off..off + 8].try_into().unwrap())
    }

    #[test]
    fn flushed_and_fenced_is_durable_and_the_rest_is_optional() {
        let t = TracePmem::new(vec![0; 4096]);
        t.store_u64(0, 1);
        t.store_u64(64, 2);
        t.flush(0, 8);
        let before_fence = t.position();
        t.fence();
        let after_fence = t.position();
        t.store_u64(8, 3); // same line as the first, after its write-back
        let tr = t.trace();
        let mut c = CrashCursor::new(&tr);
        c.advance_to(before_fence);
        assert_eq!(c.pending(), (2, 0));
        let none = c.image(CrashChoice::Nothing);
        assert_eq!((word(&none, 0), word(&none, 64)), (0, 0));
        let all = c.image(CrashChoice::Everything);
        assert_eq!((word(&all, 0), word(&all, 64)), (1, 2));
        c.advance_to(after_fence);
        assert_eq!(c.pending(), (1, 0), "the unflushed line stays pending");
        assert_eq!(word(c.durable(), 0), 1);
        assert_eq!(word(c.durable(), 64), 0);
        c.advance_to(tr.len());
        let none = c.image(CrashChoice::Nothing);
        assert_eq!((word(&none, 0), word(&none, 8)), (1, 0));
    }

    #[test]
    fn a_line_holds_a_prefix_of_its_stores() {
        let t = TracePmem::new(vec![0; 4096]);
        for k in 0..8u64 {
            t.store_u64(k * 8, k + 1);
        }
        let tr = t.trace();
        let mut c = CrashCursor::new(&tr);
        c.advance_to(tr.len());
        for choice in c.choices(200, 7) {
            let img = c.image(choice);
            let words: Vec<u64> = (0..8).map(|k| word(&img, k * 8)).collect();
            let n = words.iter().take_while(|&&w| w != 0).count();
            assert!(words[n..].iter().all(|&w| w == 0), "{choice}: {words:?}");
            assert!(words[..n]
                .iter()
                .enumerate()
                .all(|(k, &w)| w == k as u64 + 1));
        }
    }

    #[test]
    fn non_temporal_stores_land_after_a_fence_and_may_tear_before() {
        let t = TracePmem::new(vec![0; 8192]);
        t.copy_nt(0, &[0xAB; 4096]);
        let tr = t.trace();
        let mut c = CrashCursor::new(&tr);
        c.advance_to(tr.len());
        assert_eq!(c.pending(), (0, 64));
        let torn = c
            .choices(50, 1)
            .into_iter()
            .map(|ch| c.image(ch))
            .any(|img| img[..4096].contains(&0) && img[..4096].contains(&0xAB));
        assert!(torn, "some sampled state holds part of the copy");
        t.fence();
        let tr = t.trace();
        let mut c = CrashCursor::new(&tr);
        c.advance_to(tr.len());
        assert_eq!(c.pending(), (0, 0));
        assert!(c.image(CrashChoice::Nothing)[..4096]
            .iter()
            .all(|&b| b == 0xAB));
    }

    #[test]
    fn a_fence_orders_only_its_own_threads_write_backs() {
        let t = std::sync::Arc::new(TracePmem::new(vec![0; 8192]));
        t.store_u64(0, 1);
        t.flush(0, 8);
        t.copy_nt(4096, &[7; 4096]);
        let other = t.clone();
        std::thread::spawn(move || {
            other.store_u64(64, 2);
            other.flush(64, 8);
            other.fence();
        })
        .join()
        .unwrap();
        let tr = t.trace();
        assert_eq!(tr.threads.len(), 2);
        let mut c = CrashCursor::new(&tr);
        c.advance_to(tr.len());
        assert_eq!(word(c.durable(), 64), 2, "the other thread's own fence");
        assert_eq!(word(c.durable(), 0), 0, "our write-back is not fenced yet");
        assert_eq!(c.pending(), (1, 64));
        t.fence();
        let tr = t.trace();
        let mut c = CrashCursor::new(&tr);
        c.advance_to(tr.len());
        assert_eq!(c.pending(), (0, 0));
        assert_eq!(word(c.durable(), 0), 1);
        assert_eq!(c.durable()[8191], 7);
    }

    #[test]
    fn choices_replay_exactly_and_parse_back() {
        let t = TracePmem::new(vec![0; 4096]);
        t.write(0, &[5; 200]);
        let tr = t.trace();
        let mut c = CrashCursor::new(&tr);
        c.advance_to(tr.len());
        for ch in c.choices(5, 42) {
            assert_eq!(c.image(ch), c.image(ch));
            assert_eq!(ch.to_string().parse::<CrashChoice>().unwrap(), ch);
        }
        assert!("bogus".parse::<CrashChoice>().is_err());
    }
}
