//! Persistent completion records: one cache line per channel in a region area.
//!
//! # Record layout ([`RECORD_BYTES`] = 64 bytes, cache-line aligned)
//!
//! | offset | size | field                                                          |
//! |--------|------|----------------------------------------------------------------|
//! | 0      | 8    | completion counter, little endian: last descriptor completed   |
//! | 8      | 8    | magic `b"EIOCREC1"`                                            |
//! | 16     | 4    | channel index, little endian                                   |
//! | 20     | 4    | record format version, little endian ([`RECORD_VERSION`])     |
//! | 24     | 8    | durable counter: the counter, stored once it is durable        |
//! | 32     | 32   | zero                                                           |
//!
//! Record `c` of an area at offset `A` lies at `A + c * RECORD_BYTES`. The counter is
//! written with one atomic 8-byte store followed by write-back and a fence, and only
//! after every byte of the descriptors it covers is durable; so `counter >= sn` read at
//! any time, including after a crash, means that copy reached the region. Read while
//! the engine runs, it may show a counter stored but not yet written back, which a
//! crash can still lose: a running caller asks [`crate::Engine::is_done`], which says
//! done only once the counter is durable too. Counters start at 0 (nothing completed);
//! the first descriptor is counter 1.
//!
//! The durable counter is for other processes that map the region (clients of a
//! server, which have no engine to ask): the engine's publisher stores the counter
//! there again after the counter's own write-back and fence, so `durable >= sn`
//! means that the copy and the counter are both durable. It is a hint for running
//! readers and never read at recovery (a crash may lose it while keeping the
//! counter; a record formatted by an older build holds 0 there, which only delays a
//! reader until the next publication). Devices that write records themselves leave
//! it alone: their waiters ask the engine's owner.

use pmem::Pmem;

use crate::error::{Error, Result};
use crate::Sn;

/// Bytes of one channel's completion record (one cache line).
pub const RECORD_BYTES: u64 = 64;
/// Most channels an engine can have (defined with the SN, which names one); an area
/// of `MAX_CHANNELS * RECORD_BYTES` bytes holds the records of any engine.
pub use crate::sn::MAX_CHANNELS;
/// Bytes to reserve for a record area that fits any engine.
pub const AREA_BYTES: u64 = MAX_CHANNELS as u64 * RECORD_BYTES;
/// Version of the record format written by this code.
pub const RECORD_VERSION: u32 = 1;

const MAGIC: [u8; 8] = *b"EIOCREC1";
const COUNTER_OFF: u64 = 0;
const MAGIC_OFF: u64 = COUNTER_OFF + 8;
const CHANNEL_OFF: u64 = MAGIC_OFF + MAGIC.len() as u64;
const VERSION_OFF: u64 = CHANNEL_OFF + 4;
const USED: u64 = VERSION_OFF + 4;
const DURABLE_OFF: u64 = USED;
const _: () = assert!(DURABLE_OFF + 8 <= RECORD_BYTES);
const _: () = assert!(USED <= RECORD_BYTES && RECORD_BYTES == pmem::CACHE_LINE as u64);

/// Region offset of `channel`'s record in the area at `area_off`.
pub fn record_off(area_off: u64, channel: u16) -> u64 {
    area_off + channel as u64 * RECORD_BYTES
}

/// Region offset of the counter word of `channel`'s record.
pub fn counter_off(area_off: u64, channel: u16) -> u64 {
    record_off(area_off, channel) + COUNTER_OFF
}

/// Region offset of the durable-counter word of `channel`'s record (see the module
/// documentation).
pub fn durable_off(area_off: u64, channel: u16) -> u64 {
    record_off(area_off, channel) + DURABLE_OFF
}

/// Writes fresh records (counter 0) for channels `0..channels` and makes them durable.
/// What a file system does at format time; every SN of earlier use becomes not done.
pub fn format_records(pmem: &dyn Pmem, area_off: u64, channels: usize) -> Result<()> {
    check_area(pmem, area_off, channels)?;
    let mut image = vec![0u8; channels * RECORD_BYTES as usize];
    for (c, rec) in image.chunks_exact_mut(RECORD_BYTES as usize).enumerate() {
        let at = |o: u64| o as usize;
        rec[at(MAGIC_OFF)..at(CHANNEL_OFF)].copy_from_slice(&MAGIC);
        rec[at(CHANNEL_OFF)..at(VERSION_OFF)].copy_from_slice(&(c as u32).to_le_bytes());
        rec[at(VERSION_OFF)..at(USED)].copy_from_slice(&RECORD_VERSION.to_le_bytes());
    }
    pmem.write_persist(area_off, &image);
    Ok(())
}

/// Rewrites the header (magic, channel, version) of the records of channels
/// `0..channels`, keeping each counter: what a repair does to records whose header is
/// damaged. A counter is one atomic word no header byte shares, so a crash part-way
/// leaves every counter as it was.
pub fn rewrite_record_headers(pmem: &dyn Pmem, area_off: u64, channels: usize) -> Result<()> {
    check_area(pmem, area_off, channels)?;
    let mut header = [0u8; (USED - MAGIC_OFF) as usize];
    let at = |o: u64| (o - MAGIC_OFF) as usize;
    header[at(MAGIC_OFF)..at(CHANNEL_OFF)].copy_from_slice(&MAGIC);
    header[at(VERSION_OFF)..at(USED)].copy_from_slice(&RECORD_VERSION.to_le_bytes());
    for c in 0..channels as u16 {
        header[at(CHANNEL_OFF)..at(VERSION_OFF)].copy_from_slice(&(c as u32).to_le_bytes());
        pmem.write_persist(record_off(area_off, c) + MAGIC_OFF, &header);
    }
    Ok(())
}

/// True when the persistent record of `sn`'s channel says `sn` is done: one load and a
/// compare, needing no engine (crash recovery, another process). The record itself is
/// not validated here: check the area once with [`read_counters`] before relying on it.
pub fn record_is_done(pmem: &dyn Pmem, area_off: u64, sn: Sn) -> bool {
    pmem.load_u64(counter_off(area_off, sn.channel())) >= sn.counter()
}

/// Checks the records of channels `0..channels` and returns their counters.
pub fn read_counters(pmem: &dyn Pmem, area_off: u64, channels: usize) -> Result<Vec<u64>> {
    check_area(pmem, area_off, channels)?;
    (0..channels as u16)
        .map(|c| {
            let mut rec = [0u8; USED as usize];
            pmem.read(record_off(area_off, c), &mut rec);
            let u32_at =
                |o: u64| u32::from_le_bytes(rec[o as usize..o as usize + 4].try_into().unwrap());
            let bad = |reason: String| Error::Records { area_off, reason };
            if rec[MAGIC_OFF as usize..CHANNEL_OFF as usize] != MAGIC {
                return Err(bad(format!("record {c} is not formatted (no magic)")));
            }
            if u32_at(CHANNEL_OFF) != c as u32 {
                return Err(bad(format!(
                    "record {c} belongs to channel {}",
                    u32_at(CHANNEL_OFF)
                )));
            }
            if u32_at(VERSION_OFF) != RECORD_VERSION {
                return Err(bad(format!(
                    "record {c} has format version {}, this build reads {RECORD_VERSION}",
                    u32_at(VERSION_OFF)
                )));
            }
            Ok(pmem.load_u64(counter_off(area_off, c)))
        })
        .collect()
}

fn check_area(pmem: &dyn Pmem, area_off: u64, channels: usize) -> Result<()> {
    let bad = |reason: String| Err(Error::Records { area_off, reason });
    if channels == 0 || channels > MAX_CHANNELS {
        return bad(format!(
            "{channels} channels; an engine has 1..={MAX_CHANNELS}"
        ));
    }
    if !area_off.is_multiple_of(RECORD_BYTES) {
        return bad(format!("not aligned to a {RECORD_BYTES}-byte cache line"));
    }
    let len = channels as u64 * RECORD_BYTES;
    if area_off.checked_add(len).is_none_or(|end| end > pmem.len()) {
        return bad(format!(
            "{len} bytes do not fit in the region ({} bytes)",
            pmem.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmem::Region;

    #[test]
    fn rewritten_headers_read_and_keep_their_counters() {
        let pm = pmem::MemPmem::new(4096);
        format_records(&pm, 0, 2).unwrap();
        pm.store_u64(counter_off(0, 1), 7);
        pm.write(record_off(0, 1) + MAGIC_OFF, b"garbage!");
        pm.write(record_off(0, 0) + CHANNEL_OFF, &9u32.to_le_bytes());
        assert!(read_counters(&pm, 0, 2).is_err());
        rewrite_record_headers(&pm, 0, 2).unwrap();
        assert_eq!(read_counters(&pm, 0, 2).unwrap(), vec![0, 7]);
    }

    #[test]
    fn format_then_read_and_done() {
        let region = Region::create_temp(pmem::MIN_REGION + 4096).unwrap();
        let area = 512;
        format_records(&region, area, 4).unwrap();
        assert_eq!(read_counters(&region, area, 4).unwrap(), vec![0; 4]);
        region.store_u64_persist(counter_off(area, 2), 7);
        assert!(record_is_done(&region, area, Sn::new(2, 7).unwrap()));
        assert!(!record_is_done(&region, area, Sn::new(2, 8).unwrap()));
        assert!(!record_is_done(&region, area, Sn::new(1, 1).unwrap()));
        let err = read_counters(&region, area, 5).unwrap_err();
        assert!(
            err.to_string().contains("record 4 is not formatted"),
            "{err}"
        );
        assert!(format_records(&region, 8, 1).is_err(), "unaligned area");
        assert!(format_records(&region, 0, MAX_CHANNELS + 1).is_err());
        assert!(format_records(&region, region.len() - 64, 2).is_err());
    }
}
