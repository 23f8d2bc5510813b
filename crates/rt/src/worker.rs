//! A worker: one kernel thread that runs uthreads from its local run queue, polls its wait
//! set and timers at every scheduling point, takes new uthreads from the global injection
//! queue and from other workers when it runs dry, and parks its thread when there is nothing
//! at all.
//!
//! A uthread stays on the worker that first runs it (its *home*, see `task`). So a worker
//! keeps two queues. `queue` holds uthreads that have not started: spawned here, or taken
//! in a batch from the injection queue or another worker; other workers steal from its
//! front. `ready` holds the run order: `Next::Resume` for a started uthread of this worker
//! that is runnable again (it yielded, its condition or timer fired, its park was cut short,
//! it was woken on this worker), `Next::Start` for "start the oldest uthread of `queue`".
//! Nothing but this worker touches `ready`, so nothing can take a started uthread away. A
//! started uthread woken from any other thread goes to its home worker's `inbox` (in
//! `Shared`), which only that worker drains, and the waker wakes that worker alone
//! (`Sleepers::notify`).
//!
//! The loop, once per scheduling point (after every switch back from a uthread):
//!
//! ```text
//!   poll wait set -> fire timers -> drain inbox -> next task: [injector every
//!   GLOBAL_QUEUE_INTERVAL] ready (resume, or start from queue) -> injector -> steal new
//!   uthreads from others -> run it, or idle
//! ```

use std::cell::{Cell, RefCell};
use std::collections::{BinaryHeap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_deque::{Steal, Worker};

use crate::context;
use crate::idle::{idle_step, Idle};
use crate::local::{Local, GLOBAL_QUEUE_INTERVAL};
use crate::overflow::AltStack;
use crate::shared::Shared;
use crate::stack::StackPool;
use crate::stats::Counters;
use crate::task::{Ran, Switch, TaskRef};

/// A uthread waiting for a condition, and the condition (on its stack).
struct Waiting {
    task: TaskRef,
    cond: *const (dyn Fn() -> bool + 'static),
}

/// A sleeping uthread, ordered so that `BinaryHeap` pops the earliest deadline first.
struct Timer {
    deadline: Instant,
    seq: u64,
    task: TaskRef,
}

impl PartialEq for Timer {
    fn eq(&self, other: &Self) -> bool {
        (self.deadline, self.seq) == (other.deadline, other.seq)
    }
}
impl Eq for Timer {}
impl PartialOrd for Timer {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Timer {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.deadline, other.seq).cmp(&(self.deadline, self.seq))
    }
}

/// The worker-private state of the loop.
struct Scheduler<'a> {
    local: &'a Local,
    counters: &'a Counters,
    wait_set: Vec<Waiting>,
    timers: BinaryHeap<Timer>,
    timer_seq: u64,
    stacks: StackPool,
    /// The uthread that yielded last, kept out of the run queue until the next pick: if
    /// nothing else is runnable it is resumed directly, without a push and a pop.
    yielded: Option<TaskRef>,
    idle_rounds: u32,
    rng: u64,
}

/// The body of worker thread `id`.
pub(crate) fn main(shared: Arc<Shared<TaskRef>>, id: usize, queue: Worker<TaskRef>) {
    // Without an alternate signal stack an overflow is still fatal, only without the
    // message; that is no reason to refuse to run.
    let _alt = AltStack::ensure().ok().flatten();
    // Naps between wait-set polls are microseconds long; the default 50 µs timer slack
    // would stretch each of them several-fold.
    // SAFETY: PR_SET_TIMERSLACK only changes this thread's timer slack.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1usize, 0usize, 0usize, 0usize) };
    shared.sleepers.register(id);
    let local = Local {
        id,
        queue,
        ready: RefCell::new(VecDeque::new()),
        shared,
        tick: Cell::new(0),
        pending: Cell::new(0),
    };
    context::set_worker(&local);
    let shared = &local.shared;
    let mut sched = Scheduler {
        local: &local,
        counters: &shared.counters[id],
        wait_set: Vec::new(),
        timers: BinaryHeap::new(),
        timer_seq: 0,
        stacks: StackPool::new(shared.stack_size),
        yielded: None,
        idle_rounds: 0,
        rng: 0x9E37_79B9_7F4A_7C15 ^ (id as u64 + 1),
    };
    sched.run();
    context::set_worker(std::ptr::null());
}

/// Makes a new uthread runnable: on the calling worker's queue when the caller is a worker
/// of the same runtime, else on the injection queue; then wakes a sleeping worker, if any,
/// to run or steal it. Any worker may start it.
pub(crate) fn start(task: TaskRef) {
    debug_assert!(task.home().is_none());
    if let Some(local) = context::worker() {
        if Arc::ptr_eq(&local.shared, &task.shared) {
            local.start_later(task);
            local.shared.sleepers.notify_one();
            return;
        }
    }
    let shared = task.shared.clone();
    shared.injector.push(task);
    shared.sleepers.notify_one();
}

/// Makes a started uthread that its waker now owns (`ParkState::unpark` said so) runnable on
/// its home worker: straight into the run order when the caller is that worker, else into
/// its inbox, waking it if it sleeps. Never where another worker could take it.
pub(crate) fn wake(task: TaskRef) {
    let home = task.home().expect("only a started uthread parks");
    if let Some(local) = context::worker() {
        if local.id == home && Arc::ptr_eq(&local.shared, &task.shared) {
            local.resume_later(task);
            return;
        }
    }
    let shared = task.shared.clone();
    shared.inboxes[home].push(task);
    shared.sleepers.notify(home);
}

impl Scheduler<'_> {
    fn run(&mut self) {
        loop {
            self.poll_wait_set();
            self.fire_timers();
            self.drain_inbox();
            if let Some(task) = self.next_task() {
                self.idle_rounds = 0;
                self.switch_to(task);
                continue;
            }
            if self.local.shared.finished() {
                return;
            }
            self.idle();
        }
    }

    /// Runs `task` until it switches back, and files it by the reason it gives.
    fn switch_to(&mut self, task: TaskRef) {
        Counters::bump(&self.counters.switches);
        context::set_task(Arc::as_ptr(&task));
        let stacks = &mut self.stacks;
        let ran = task.run(self.local.id, || stacks.take());
        context::set_task(std::ptr::null());
        match ran {
            Ran::Switched(Switch::Yield) => self.yielded = Some(task),
            Ran::Switched(Switch::Park) => {
                if !task.park.commit_park() {
                    self.local.resume_later(task);
                }
            }
            Ran::Switched(Switch::Wait(cond)) => {
                self.wait_set.push(Waiting { task, cond });
                self.local.pending.set(self.local.pending.get() + 1);
            }
            Ran::Switched(Switch::Sleep(deadline)) => {
                self.timer_seq += 1;
                self.timers.push(Timer {
                    deadline,
                    seq: self.timer_seq,
                    task,
                });
                self.local.pending.set(self.local.pending.get() + 1);
            }
            Ran::Finished(stack) => {
                self.stacks.give(stack);
                self.local.shared.task_done();
            }
            Ran::NoStack => self.local.shared.task_done(),
        }
    }

    /// Moves the waiting uthreads whose condition now holds to the run queue.
    fn poll_wait_set(&mut self) {
        if self.wait_set.is_empty() {
            return;
        }
        Counters::bump(&self.counters.wait_polls);
        let mut i = 0;
        while i < self.wait_set.len() {
            let cond = self.wait_set[i].cond;
            // SAFETY: the condition lives on the stack of a uthread that is suspended in
            // `wait_until` and stays suspended while it is in this wait set (only this
            // worker resumes it), so the closure is alive and nothing else touches it.
            // A panicking condition counts as ready: the uthread evaluates it again itself
            // when resumed, so the panic reaches its joiner instead of killing the worker.
            let ready = catch_unwind(AssertUnwindSafe(|| unsafe { (*cond)() })).unwrap_or(true);
            if ready {
                let w = self.wait_set.swap_remove(i);
                self.local.pending.set(self.local.pending.get() - 1);
                Counters::bump(&self.counters.wait_ready);
                self.local.resume_later(w.task);
            } else {
                i += 1;
            }
        }
    }

    /// Moves the sleeping uthreads whose deadline has passed to the run queue.
    fn fire_timers(&mut self) {
        if self.timers.is_empty() {
            return;
        }
        let now = Instant::now();
        while self.timers.peek().is_some_and(|t| t.deadline <= now) {
            let t = self.timers.pop().expect("peeked");
            self.local.pending.set(self.local.pending.get() - 1);
            self.local.resume_later(t.task);
        }
    }

    /// Moves the uthreads of this worker that other threads woke to the run order.
    fn drain_inbox(&mut self) {
        let inbox = &self.local.shared.inboxes[self.local.id];
        if inbox.is_empty() {
            return;
        }
        loop {
            match inbox.steal() {
                Steal::Success(t) => self.local.resume_later(t),
                Steal::Empty => return,
                Steal::Retry => continue,
            }
        }
    }

    fn next_task(&mut self) -> Option<TaskRef> {
        let tick = self.local.tick.get().wrapping_add(1);
        self.local.tick.set(tick);
        let global_turn = tick.is_multiple_of(GLOBAL_QUEUE_INTERVAL);
        let mut injector_first = global_turn;
        if let Some(t) = self.yielded.take() {
            // Behind whatever became ready meanwhile (the wait set, timers and inbox were
            // polled just before this) or was injected, as if it had gone to the back of the
            // queue.
            let alone = self.local.nothing_queued();
            if alone && !global_turn && self.local.shared.injector.is_empty() {
                return Some(t);
            }
            // Only injected work besides it: that goes first.
            injector_first |= alone;
            self.local.resume_later(t);
        }
        if injector_first {
            if let Some(t) = self.steal_injector() {
                return Some(t);
            }
        }
        self.local
            .pop_ready()
            .or_else(|| self.steal_injector())
            .or_else(|| self.steal_others())
    }

    /// Takes new uthreads from the injection queue: a batch if this worker's queue of new
    /// uthreads is empty (so that each gets its turn, see `turns_for_queue`), else one.
    fn steal_injector(&self) -> Option<TaskRef> {
        let injector = &self.local.shared.injector;
        let batch = self.local.queue.is_empty();
        loop {
            let got = if batch {
                injector.steal_batch_and_pop(&self.local.queue)
            } else {
                injector.steal()
            };
            match got {
                Steal::Success(t) => {
                    if batch {
                        self.local.turns_for_queue();
                    }
                    return Some(t);
                }
                Steal::Empty => return None,
                Steal::Retry => continue,
            }
        }
    }

    /// Takes half of another worker's new uthreads, starting at a random victim. Called only
    /// when this worker's own queue is empty.
    fn steal_others(&mut self) -> Option<TaskRef> {
        let stealers = &self.local.shared.stealers;
        let n = stealers.len();
        if n < 2 {
            return None;
        }
        // xorshift64: cheap, and enough to spread victims.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let start = (self.rng % n as u64) as usize;
        for k in 0..n {
            let victim = (start + k) % n;
            if victim == self.local.id {
                continue;
            }
            loop {
                match stealers[victim].steal_batch_and_pop(&self.local.queue) {
                    Steal::Success(t) => {
                        Counters::bump(&self.counters.steals);
                        self.local.turns_for_queue();
                        return Some(t);
                    }
                    Steal::Empty => break,
                    Steal::Retry => continue,
                }
            }
        }
        None
    }

    /// Nothing runnable: one step of `idle::idle_step`.
    fn idle(&mut self) {
        self.idle_rounds = self.idle_rounds.saturating_add(1);
        let next_timer = self
            .timers
            .peek()
            .map(|t| t.deadline.saturating_duration_since(Instant::now()));
        match idle_step(self.idle_rounds, !self.wait_set.is_empty(), next_timer) {
            Idle::Spin => std::hint::spin_loop(),
            Idle::Yield => std::thread::yield_now(),
            Idle::Sleep(timeout) => self.sleep(timeout),
        }
    }

    /// Parks the thread (with the lost-wake-up protocol of `sleepers`) for at most `timeout`.
    fn sleep(&mut self, timeout: Option<Duration>) {
        let shared = &self.local.shared;
        shared.sleepers.prepare(self.local.id);
        if shared.has_queued_work(self.local.id) || shared.finished() {
            shared.sleepers.cancel(self.local.id);
            return;
        }
        Counters::bump(&self.counters.parks);
        match timeout {
            Some(d) => std::thread::park_timeout(d),
            None => std::thread::park(),
        }
        shared.sleepers.cancel(self.local.id);
    }
}
