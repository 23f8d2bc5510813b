//! Test-only fault injection: persistence orderings deliberately broken, so that the
//! crash harness can show it catches a missing write-back or fence. Off unless a test
//! turns it on. The mechanism is the engine's ([`engine::faults!`]).
//!
//! Public only with the `testing` feature. Without it, `active` is a constant `false`
//! the compiler folds away: the product carries no hook and no check.

engine::faults! {
    /// A deliberately broken ordering.
    pub enum Fault {
        /// Everything as designed.
        None = 0,
        /// A single-inode commit stores the log tail and fences without writing the
        /// tail's line back: a returned operation can be lost.
        CommitWithoutFlush = 1,
        /// Staging writes entries back but issues no fence before the tail is committed:
        /// the tail can reach the region before the entries it covers, and before the data
        /// the writer copied for them (that fence covers both).
        StageWithoutFence = 2,
        /// An orderless write commits its entries with SN 0 ("copy done") while the
        /// engine's copy may still be running: recovery keeps an entry whose data never
        /// fully arrived.
        AsyncEntryWithoutSn = 3,
        /// A change of extended attributes stores the new encoded set with cached stores,
        /// never written back, before committing the entry that names it: after a crash
        /// the entry may name blocks that never received the set.
        XattrSetWithoutWriteBack = 4,
        /// Recovery keeps the last sealed write past the log's tail without checking the
        /// seal of its data: after a crash it may keep an entry whose data never fully
        /// arrived (the entry and the data share one fence, with no order between them).
        SealNotChecked = 5,
    }
}
