//! One way to wait for another thread: spin, then yield, then rest.
//!
//! A [`WaitPolicy`] is three phases, each a value: spin (`spin` limit, `spins` hints per
//! round), yield to the OS scheduler (`yields` limit), then `rest` — sleep with a growing
//! nap, park (the caller's own park protocol), give the wait back, or start over. A
//! [`Backoff`] walks one wait through a policy step by step; [`WaitPolicy::wait_until`]
//! is the loop for a plain condition. Each user names its policy as a constant beside
//! the reasons for its numbers.

use std::time::{Duration, Instant};

/// How long a phase lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// This many rounds of the phase.
    Rounds(u32),
    /// Until this long has passed since the wait began (the clock is read every
    /// [`WaitPolicy::clock_every`] rounds).
    Until(Duration),
}

/// How many spin-loop hints one spinning round makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spins {
    /// The same number every round.
    Each(u32),
    /// 1, 2, 4, ... : round `i` of the phase makes `2^i` (exponential back-off).
    Doubling,
}

/// What a wait does once spinning and yielding are over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rest {
    /// Sleep between looks, `first` at first, doubling up to `max`.
    Sleep {
        /// The first nap.
        first: Duration,
        /// The longest nap.
        max: Duration,
    },
    /// Park: the caller parks with its own wake-up protocol ([`Step::Park`]).
    Park,
    /// The policy is over: the caller waits some other way ([`Step::Over`]).
    Over,
    /// Start the policy over from its first round.
    Again,
}

/// A policy of waiting: spin, then yield, then rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitPolicy {
    /// How long to spin.
    pub spin: Limit,
    /// Spin-loop hints per spinning round.
    pub spins: Spins,
    /// How long to yield, after spinning.
    pub yields: Limit,
    /// What to do after yielding.
    pub rest: Rest,
    /// With a time limit, read the clock once every this many rounds (at least 1): a
    /// clock read costs more than a spin.
    pub clock_every: u32,
}

/// One step of a wait, as [`Backoff::step`] decides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Make this many spin-loop hints, then look again.
    Spin(u32),
    /// Yield to the OS scheduler once, then look again.
    Yield,
    /// Sleep this long (or park with this timeout), then look again.
    Sleep(Duration),
    /// Park until woken ([`Rest::Park`]).
    Park,
    /// The policy is over ([`Rest::Over`]).
    Over,
}

impl WaitPolicy {
    /// Spins `rounds` rounds of `each` hints, then gives the wait back.
    pub const fn spin_rounds(rounds: u32, each: u32) -> WaitPolicy {
        WaitPolicy {
            spin: Limit::Rounds(rounds),
            spins: Spins::Each(each),
            yields: Limit::Rounds(0),
            rest: Rest::Over,
            clock_every: 1,
        }
    }

    /// Spins for `d` (rounds of `each` hints, the clock read every round), then gives
    /// the wait back.
    pub const fn spin_for(d: Duration, each: u32) -> WaitPolicy {
        WaitPolicy {
            spin: Limit::Until(d),
            ..WaitPolicy::spin_rounds(0, each)
        }
    }

    /// The step of round `round` (from 0) of a policy whose phases are counted in
    /// rounds: a pure function, for callers that keep the round count themselves.
    ///
    /// Panics if a phase is limited by time, or the policy starts over.
    pub fn step_at(&self, round: u32) -> Step {
        let rounds = |l: Limit| match l {
            Limit::Rounds(n) => n,
            Limit::Until(_) => panic!("step_at: a phase limited by time"),
        };
        let (spin, yields) = (rounds(self.spin), rounds(self.yields));
        if round < spin {
            return Step::Spin(self.spins.at(round));
        }
        if round - spin < yields {
            return Step::Yield;
        }
        self.rest_step(round - spin - yields)
    }

    /// The step of round `k` (from 0) of the rest phase.
    fn rest_step(&self, k: u32) -> Step {
        match self.rest {
            Rest::Sleep { first, max } => {
                let nap = first.saturating_mul(1u32 << k.min(31));
                Step::Sleep(nap.min(max))
            }
            Rest::Park => Step::Park,
            Rest::Over => Step::Over,
            Rest::Again => panic!("rest_step: a policy that starts over"),
        }
    }

    /// Waits on the calling thread until `cond()` holds (true) or the policy reaches
    /// [`Rest::Park`] or [`Rest::Over`] (false). `cond` is looked at first and after
    /// every spin, yield or sleep.
    pub fn wait_until(&self, mut cond: impl FnMut() -> bool) -> bool {
        let mut backoff = Backoff::new(self);
        loop {
            if cond() {
                return true;
            }
            if matches!(backoff.pause(), Step::Park | Step::Over) {
                return false;
            }
        }
    }
}

impl Spins {
    fn at(self, round: u32) -> u32 {
        match self {
            Spins::Each(n) => n,
            Spins::Doubling => 1u32 << round.min(31),
        }
    }
}

/// Where a wait is in its policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Spin,
    Yield,
    Rest,
}

/// One wait walking through a [`WaitPolicy`].
#[derive(Clone, Debug)]
pub struct Backoff<'p> {
    policy: &'p WaitPolicy,
    phase: Phase,
    /// Rounds done in the current phase.
    rounds: u32,
    /// When the wait began (read at the first step that needs the clock).
    began: Option<Instant>,
    /// The clock as last read.
    now: Option<Instant>,
    /// Rounds until the clock is read again.
    clock_in: u32,
    /// Whether the last [`Backoff::step`] read the clock.
    read_clock: bool,
}

impl<'p> Backoff<'p> {
    /// A wait at the start of `policy`.
    pub fn new(policy: &'p WaitPolicy) -> Backoff<'p> {
        Backoff {
            policy,
            phase: Phase::Spin,
            rounds: 0,
            began: None,
            now: None,
            clock_in: 0,
            read_clock: false,
        }
    }

    /// Starts the wait over (what the caller waited for came; the next wait begins).
    pub fn reset(&mut self) {
        *self = Backoff::new(self.policy);
    }

    /// Time passed outside this wait's own steps (the caller napped): read the clock at
    /// the next step.
    pub fn clock_stale(&mut self) {
        self.clock_in = 0;
    }

    /// The clock as read by the last [`Backoff::step`], if it read it.
    pub fn clock_read(&self) -> Option<Instant> {
        self.now.filter(|_| self.read_clock)
    }

    /// The next step of the wait, without making it.
    pub fn step(&mut self) -> Step {
        self.read_clock = false;
        loop {
            match self.phase {
                Phase::Spin => {
                    if self.within(self.policy.spin) {
                        self.rounds += 1;
                        return Step::Spin(self.policy.spins.at(self.rounds - 1));
                    }
                    (self.phase, self.rounds) = (Phase::Yield, 0);
                }
                Phase::Yield => {
                    if self.within(self.policy.yields) {
                        self.rounds += 1;
                        return Step::Yield;
                    }
                    (self.phase, self.rounds) = (Phase::Rest, 0);
                }
                Phase::Rest if self.policy.rest == Rest::Again => self.reset(),
                Phase::Rest => {
                    self.rounds = self.rounds.saturating_add(1);
                    return self.policy.rest_step(self.rounds - 1);
                }
            }
        }
    }

    /// Decides the next step and makes it if it is a spin, a yield or a sleep; a park
    /// or the end of the policy is returned for the caller to act on.
    pub fn pause(&mut self) -> Step {
        let step = self.step();
        match step {
            Step::Spin(n) => (0..n).for_each(|_| std::hint::spin_loop()),
            Step::Yield => std::thread::yield_now(),
            Step::Sleep(d) => std::thread::sleep(d),
            Step::Park | Step::Over => {}
        }
        step
    }

    /// Whether the current phase, limited by `limit`, goes on for another round.
    fn within(&mut self, limit: Limit) -> bool {
        match limit {
            Limit::Rounds(n) => self.rounds < n,
            Limit::Until(d) => self.elapsed() < d,
        }
    }

    /// Time since the wait began, reading the clock every `clock_every` rounds.
    fn elapsed(&mut self) -> Duration {
        if self.clock_in == 0 || self.now.is_none() {
            let now = Instant::now();
            self.began.get_or_insert(now);
            self.now = Some(now);
            self.read_clock = true;
            self.clock_in = self.policy.clock_every.max(1);
        }
        self.clock_in -= 1;
        match (self.now, self.began) {
            (Some(now), Some(began)) => now - began,
            _ => Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COUNTED: WaitPolicy = WaitPolicy {
        spin: Limit::Rounds(3),
        spins: Spins::Each(1),
        yields: Limit::Rounds(2),
        rest: Rest::Sleep {
            first: Duration::from_micros(5),
            max: Duration::from_micros(20),
        },
        clock_every: 1,
    };

    #[test]
    fn a_counted_policy_spins_then_yields_then_naps_longer() {
        let mut b = Backoff::new(&COUNTED);
        let steps: Vec<Step> = (0..8).map(|_| b.step()).collect();
        let us = |n| Step::Sleep(Duration::from_micros(n));
        let want = [
            Step::Spin(1),
            Step::Spin(1),
            Step::Spin(1),
            Step::Yield,
            Step::Yield,
            us(5),
            us(10),
            us(20),
        ];
        assert_eq!(steps, want);
        // The pure form agrees round by round.
        for (round, step) in want.iter().enumerate() {
            assert_eq!(COUNTED.step_at(round as u32), *step);
        }
        assert_eq!(COUNTED.step_at(100), us(20));
        b.reset();
        assert_eq!(b.step(), Step::Spin(1));
    }

    #[test]
    fn doubling_spins_like_exponential_backoff() {
        let p = WaitPolicy {
            spin: Limit::Rounds(7),
            spins: Spins::Doubling,
            ..WaitPolicy::spin_rounds(0, 0)
        };
        let mut b = Backoff::new(&p);
        let spins: Vec<Step> = (0..8).map(|_| b.step()).collect();
        let want: Vec<Step> = [1, 2, 4, 8, 16, 32, 64]
            .map(Step::Spin)
            .into_iter()
            .chain([Step::Over])
            .collect();
        assert_eq!(spins, want);
    }

    #[test]
    fn a_timed_phase_ends_when_its_time_is_up_reading_the_clock_sparingly() {
        let p = WaitPolicy {
            spin: Limit::Until(Duration::from_millis(20)),
            spins: Spins::Each(1),
            yields: Limit::Rounds(0),
            rest: Rest::Park,
            clock_every: 64,
        };
        let start = Instant::now();
        let mut b = Backoff::new(&p);
        let (mut spins, mut reads) = (0u64, 0u64);
        loop {
            match b.pause() {
                Step::Spin(_) => spins += 1,
                Step::Park => break,
                s => panic!("{s:?}"),
            }
            reads += u64::from(b.clock_read().is_some());
        }
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert!(
            reads >= 1 && reads * 64 >= spins && reads <= spins / 64 + 1,
            "{reads} of {spins}"
        );
        // A stale clock is read at the next step.
        b.reset();
        b.step();
        b.clock_stale();
        b.step();
        assert!(b.clock_read().is_some());
    }

    #[test]
    fn a_policy_that_starts_over_cycles() {
        let p = WaitPolicy {
            spin: Limit::Rounds(1),
            spins: Spins::Each(64),
            yields: Limit::Rounds(1),
            rest: Rest::Again,
            clock_every: 1,
        };
        let mut b = Backoff::new(&p);
        let steps: Vec<Step> = (0..4).map(|_| b.step()).collect();
        assert_eq!(
            steps,
            [Step::Spin(64), Step::Yield, Step::Spin(64), Step::Yield]
        );
    }

    #[test]
    fn wait_until_returns_when_the_condition_holds_or_the_policy_ends() {
        let other = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = other.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            flag.store(true, std::sync::atomic::Ordering::Release);
        });
        assert!(COUNTED.wait_until(|| other.load(std::sync::atomic::Ordering::Acquire)));
        t.join().unwrap();
        let mut looks = 0;
        assert!(!WaitPolicy::spin_rounds(4, 1).wait_until(|| {
            looks += 1;
            false
        }));
        assert_eq!(looks, 5);
    }
}
