//! Test-only fault injection: a delegation thread made to die under a request, so that
//! tests can show a caller gets an error, not a panic or a hang, and only once nothing
//! touches its buffers any more. Off unless a test turns it on. The mechanism is the
//! engine's ([`engine::faults!`]); a fault here trips once.
//!
//! Public only with the `testing` feature. Without it, `take` is a constant `Fault::None` the
//! compiler folds away: the product carries no hook and no check.

engine::faults! {
    /// A deliberate failure.
    pub enum Fault {
        /// Everything as designed.
        None = 0,
        /// The delegation thread that takes the next stripe panics before copying it.
        DelegatePanic = 1,
        /// The delegation thread that takes the next stripe returns without copying it,
        /// dropping its end of its queue.
        DelegateExit = 2,
    }
}
