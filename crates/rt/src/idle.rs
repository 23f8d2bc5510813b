//! What a worker does when it finds nothing to run, as a pure decision so that the rule it
//! must keep can be model-checked (`tests/model_check.rs`): a worker never sleeps without a
//! timeout while uthreads wait in its wait set, because nobody would wake it when their
//! condition (a completion counter in memory) becomes true.

use std::time::Duration;

use threads::{Limit, Rest, Spins, Step, WaitPolicy};

/// Rounds an idle worker spins looking for work (and polling its wait set) before it yields
/// or sleeps: a uthread woken from another worker is usually picked up within these.
pub const IDLE_SPINS: u32 = 256;
/// With uthreads in the wait set and nothing runnable, rounds of `std::thread::yield_now`
/// after the spinning, before the worker starts napping.
pub const WAIT_YIELDS: u32 = 64;
/// With uthreads in the wait set and nothing runnable, how long the worker naps between
/// polls once spinning and yielding found nothing. New work wakes it early.
pub const WAIT_NAP: Duration = Duration::from_micros(20);

/// How an idle worker waits while uthreads wait in its wait set: spin, yield, then nap
/// (its park with a timeout) between polls of the wait set.
pub const IDLE_WITH_WAITERS: WaitPolicy = WaitPolicy {
    spin: Limit::Rounds(IDLE_SPINS),
    spins: Spins::Each(1),
    yields: Limit::Rounds(WAIT_YIELDS),
    rest: Rest::Sleep {
        first: WAIT_NAP,
        max: WAIT_NAP,
    },
    clock_every: 1,
};

/// How an idle worker waits when no uthread waits: spin, then park until new work.
pub const IDLE_ALONE: WaitPolicy = WaitPolicy {
    spin: Limit::Rounds(IDLE_SPINS),
    spins: Spins::Each(1),
    yields: Limit::Rounds(0),
    rest: Rest::Park,
    clock_every: 1,
};

/// One step of idling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Idle {
    /// Spin once, then look again.
    Spin,
    /// Give the core away once (`std::thread::yield_now`), then look again.
    Yield,
    /// Sleep until new work arrives or this much time passes (`None`: until new work).
    Sleep(Option<Duration>),
}

/// The step for the `round`-th consecutive idle round (from 1), given whether uthreads wait
/// in the wait set and how long until the earliest sleeping uthread is due.
pub(crate) fn idle_step(round: u32, waiters: bool, next_timer: Option<Duration>) -> Idle {
    let policy = if waiters {
        IDLE_WITH_WAITERS
    } else {
        IDLE_ALONE
    };
    match policy.step_at(round.saturating_sub(1)) {
        Step::Spin(_) => Idle::Spin,
        Step::Yield => Idle::Yield,
        Step::Sleep(nap) => Idle::Sleep(Some(next_timer.map_or(nap, |t| t.min(nap)))),
        Step::Park | Step::Over => Idle::Sleep(next_timer),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spins_then_yields_then_naps_while_uthreads_wait() {
        assert_eq!(idle_step(1, true, None), Idle::Spin);
        assert_eq!(idle_step(IDLE_SPINS + 1, true, None), Idle::Yield);
        let late = IDLE_SPINS + WAIT_YIELDS + 1;
        assert_eq!(idle_step(late, true, None), Idle::Sleep(Some(WAIT_NAP)));
        let soon = Duration::from_micros(3);
        assert_eq!(idle_step(late, true, Some(soon)), Idle::Sleep(Some(soon)));
    }

    #[test]
    fn sleeps_until_work_or_timer_when_nobody_waits() {
        let late = IDLE_SPINS + 1;
        assert_eq!(idle_step(late, false, None), Idle::Sleep(None));
        let t = Duration::from_millis(5);
        assert_eq!(idle_step(late, false, Some(t)), Idle::Sleep(Some(t)));
    }
}
