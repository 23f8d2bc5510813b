//! Uthread stacks: mapped with a guard page below them, recycled through a per-worker pool.

use std::io;
use std::sync::OnceLock;

use corosensei::stack::{DefaultStack, Stack};

/// Default usable size of a uthread stack. Untouched pages cost no memory, so this is
/// address space more than memory; it leaves room for formatting, panics and unwinding.
pub const DEFAULT_STACK_SIZE: usize = 256 << 10;
/// Smallest stack a runtime accepts: below this even a panic message overflows.
pub const MIN_STACK_SIZE: usize = 16 << 10;
/// Largest stack a runtime accepts (a stack is mapped whole, per live uthread).
pub const MAX_STACK_SIZE: usize = 1 << 30;
/// Stacks a worker keeps for reuse; more are unmapped when their uthreads finish.
pub const STACK_POOL_PER_WORKER: usize = 64;

/// One worker's free stacks, all of one size.
pub(crate) struct StackPool {
    size: usize,
    free: Vec<DefaultStack>,
}

impl StackPool {
    /// An empty pool of stacks with `size` usable bytes.
    pub(crate) fn new(size: usize) -> StackPool {
        StackPool {
            size,
            free: Vec::new(),
        }
    }

    /// A stack from the pool, or a freshly mapped one.
    pub(crate) fn take(&mut self) -> io::Result<DefaultStack> {
        match self.free.pop() {
            Some(s) => Ok(s),
            None => DefaultStack::new(self.size),
        }
    }

    /// Returns the stack of a finished uthread.
    pub(crate) fn give(&mut self, stack: DefaultStack) {
        if self.free.len() < STACK_POOL_PER_WORKER {
            self.free.push(stack);
        }
    }
}

/// The guard page of a stack: `[lo, hi)`, the lowest page of its mapping, never accessible.
pub(crate) fn guard_range(stack: &DefaultStack) -> (usize, usize) {
    let lo = stack.limit().get();
    (lo, lo + page_size())
}

/// The system page size.
pub(crate) fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(p).unwrap_or(4096)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_reuses_stacks_up_to_its_limit() {
        let mut pool = StackPool::new(MIN_STACK_SIZE);
        let stacks: Vec<_> = (0..STACK_POOL_PER_WORKER + 3)
            .map(|_| pool.take().unwrap())
            .collect();
        let first = stacks[0].base().get();
        for s in stacks {
            pool.give(s);
        }
        assert_eq!(pool.free.len(), STACK_POOL_PER_WORKER);
        // The first stack given back is at the bottom of the free list.
        assert!(pool.free.iter().any(|s| s.base().get() == first));
        let again = pool.take().unwrap();
        assert_eq!(pool.free.len(), STACK_POOL_PER_WORKER - 1);
        drop(again);
    }

    #[test]
    fn guard_page_lies_just_below_the_usable_stack() {
        let stack = DefaultStack::new(MIN_STACK_SIZE).unwrap();
        let (lo, hi) = guard_range(&stack);
        assert_eq!(hi - lo, page_size());
        assert!(stack.base().get() - hi >= MIN_STACK_SIZE);
        // The lowest usable byte is writable; the guard page below it is not (that fault
        // is exercised by the stack-overflow test in a child process).
        // SAFETY: `hi` is the first byte of the read-write part of the mapping `stack` owns.
        unsafe { (hi as *mut u8).write_volatile(0xA5) };
        // SAFETY: as above.
        assert_eq!(unsafe { (hi as *const u8).read_volatile() }, 0xA5);
    }
}
