//! Sequence numbers: (channel, completion counter) pairs that name a submitted batch.

use std::fmt;

/// Most channels an engine can have: an SN names one of them.
pub const MAX_CHANNELS: usize = 64;
/// Bits of a raw SN that hold the counter; the channel sits in the 16 bits above.
pub const COUNTER_BITS: u32 = 48;
/// Largest counter value an SN can carry: 2.8e14 descriptors, nine years of a channel
/// completing a million descriptors a second. Submission refuses to go past it rather
/// than wrap.
pub const MAX_COUNTER: u64 = (1 << COUNTER_BITS) - 1;

/// A sequence number: the channel a batch was submitted to and the value that
/// channel's completion counter reaches when the batch is done.
///
/// Counters start at 1, so the raw value 0 ([`Sn::to_raw`]) never names a real batch
/// and is free to mean "no SN" in on-media structures.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Sn {
    channel: u16,
    counter: u64,
}

impl Sn {
    /// The SN of `counter` on `channel`; `None` when the counter is 0 or does not fit
    /// in [`COUNTER_BITS`], or the channel is not below [`MAX_CHANNELS`].
    pub fn new(channel: u16, counter: u64) -> Option<Sn> {
        let ok = counter != 0 && counter <= MAX_COUNTER && (channel as usize) < MAX_CHANNELS;
        ok.then_some(Sn { channel, counter })
    }

    /// The channel the batch went to.
    pub fn channel(self) -> u16 {
        self.channel
    }

    /// The completion-counter value that means "done".
    pub fn counter(self) -> u64 {
        self.counter
    }

    /// Packs the SN into 64 bits: channel in the top 16 bits, counter in the low 48.
    /// Never 0.
    pub fn to_raw(self) -> u64 {
        ((self.channel as u64) << COUNTER_BITS) | self.counter
    }

    /// Unpacks [`Sn::to_raw`]; `None` for 0 ("no SN") and for values no engine
    /// hands out (counter 0, channel out of range).
    pub fn from_raw(raw: u64) -> Option<Sn> {
        Sn::new((raw >> COUNTER_BITS) as u16, raw & MAX_COUNTER)
    }
}

impl fmt::Display for Sn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sn {}:{}", self.channel, self.counter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_round_trip_and_reserved_zero() {
        for (ch, c) in [(0u16, 1u64), (3, 77), (63, MAX_COUNTER)] {
            let sn = Sn::new(ch, c).unwrap();
            assert_ne!(sn.to_raw(), 0);
            assert_eq!(Sn::from_raw(sn.to_raw()), Some(sn));
        }
        assert_eq!(Sn::from_raw(0), None);
        assert_eq!(
            Sn::from_raw(5 << COUNTER_BITS),
            None,
            "counter 0 is never issued"
        );
        assert_eq!(Sn::new(0, MAX_COUNTER + 1), None);
        assert_eq!(Sn::new(MAX_CHANNELS as u16, 1), None);
        assert_eq!(Sn::new(2, 9).unwrap().to_raw(), (2 << 48) | 9);
    }
}
