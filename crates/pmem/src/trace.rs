//! The crash tracer: a [`Pmem`] that records, in order, every store, cache-line
//! write-back and fence made to it, at the granularity the hardware gives.
//!
//! What the x86 persistence model promises, and so what a [`Trace`] keeps:
//!
//! - An ordinary store reaches the region only when its cache line is written back,
//!   and then the whole 64-byte line goes as it is at that moment. Stores to one line
//!   reach it in program order, and only an aligned 8-byte store is failure-atomic, so
//!   every ordinary store is recorded as pieces that each lie inside one aligned
//!   8-byte word ([`EventKind::Store`]).
//! - A write-back ([`EventKind::Flush`], one per line) is guaranteed complete only
//!   after the next fence ([`EventKind::Fence`]).
//! - A non-temporal store bypasses the cache and is guaranteed durable after the next
//!   fence; before it, any part of it may or may not have landed
//!   ([`EventKind::NtStore`], one per line of a copy).
//!
//! [`TracePmem::copy_nt`] makes the same choice as the real copy
//! ([`crate::persist::copy_nt`]): copies shorter than [`NT_MIN_BYTES`] and the partial
//! lines at either end of longer ones are ordinary stores plus write-back.
//!
//! One lock orders everything: the file system's threads and the engines' workers may
//! write concurrently and the trace is the single order in which the region saw it.
//! Every event also records the thread that made it ([`Event::thread`]): a fence
//! orders only its own thread's write-backs and non-temporal stores, as `sfence` does.
//! [`crate::crash`] turns a trace into the images a power loss could leave.

use std::sync::{Mutex, MutexGuard};

/// What a registered thread is for ([`Trace::role_of`]).
pub use threads::Role;

use crate::persist::NT_MIN_BYTES;
use crate::{check_range, check_word, Durability, Pmem, CACHE_LINE};

/// Bytes of the unit of failure atomicity: an aligned word.
pub const WORD: u64 = 8;
const LINE: u64 = CACHE_LINE as u64;

/// First bytes of a saved trace.
const TRACE_MAGIC: &[u8; 8] = b"EIOTRAC2";

/// What one trace event is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum EventKind {
    /// An ordinary (cached) store of 1..=8 bytes inside one aligned word.
    Store,
    /// A non-temporal store of 1..=64 bytes inside one cache line.
    NtStore,
    /// Write-back of the cache line at `off` (64-byte aligned).
    Flush,
    /// Store fence.
    Fence,
}

/// One event of a trace. The bytes of a store are in [`Trace::data_of`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// What the event is.
    pub kind: EventKind,
    /// Region offset of the store, or of the flushed line.
    pub off: u64,
    /// Bytes stored (0 for flushes and fences).
    pub len: u32,
    /// The thread that made it: an index into [`Trace::threads`].
    pub thread: u16,
    data_at: u32,
}

/// Everything a [`TracePmem`] saw: the image it started from and its events.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// The region's contents when tracing began, all of it durable.
    pub base: Vec<u8>,
    /// Events in the order the region saw them.
    pub events: Vec<Event>,
    /// Names of the threads that made events, in order of their first event
    /// (`?` for an unnamed thread).
    pub threads: Vec<String>,
    /// The role each thread of [`Trace::threads`] was registered under
    /// ([`threads::register`]), if any: what a thread is for, without reading its name.
    pub roles: Vec<Option<Role>>,
    data: Vec<u8>,
    /// Thread of the events being recorded.
    current: u16,
}

impl Trace {
    /// The bytes stored by event `e` (empty for flushes and fences).
    pub fn data_of(&self, e: &Event) -> &[u8] {
        &self.data[e.data_at as usize..e.data_at as usize + e.len as usize]
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The name of the thread that made event `e`.
    pub fn thread_of(&self, e: &Event) -> &str {
        &self.threads[e.thread as usize]
    }

    /// The role of the thread that made event `e`, if it was registered under one.
    pub fn role_of(&self, e: &Event) -> Option<Role> {
        self.roles[e.thread as usize]
    }

    /// Counts of (stores, non-temporal stores, flushes, fences).
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        let mut c = (0, 0, 0, 0);
        for e in &self.events {
            match e.kind {
                EventKind::Store => c.0 += 1,
                EventKind::NtStore => c.1 += 1,
                EventKind::Flush => c.2 += 1,
                EventKind::Fence => c.3 += 1,
            }
        }
        c
    }

    /// The trace as bytes ([`Trace::from_bytes`] reads them back): a run whose
    /// interleaving of threads cannot be reproduced is replayed from its saved trace.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b =
            Vec::with_capacity(self.base.len() + self.data.len() + self.events.len() * 19 + 64);
        b.extend_from_slice(TRACE_MAGIC);
        let put = |b: &mut Vec<u8>, bytes: &[u8]| {
            b.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            b.extend_from_slice(bytes);
        };
        put(&mut b, &self.base);
        put(&mut b, &self.data);
        b.extend_from_slice(&(self.threads.len() as u64).to_le_bytes());
        for (t, role) in self.threads.iter().zip(&self.roles) {
            put(&mut b, t.as_bytes());
            b.push(role.map_or(0, Role::code));
        }
        b.extend_from_slice(&(self.events.len() as u64).to_le_bytes());
        for e in &self.events {
            b.push(e.kind as u8);
            b.extend_from_slice(&e.off.to_le_bytes());
            b.extend_from_slice(&e.len.to_le_bytes());
            b.extend_from_slice(&e.thread.to_le_bytes());
            b.extend_from_slice(&e.data_at.to_le_bytes());
        }
        b
    }

    /// Reads a trace written by [`Trace::to_bytes`], checking that every event lies
    /// inside the base image and its data inside the trace.
    pub fn from_bytes(mut b: &[u8]) -> Result<Trace, String> {
        fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
            if b.len() < n {
                return Err("trace file is truncated".into());
            }
            let (h, t) = b.split_at(n);
            *b = t;
            Ok(h)
        }
        fn int<const N: usize>(b: &mut &[u8]) -> Result<[u8; N], String> {
            Ok(take(b, N)?.try_into().unwrap())
        }
        fn count(b: &mut &[u8]) -> Result<usize, String> {
            usize::try_from(u64::from_le_bytes(int(b)?)).map_err(|e| e.to_string())
        }
        fn blob(b: &mut &[u8]) -> Result<Vec<u8>, String> {
            let n = count(b)?;
            Ok(take(b, n)?.to_vec())
        }
        if take(&mut b, TRACE_MAGIC.len())? != TRACE_MAGIC {
            return Err("not an easyio trace file".into());
        }
        let base = blob(&mut b)?;
        let data = blob(&mut b)?;
        let (mut threads, mut roles) = (Vec::new(), Vec::new());
        for _ in 0..count(&mut b)? {
            threads.push(String::from_utf8(blob(&mut b)?).map_err(|e| e.to_string())?);
            roles.push(match int::<1>(&mut b)?[0] {
                0 => None,
                code => Some(Role::from_code(code).ok_or(format!("unknown role {code}"))?),
            });
        }
        let n = count(&mut b)?;
        let mut events = Vec::with_capacity(n.min(b.len() / 19));
        for _ in 0..n {
            let kind = match int::<1>(&mut b)?[0] {
                0 => EventKind::Store,
                1 => EventKind::NtStore,
                2 => EventKind::Flush,
                3 => EventKind::Fence,
                k => return Err(format!("unknown event kind {k}")),
            };
            let e = Event {
                kind,
                off: u64::from_le_bytes(int(&mut b)?),
                len: u32::from_le_bytes(int(&mut b)?),
                thread: u16::from_le_bytes(int(&mut b)?),
                data_at: u32::from_le_bytes(int(&mut b)?),
            };
            let in_base = e
                .off
                .checked_add(e.len.max(1) as u64)
                .is_some_and(|end| end <= base.len() as u64);
            let in_data = (e.data_at as usize)
                .checked_add(e.len as usize)
                .is_some_and(|end| end <= data.len());
            if !in_base || !in_data || e.thread as usize >= threads.len() || e.len > LINE as u32 {
                return Err(format!("event {} is out of range", events.len()));
            }
            events.push(e);
        }
        if !b.is_empty() {
            return Err("trailing bytes after the trace".into());
        }
        Ok(Trace {
            base,
            events,
            threads,
            roles,
            data,
            current: 0,
        })
    }

    fn push(&mut self, kind: EventKind, off: u64, bytes: &[u8]) {
        let data_at = u32::try_from(self.data.len()).expect("trace data beyond 4 GiB");
        self.data.extend_from_slice(bytes);
        self.events.push(Event {
            kind,
            off,
            len: bytes.len() as u32,
            thread: self.current,
            data_at,
        });
    }

    /// Records ordinary stores of `src` at `off`, split into aligned words.
    fn stores(&mut self, off: u64, src: &[u8]) {
        let mut at = 0usize;
        while at < src.len() {
            let o = off + at as u64;
            let room = (WORD - o % WORD) as usize;
            let n = room.min(src.len() - at);
            self.push(EventKind::Store, o, &src[at..at + n]);
            at += n;
        }
    }

    fn flushes(&mut self, off: u64, len: u64) {
        if len == 0 {
            return;
        }
        let mut line = off - off % LINE;
        while line < off + len {
            self.push(EventKind::Flush, line, &[]);
            line += LINE;
        }
    }
}

/// A region in memory that records a [`Trace`] of every mutation.
///
/// Loads see every store made so far (the view of the running program, caches
/// included); what a crash would leave is computed from the trace afterwards.
#[derive(Debug)]
pub struct TracePmem {
    inner: Mutex<Inner>,
    len: u64,
}

#[derive(Debug)]
struct Inner {
    image: Vec<u8>,
    trace: Trace,
    /// The thread of each index of `trace.threads`.
    ids: Vec<std::thread::ThreadId>,
}

impl TracePmem {
    /// Starts tracing a region whose durable contents are `image`.
    pub fn new(image: Vec<u8>) -> TracePmem {
        let len = image.len() as u64;
        TracePmem {
            inner: Mutex::new(Inner {
                trace: Trace {
                    base: image.clone(),
                    ..Trace::default()
                },
                image,
                ids: Vec::new(),
            }),
            len,
        }
    }

    /// Events recorded so far: a crash point "now" is this position.
    pub fn position(&self) -> usize {
        self.lock().trace.events.len()
    }

    /// A copy of the trace so far.
    pub fn trace(&self) -> Trace {
        self.lock().trace.clone()
    }

    /// The trace, consuming the region.
    pub fn into_trace(self) -> Trace {
        self.inner
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .trace
    }

    /// What loads see now (every store made, durable or not).
    pub fn image(&self) -> Vec<u8> {
        self.lock().image.clone()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lock, with the events about to be recorded attributed to this thread.
    fn lock_as_me(&self) -> MutexGuard<'_, Inner> {
        let mut g = self.lock();
        let me = std::thread::current();
        let idx = match g.ids.iter().position(|&id| id == me.id()) {
            Some(i) => i,
            None => {
                g.ids.push(me.id());
                g.trace.threads.push(me.name().unwrap_or("?").to_string());
                g.trace.roles.push(threads::current_role());
                g.ids.len() - 1
            }
        };
        g.trace.current = u16::try_from(idx).expect("more than 65536 threads traced");
        g
    }
}

impl Inner {
    fn put(&mut self, off: u64, src: &[u8]) {
        self.image[off as usize..off as usize + src.len()].copy_from_slice(src);
    }
}

impl Pmem for TracePmem {
    fn len(&self) -> u64 {
        self.len
    }

    fn durability(&self) -> Durability {
        Durability::CpuFlush
    }

    fn write(&self, off: u64, src: &[u8]) {
        check_range(off, src.len() as u64, self.len);
        let mut g = self.lock_as_me();
        g.put(off, src);
        g.trace.stores(off, src);
    }

    fn store_u64(&self, off: u64, val: u64) {
        check_word(off, self.len);
        let b = val.to_le_bytes();
        let mut g = self.lock_as_me();
        g.put(off, &b);
        g.trace.push(EventKind::Store, off, &b);
    }

    fn load_u64(&self, off: u64) -> u64 {
        check_word(off, self.len);
        let g = self.lock();
        u64::from_le_bytes(g.image[off as usize..off as usize + 8].try_into().unwrap())
    }

    fn read(&self, off: u64, dst: &mut [u8]) {
        check_range(off, dst.len() as u64, self.len);
        let g = self.lock();
        dst.copy_from_slice(&g.image[off as usize..off as usize + dst.len()]);
    }

    fn flush(&self, off: u64, len: u64) {
        check_range(off, len, self.len);
        self.lock_as_me().trace.flushes(off, len);
    }

    fn fence(&self) {
        self.lock_as_me().trace.push(EventKind::Fence, 0, &[]);
    }

    fn copy_nt(&self, off: u64, src: &[u8]) {
        check_range(off, src.len() as u64, self.len);
        let mut g = self.lock_as_me();
        g.put(off, src);
        let len = src.len() as u64;
        // As `persist::copy_nt_with`: whole aligned lines are non-temporal at any size.
        let whole_lines = (off | len).is_multiple_of(LINE);
        if src.len() < NT_MIN_BYTES && !whole_lines {
            g.trace.stores(off, src);
            g.trace.flushes(off, len);
            return;
        }
        let head = (LINE - off % LINE) % LINE;
        let body = (len - head) / LINE * LINE;
        let (h, rest) = src.split_at(head as usize);
        let (b, t) = rest.split_at(body as usize);
        g.trace.stores(off, h);
        g.trace.flushes(off, head);
        for (i, line) in b.chunks(LINE as usize).enumerate() {
            g.trace
                .push(EventKind::NtStore, off + head + i as u64 * LINE, line);
        }
        let tail_off = off + head + body;
        g.trace.stores(tail_off, t);
        g.trace.flushes(tail_off, t.len() as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_split_into_words_and_lines() {
        let t = TracePmem::new(vec![0; 4096]);
        t.write(5, &[1; 13]); // 5..8, 8..16, 16..18
        t.flush(5, 13);
        t.fence();
        let tr = t.trace();
        let kinds: Vec<_> = tr.events.iter().map(|e| (e.kind, e.off, e.len)).collect();
        assert_eq!(
            kinds,
            vec![
                (EventKind::Store, 5, 3),
                (EventKind::Store, 8, 8),
                (EventKind::Store, 16, 2),
                (EventKind::Flush, 0, 0),
                (EventKind::Fence, 0, 0),
            ]
        );
        assert_eq!(tr.data_of(&tr.events[1]), &[1; 8]);
        assert_eq!(t.image()[17], 1);
        assert_eq!(tr.base, vec![0; 4096]);
    }

    #[test]
    fn a_trace_reads_back_from_its_bytes() {
        let t = TracePmem::new(vec![3; 4096]);
        t.write(5, &[1; 13]);
        t.copy_nt(512, &[9; 1024]);
        t.flush(0, 64);
        std::thread::scope(|s| {
            s.spawn(|| {
                let _as = threads::register(threads::Role::Delegation);
                t.fence();
            });
        });
        let tr = t.trace();
        assert_eq!(tr.roles, [None, Some(threads::Role::Delegation)]);
        assert_eq!(
            tr.role_of(tr.events.last().unwrap()),
            Some(threads::Role::Delegation)
        );
        let back = Trace::from_bytes(&tr.to_bytes()).unwrap();
        assert_eq!(back.base, tr.base);
        assert_eq!(back.events, tr.events);
        assert_eq!(back.threads, tr.threads);
        assert_eq!(back.roles, tr.roles);
        assert_eq!(back.data_of(&back.events[1]), tr.data_of(&tr.events[1]));
        let bytes = tr.to_bytes();
        assert!(Trace::from_bytes(&bytes[..bytes.len() - 1]).is_err());
        assert!(Trace::from_bytes(b"nonsense").is_err());
    }

    #[test]
    fn copies_are_non_temporal_in_the_body_only() {
        let t = TracePmem::new(vec![0; 4096]);
        t.copy_nt(60, &[9; 300]); // head 60..64, body 64..320, tail 320..360
        let (stores, nt, flushes, fences) = t.trace().counts();
        assert_eq!((nt, fences), (4, 0));
        assert_eq!(flushes, 2);
        assert_eq!(stores, 1 + 5);
        t.copy_nt(1024, &[1; 100]); // short: ordinary stores
        assert_eq!(t.trace().counts().1, 4);
        let mut b = [0u8; 2];
        t.read(359, &mut b);
        assert_eq!(b, [9, 0]);
    }
}
