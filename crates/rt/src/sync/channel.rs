//! Multi-producer multi-consumer channels, bounded or unbounded: `send` on a full channel and
//! `recv` on an empty one yield the uthread (block the thread) until they can proceed.
//! Dropping the last sender (receiver) wakes the receivers (senders) with an error.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use super::lock;
use crate::waiter::Waiter;

/// A channel holding at most `capacity` messages.
///
/// # Panics
/// If `capacity` is 0 (rendezvous channels are not provided).
pub fn bounded<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    assert!(
        capacity > 0,
        "rt::sync::bounded needs a capacity of at least 1"
    );
    new(Some(capacity))
}

/// A channel with no limit on the messages it holds.
pub fn unbounded<T>() -> (Sender<T>, Receiver<T>) {
    new(None)
}

fn new<T>(cap: Option<usize>) -> (Sender<T>, Receiver<T>) {
    let chan = Arc::new(Chan {
        state: std::sync::Mutex::new(State {
            queue: VecDeque::new(),
            cap,
            senders: 1,
            receivers: 1,
            recv_waiters: VecDeque::new(),
            send_waiters: VecDeque::new(),
        }),
    });
    (Sender { chan: chan.clone() }, Receiver { chan })
}

struct Chan<T> {
    state: std::sync::Mutex<State<T>>,
}

struct State<T> {
    queue: VecDeque<T>,
    cap: Option<usize>,
    senders: usize,
    receivers: usize,
    recv_waiters: VecDeque<Arc<Waiter>>,
    send_waiters: VecDeque<Arc<Waiter>>,
}

impl<T> State<T> {
    fn has_room(&self) -> bool {
        self.cap.is_none_or(|c| self.queue.len() < c)
    }
}

/// The sending half; clone it for more producers.
pub struct Sender<T> {
    chan: Arc<Chan<T>>,
}

/// The receiving half; clone it for more consumers.
pub struct Receiver<T> {
    chan: Arc<Chan<T>>,
}

/// Every receiver is gone; the message comes back.
#[derive(PartialEq, Eq)]
pub struct SendError<T>(pub T);

/// Every sender is gone and the channel is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("receiving on an empty channel whose senders are all gone")]
pub struct RecvError;

/// Why `try_send` did not send; the message comes back.
#[derive(PartialEq, Eq)]
pub enum TrySendError<T> {
    /// The channel is full.
    Full(T),
    /// Every receiver is gone.
    Disconnected(T),
}

/// Why `try_recv` got nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TryRecvError {
    /// The channel is empty.
    #[error("channel empty")]
    Empty,
    /// The channel is empty and every sender is gone.
    #[error("channel empty and its senders are all gone")]
    Disconnected,
}

impl<T> fmt::Debug for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SendError(..)")
    }
}
impl<T> fmt::Display for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("sending on a channel whose receivers are all gone")
    }
}
impl<T> std::error::Error for SendError<T> {}

impl<T> fmt::Debug for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => f.write_str("Full(..)"),
            TrySendError::Disconnected(_) => f.write_str("Disconnected(..)"),
        }
    }
}
impl<T> fmt::Display for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => f.write_str("channel full"),
            TrySendError::Disconnected(_) => {
                f.write_str("sending on a channel whose receivers are all gone")
            }
        }
    }
}
impl<T> std::error::Error for TrySendError<T> {}

impl<T> Sender<T> {
    /// Sends `value`, waiting for room if the channel is full.
    pub fn send(&self, value: T) -> Result<(), SendError<T>> {
        let mut value = value;
        loop {
            match self.try_send_or_register(value) {
                Ok(()) => return Ok(()),
                Err(Blocked::Gone(v)) => return Err(SendError(v)),
                Err(Blocked::Wait(v, w)) => {
                    value = v;
                    w.wait();
                }
            }
        }
    }

    /// Sends `value` if there is room now.
    pub fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
        let mut s = lock(&self.chan.state);
        if s.receivers == 0 {
            return Err(TrySendError::Disconnected(value));
        }
        if !s.has_room() {
            return Err(TrySendError::Full(value));
        }
        s.queue.push_back(value);
        let wake = s.recv_waiters.pop_front();
        drop(s);
        if let Some(w) = wake {
            w.notify();
        }
        Ok(())
    }

    fn try_send_or_register(&self, value: T) -> Result<(), Blocked<T>> {
        match self.try_send(value) {
            Ok(()) => Ok(()),
            Err(TrySendError::Disconnected(v)) => Err(Blocked::Gone(v)),
            Err(TrySendError::Full(v)) => {
                let mut s = lock(&self.chan.state);
                // Checked again under the lock we register under.
                if s.receivers == 0 {
                    return Err(Blocked::Gone(v));
                }
                if s.has_room() {
                    drop(s);
                    return self.try_send_or_register(v);
                }
                let w = Waiter::current();
                s.send_waiters.push_back(w.clone());
                Err(Blocked::Wait(v, w))
            }
        }
    }
}

enum Blocked<T> {
    Gone(T),
    Wait(T, Arc<Waiter>),
}

impl<T> Receiver<T> {
    /// Receives a message, waiting for one if the channel is empty. Fails once the channel
    /// is empty and every sender is gone.
    pub fn recv(&self) -> Result<T, RecvError> {
        loop {
            let waiter = {
                let mut s = lock(&self.chan.state);
                if let Some(v) = self.take(&mut s) {
                    return Ok(v);
                }
                if s.senders == 0 {
                    return Err(RecvError);
                }
                let w = Waiter::current();
                s.recv_waiters.push_back(w.clone());
                w
            };
            waiter.wait();
        }
    }

    /// Receives a message if there is one now.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        let mut s = lock(&self.chan.state);
        match self.take(&mut s) {
            Some(v) => Ok(v),
            None if s.senders == 0 => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }

    /// Messages waiting in the channel.
    pub fn len(&self) -> usize {
        lock(&self.chan.state).queue.len()
    }

    /// Whether no message is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Pops a message and passes the wake-ups on: to a sender (a slot is free) and, if more
    /// messages wait, to another receiver (whoever was woken for them may have lost the race
    /// to this call). Notifying never blocks, so it is done under the channel's lock.
    fn take(&self, s: &mut State<T>) -> Option<T> {
        let v = s.queue.pop_front()?;
        if let Some(w) = s.send_waiters.pop_front() {
            w.notify();
        }
        if !s.queue.is_empty() {
            if let Some(w) = s.recv_waiters.pop_front() {
                w.notify();
            }
        }
        Some(v)
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        lock(&self.chan.state).senders += 1;
        Sender {
            chan: self.chan.clone(),
        }
    }
}

impl<T> Clone for Receiver<T> {
    fn clone(&self) -> Self {
        lock(&self.chan.state).receivers += 1;
        Receiver {
            chan: self.chan.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let wake = {
            let mut s = lock(&self.chan.state);
            s.senders -= 1;
            if s.senders == 0 {
                std::mem::take(&mut s.recv_waiters)
            } else {
                VecDeque::new()
            }
        };
        for w in wake {
            w.notify();
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let wake = {
            let mut s = lock(&self.chan.state);
            s.receivers -= 1;
            if s.receivers == 0 {
                std::mem::take(&mut s.send_waiters)
            } else {
                VecDeque::new()
            }
        };
        for w in wake {
            w.notify();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn try_ops_report_full_empty_and_disconnected() {
        let (tx, rx) = bounded(1);
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        tx.try_send(1).unwrap();
        assert_eq!(tx.try_send(2), Err(TrySendError::Full(2)));
        assert_eq!(rx.len(), 1);
        drop(tx);
        assert_eq!(rx.try_recv(), Ok(1));
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
        assert_eq!(rx.recv(), Err(RecvError));
        let (tx, rx) = unbounded();
        drop(rx);
        assert_eq!(tx.send(3), Err(SendError(3)));
    }

    #[test]
    fn threads_outside_a_runtime_block_and_wake() {
        let (tx, rx) = bounded::<u32>(2);
        let producer = std::thread::spawn(move || {
            for i in 0..1000 {
                tx.send(i).unwrap();
            }
        });
        let got: Vec<u32> = std::iter::from_fn(|| rx.recv().ok()).collect();
        producer.join().unwrap();
        assert_eq!(got, (0..1000).collect::<Vec<_>>());
    }
}
