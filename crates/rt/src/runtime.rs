//! A runtime: its workers, the queues they share, and the calls that enter it from outside
//! (`spawn`, `block_on`) and shut it down.

use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;

use crossbeam_deque::{Injector, Worker};

use crate::error::Error;
use crate::error::JoinError;
use crate::join::{self, JoinHandle};
use crate::shared::Shared;
use crate::sleepers::{Sleepers, MAX_WORKERS};
use crate::stack::{DEFAULT_STACK_SIZE, MAX_STACK_SIZE, MIN_STACK_SIZE};
use crate::stats::{Counters, WorkerStats};
use crate::task::{Task, TaskRef};
use crate::{context, overflow, worker};

/// How to build a runtime.
#[derive(Clone, Debug)]
pub struct Builder {
    workers: usize,
    pin: bool,
    stack_size: usize,
    name: String,
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

impl Builder {
    /// One worker per available core, unpinned, `DEFAULT_STACK_SIZE` stacks.
    pub fn new() -> Builder {
        Builder {
            workers: std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_WORKERS)),
            pin: false,
            stack_size: DEFAULT_STACK_SIZE,
            name: "rt-worker".into(),
        }
    }

    /// Number of worker threads (1 to 64).
    pub fn workers(mut self, n: usize) -> Builder {
        self.workers = n;
        self
    }

    /// Pin worker `i` to the `i`-th CPU this process may run on (round robin).
    pub fn pin_workers(mut self, pin: bool) -> Builder {
        self.pin = pin;
        self
    }

    /// Usable bytes of each uthread stack (a guard page is added below).
    pub fn stack_size(mut self, bytes: usize) -> Builder {
        self.stack_size = bytes;
        self
    }

    /// Prefix of the worker threads' names (`{name}-{i}`).
    pub fn name(mut self, name: impl Into<String>) -> Builder {
        self.name = name.into();
        self
    }

    /// Starts the workers.
    pub fn build(self) -> Result<Runtime, Error> {
        if self.workers == 0 || self.workers > MAX_WORKERS {
            return Err(Error::Workers(self.workers));
        }
        if !(MIN_STACK_SIZE..=MAX_STACK_SIZE).contains(&self.stack_size) {
            return Err(Error::StackSize(self.stack_size));
        }
        overflow::install().map_err(Error::Signal)?;
        let queues: Vec<Worker<TaskRef>> = (0..self.workers).map(|_| Worker::new_fifo()).collect();
        let shared = Arc::new(Shared {
            injector: Injector::new(),
            stealers: queues.iter().map(Worker::stealer).collect(),
            inboxes: (0..self.workers).map(|_| Injector::new()).collect(),
            sleepers: Sleepers::new(self.workers),
            counters: (0..self.workers).map(|_| Counters::default()).collect(),
            stack_size: self.stack_size,
            live: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
        });
        let mut rt = Runtime {
            handle: Handle {
                shared: shared.clone(),
            },
            threads: Vec::with_capacity(self.workers),
        };
        let cpus = if self.pin {
            threads::allowed_cpus()
        } else {
            Vec::new()
        };
        for (id, queue) in queues.into_iter().enumerate() {
            let shared = shared.clone();
            let cpu = cpus.get(id % cpus.len().max(1)).copied();
            // A worker pins itself (rustix sets the calling thread's affinity) and says
            // how that went before it starts; it runs either way, as the others do.
            let (pinned_tx, pinned_rx) = std::sync::mpsc::sync_channel(1);
            let thread = threads::spawn(
                threads::Role::RuntimeWorker,
                format!("{}-{id}", self.name),
                move || {
                    let _ = pinned_tx.send(cpu.map(threads::pin_current));
                    worker::main(shared, id, queue)
                },
            )
            .map_err(Error::Spawn)?;
            // Held by the runtime first, so that an error below still stops it.
            rt.threads.push(thread);
            // Only a pinned worker is waited for; the others start in their own time.
            let pinned = cpu.and_then(|_| pinned_rx.recv().ok().flatten());
            if let Some(Err(source)) = pinned {
                return Err(Error::Pin {
                    worker: id,
                    cpu: cpu.unwrap_or_default(),
                    source,
                });
            }
        }
        Ok(rt)
    }
}

/// A running set of workers. Dropping it (or `shutdown`) waits for every uthread to finish,
/// then stops the workers.
pub struct Runtime {
    handle: Handle,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Runtime {
    /// A runtime with `workers` unpinned workers and default stacks.
    pub fn new(workers: usize) -> Result<Runtime, Error> {
        Builder::new().workers(workers).build()
    }

    /// How to build a runtime with other settings.
    pub fn builder() -> Builder {
        Builder::new()
    }

    /// A cloneable handle that spawns onto this runtime from anywhere.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.handle.shared.stealers.len()
    }

    /// Starts a uthread running `f`. See `Handle::spawn`.
    pub fn spawn<F, T>(&self, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.handle.spawn(f)
    }

    /// Runs `f` in a uthread and blocks the calling thread until it returns its value.
    ///
    /// # Panics
    /// If `f` panics, the panic is resumed on the caller. If no stack can be mapped for the
    /// uthread, panics with that error.
    pub fn block_on<F, T>(&self, f: F) -> T
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        match self.spawn(f).join() {
            Ok(v) => v,
            Err(JoinError::Panicked(p)) => std::panic::resume_unwind(p),
            Err(e) => panic!("rt::Runtime::block_on: {e}"),
        }
    }

    /// Counters of every worker, by worker index.
    pub fn stats(&self) -> Vec<WorkerStats> {
        self.handle.stats()
    }

    /// Waits for every uthread to finish, then stops the workers. A uthread that never
    /// finishes (blocked forever) makes this wait forever, like joining a thread would.
    ///
    /// # Panics
    /// If called from a uthread of this runtime (it would wait for itself).
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if self.threads.is_empty() {
            return;
        }
        let shared = &self.handle.shared;
        assert!(
            !context::worker().is_some_and(|w| Arc::ptr_eq(&w.shared, shared)),
            "a runtime cannot be shut down from one of its own uthreads"
        );
        shared.shut_down();
        shared.sleepers.notify_all();
        for t in self.threads.drain(..) {
            if let Err(p) = t.join() {
                if !std::thread::panicking() {
                    std::panic::resume_unwind(p);
                }
            }
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Spawns onto a runtime from any thread or uthread; cheap to clone.
#[derive(Clone)]
pub struct Handle {
    shared: Arc<Shared<TaskRef>>,
}

impl Handle {
    /// The runtime whose worker the caller runs on, if it runs on one.
    pub fn current() -> Option<Handle> {
        context::worker().map(|w| Handle {
            shared: w.shared.clone(),
        })
    }

    /// Starts a uthread running `f`. From a worker of this runtime it goes on that worker's
    /// queue of new uthreads (other workers may steal it until it starts); from anywhere
    /// else, on the injection queue. The uthread gets its stack when it first runs, on the
    /// worker that runs it, and stays on that worker until it finishes (see the crate
    /// documentation).
    pub fn spawn<F, T>(&self, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        spawn_on(&self.shared, f)
    }

    /// Counters of every worker, by worker index.
    pub fn stats(&self) -> Vec<WorkerStats> {
        self.shared
            .counters
            .iter()
            .enumerate()
            .map(|(i, c)| c.snapshot(i))
            .collect()
    }
}

/// Starts a uthread of runtime `shared` running `f`.
fn spawn_on<F, T>(shared: &Arc<Shared<TaskRef>>, f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let (body, handle) = join::pair(f);
    shared.spawned();
    worker::start(Task::new(shared.clone(), body));
    handle
}
