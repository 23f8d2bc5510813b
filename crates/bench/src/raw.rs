//! `easyio bench raw`: the physical limit every later benchmark is measured against.
//!
//! Single-core bandwidth and latency of (a) the persistent copy into the region
//! (non-temporal stores + fence), (b) memcpy out of the region and (c) memcpy into the
//! region + cache-line write-back + fence, beside the peer of (a): a plain C loop of
//! 64-byte non-temporal stores + sfence. Destinations rotate through a region larger
//! than the last-level cache so that reads do not come from cache.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use pmem::{peer, Pmem, Region};
use serde::Serialize;

use crate::report::{self, size_label, Machine};
use crate::{gib_per_s, median, time_per_op};

/// Copy sizes measured, from one page to one huge page.
pub const SIZES: [u64; 5] = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 2 << 20];
/// Region size: far larger than any last-level cache on the machines we run on.
pub const REGION_BYTES: u64 = 256 << 20;
/// Alternating rounds per (size, path); the median is reported.
pub const ROUNDS: usize = 5;

/// The options of `easyio bench raw`.
#[derive(Args)]
pub struct RawArgs {
    /// Where to create the benchmark region: a directory (a temporary region is made
    /// inside it) or a path that does not exist yet (created, then removed). Default: a
    /// temporary region in /dev/shm. An existing region is never overwritten.
    #[arg(long)]
    image: Option<PathBuf>,
    /// Milliseconds per measurement round (1 to 60000).
    #[arg(long, default_value_t = 60, value_parser = crate::args::millis())]
    round_ms: u64,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// What is measured.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Path {
    /// `Pmem::copy_persist`.
    PersistentCopy,
    /// The C loop of 64-byte non-temporal stores + sfence.
    CNtLoop,
    /// `Pmem::read`.
    Read,
    /// `Pmem::write_persist`: memcpy + write-back + fence.
    CopyFlush,
}

impl Path {
    const ALL: [Path; 4] = [
        Path::PersistentCopy,
        Path::CNtLoop,
        Path::Read,
        Path::CopyFlush,
    ];

    fn name(self) -> &'static str {
        match self {
            Path::PersistentCopy => "persistent-copy",
            Path::CNtLoop => "c-nt-loop",
            Path::Read => "memcpy-read",
            Path::CopyFlush => "memcpy-flush-fence",
        }
    }
}

#[derive(Serialize)]
struct Row {
    path: &'static str,
    bytes: u64,
    gib_per_s: f64,
    ns_per_op: f64,
    /// Persistent copy only: bandwidth as a fraction of the C loop's in this run.
    #[serde(skip_serializing_if = "Option::is_none")]
    vs_c_nt_loop: Option<f64>,
}

#[derive(Serialize)]
struct Report {
    machine: Machine,
    region: String,
    durability: String,
    results: Vec<Row>,
}

/// `easyio bench raw`: every path at every size in alternating rounds, then the
/// report.
pub fn run(args: RawArgs) -> anyhow::Result<()> {
    let region = open_region(args.image.as_deref())?;
    let round = Duration::from_millis(args.round_ms);
    let src: Vec<u8> = (0..SIZES[SIZES.len() - 1])
        .map(|i| (i * 13) as u8)
        .collect();
    let mut dst = vec![0u8; src.len()];

    let mut results = Vec::new();
    for &size in &SIZES {
        let s = &src[..size as usize];
        let mut samples = vec![Vec::new(); Path::ALL.len()];
        for r in 0..ROUNDS {
            // Alternate the order so that neither path always runs on a warmer machine.
            let order: Vec<usize> = if r % 2 == 0 {
                vec![0, 1, 2, 3]
            } else {
                vec![3, 2, 1, 0]
            };
            for k in order {
                let ns = measure_with(&region, size, Path::ALL[k], round, s, &mut dst);
                samples[k].push(ns);
            }
        }
        let medians: Vec<f64> = samples.into_iter().map(median).collect();
        let peer_bw = gib_per_s(size, medians[1]);
        for (k, &ns) in medians.iter().enumerate() {
            let path = Path::ALL[k];
            let bw = gib_per_s(size, ns);
            results.push(Row {
                path: path.name(),
                bytes: size,
                gib_per_s: bw,
                ns_per_op: ns,
                vs_c_nt_loop: (path == Path::PersistentCopy).then_some(bw / peer_bw),
            });
        }
    }
    std::hint::black_box(&dst);

    let report = Report {
        machine: Machine::this(),
        region: region.path().display().to_string(),
        durability: region.durability().describe().to_string(),
        results,
    };
    if args.json {
        return report::print_json(&report);
    }
    println!(
        "easyio bench raw — single core, {} rounds of {} ms, median",
        ROUNDS, args.round_ms
    );
    println!("machine: {}", report.machine.describe());
    println!("region:  {} ({})", report.region, report.durability);
    let rows = report
        .results
        .iter()
        .map(|r| {
            vec![
                size_label(r.bytes),
                r.path.to_string(),
                format!("{:.2}", r.gib_per_s),
                format!("{:.0}", r.ns_per_op),
                r.vs_c_nt_loop.map_or(String::new(), |v| format!("{v:.2}x")),
            ]
        })
        .collect();
    println!(
        "{}",
        report::table(&["size", "path", "GiB/s", "ns/op", "vs C NT loop"], rows)
    );
    Ok(())
}

/// Mean ns per operation of `path` moving `size` bytes for about `budget`, with
/// destinations (or sources) rotating through the whole region.
pub fn measure(region: &Region, size: u64, path: Path, budget: Duration) -> f64 {
    measure_span(region, size, path, budget, region.len())
}

/// Mean ns per operation of `path` moving `size` bytes for about `budget`, with
/// destinations (or sources) rotating through the first `span` bytes of the region:
/// `span == size` moves one hot block again and again (what a workload that re-reads
/// one block does), a span larger than the last-level cache moves cold data.
pub fn measure_span(region: &Region, size: u64, path: Path, budget: Duration, span: u64) -> f64 {
    let src: Vec<u8> = (0..size).map(|i| (i * 13) as u8).collect();
    let mut dst = vec![0u8; size as usize];
    measure_span_with(region, size, path, budget, span, &src, &mut dst)
}

/// The median ns of one operation of `path` moving `size` bytes, each timed on its
/// own for about `budget` the way `bench micro` times a file operation (the end of
/// one is the start of the next), with destinations (or sources) rotating through
/// the first `span` bytes of the region.
pub fn p50_ns(region: &Region, size: u64, path: Path, budget: Duration, span: u64) -> f64 {
    let src: Vec<u8> = (0..size).map(|i| (i * 13) as u8).collect();
    let mut dst = vec![0u8; size as usize];
    let len = region.len();
    let mut ns = Vec::new();
    let begin = Instant::now();
    let mut now = begin;
    let mut i = 0u64;
    while now - begin < budget {
        let off = slot_offset(i, size, span, len);
        match path {
            Path::PersistentCopy => region.copy_persist(off, &src),
            Path::CNtLoop => peer::c_nt_copy_persist(region, off, &src),
            Path::Read => region.read(off, &mut dst),
            Path::CopyFlush => region.write_persist(off, &src),
        }
        let t1 = Instant::now();
        ns.push((t1 - now).as_nanos() as f64);
        now = t1;
        i += 1;
    }
    std::hint::black_box(&dst);
    median(ns)
}

/// The median ns of one persistent copy of `size` bytes followed by one ordered
/// 8-byte commit (`store_u64_persist` of a word that stays cached, as a log's tail
/// does), timed as [`p50_ns`] times one copy: the least a crash-consistent
/// copy-on-write write of `size` bytes costs, since its commit may become durable only
/// after its data.
pub fn committed_p50_ns(region: &Region, size: u64, budget: Duration, span: u64) -> f64 {
    let src: Vec<u8> = (0..size).map(|i| (i * 13) as u8).collect();
    // The commit word lies past every slot.
    let len = region.len();
    let commit = (len - 64) & !63;
    let mut ns = Vec::new();
    let begin = Instant::now();
    let mut now = begin;
    let mut i = 0u64;
    while now - begin < budget {
        let off = slot_offset(i, size, span, commit);
        region.copy_persist(off, &src);
        region.store_u64_persist(commit, i);
        let t1 = Instant::now();
        ns.push((t1 - now).as_nanos() as f64);
        now = t1;
        i += 1;
    }
    median(ns)
}

/// The offset of the `i`th copy of `size` bytes rotating through the first `span`
/// bytes of a region of `len` bytes (at least one slot, and never past the region).
pub fn slot_offset(i: u64, size: u64, span: u64, len: u64) -> u64 {
    let n_slots = (span.min(len) / size).max(1);
    (i % n_slots) * size
}

fn measure_with(
    region: &Region,
    size: u64,
    path: Path,
    budget: Duration,
    s: &[u8],
    dst: &mut [u8],
) -> f64 {
    measure_span_with(region, size, path, budget, region.len(), s, dst)
}

fn measure_span_with(
    region: &Region,
    size: u64,
    path: Path,
    budget: Duration,
    span: u64,
    s: &[u8],
    dst: &mut [u8],
) -> f64 {
    let len = region.len();
    let off = |i: u64| slot_offset(i, size, span, len);
    let d = &mut dst[..size as usize];
    match path {
        Path::PersistentCopy => time_per_op(budget, |i| region.copy_persist(off(i), s)),
        Path::CNtLoop => time_per_op(budget, |i| peer::c_nt_copy_persist(region, off(i), s)),
        Path::Read => time_per_op(budget, |i| region.read(off(i), d)),
        Path::CopyFlush => time_per_op(budget, |i| region.write_persist(off(i), s)),
    }
}

/// The benchmark region: a temporary one in /dev/shm, in a directory, or at a new path.
pub fn open_region(image: Option<&std::path::Path>) -> anyhow::Result<Region> {
    match image {
        None => Ok(Region::create_temp(REGION_BYTES)?),
        Some(p) if p.is_dir() => Ok(Region::create_temp_in(p, REGION_BYTES)?),
        Some(p) if p.exists() => bail!(
            "{} exists; bench raw overwrites its whole region, so give a directory or a new path",
            p.display()
        ),
        Some(p) => {
            // A new path: create it, and remove it when done, like a temporary region.
            let region = Region::create(p, REGION_BYTES)
                .with_context(|| format!("creating benchmark region {}", p.display()))?;
            drop(region);
            let dir = p.parent().unwrap_or(std::path::Path::new("."));
            std::fs::remove_file(p)?;
            Ok(Region::create_temp_in(dir, REGION_BYTES)?)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::slot_offset;

    #[test]
    fn a_span_of_one_block_is_one_hot_offset() {
        assert!((0..100).all(|i| slot_offset(i, 4096, 4096, 1 << 20) == 0));
    }

    #[test]
    fn a_span_rotates_through_its_slots_only() {
        let offs: Vec<u64> = (0..6)
            .map(|i| slot_offset(i, 4096, 3 * 4096, 1 << 20))
            .collect();
        assert_eq!(offs, [0, 4096, 8192, 0, 4096, 8192]);
        // A span larger than the region is the whole region.
        assert!((0..1000).all(|i| slot_offset(i, 4096, u64::MAX, 1 << 20) < 1 << 20));
    }
}
