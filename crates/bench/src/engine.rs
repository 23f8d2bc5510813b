//! `easyio bench engine`: latency and bandwidth of the copy engines (EASYIO Fig. 2–3,
//! Fastmove §3) per backend, copy size, direction, batch size and channel count, each
//! beside the single-core CPU copy of the same run (`Pmem::copy_persist` into the
//! region, `Pmem::read` out of it).
//!
//! Bandwidth: one thread submits batches back to back (blocking on a full channel)
//! for a round, round-robin over the channels, then waits for the last SNs. Latency:
//! one batch at a time, submit then wait. Rounds of the engine and of its CPU peer
//! alternate; the median of the rounds is reported.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use engine::{BackendKind, Desc, Engine, EngineConfig, Sn, AREA_BYTES};
use pmem::{Pmem, Region};
use serde::Serialize;

use crate::raw::{open_region, SIZES};
use crate::report::{self, size_label, Machine};
use crate::{gib_per_s, median, time_per_op};

/// Rounds per measurement; the median is reported.
const ROUNDS: usize = 3;
/// Batch sizes measured for bandwidth (EASYIO Fig. 2: "no batch" and "batch = 4").
const BATCHES: [usize; 2] = [1, 4];
/// Channel counts measured for bandwidth of the software engine (Fig. 3).
const CHANNELS: [usize; 2] = [1, 2];
/// The copy size whose software-engine bandwidth is the headline figure.
const HEADLINE_BYTES: u64 = 64 << 10;

/// The options of `easyio bench engine`.
#[derive(Args)]
pub struct EngineArgs {
    /// Where to create the benchmark region (as for `bench raw`). Default: a temporary
    /// region in /dev/shm.
    #[arg(long)]
    image: Option<PathBuf>,
    /// Milliseconds per measurement round (1 to 60000).
    #[arg(long, default_value_t = 60, value_parser = crate::args::millis())]
    round_ms: u64,
    /// Backends to measure, comma separated (default: every backend available here).
    #[arg(long, value_delimiter = ',')]
    backends: Option<Vec<String>>,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Dir {
    ToRegion,
    FromRegion,
}

impl Dir {
    fn name(self) -> &'static str {
        match self {
            Dir::ToRegion => "to-region",
            Dir::FromRegion => "from-region",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Metric {
    Bandwidth,
    Latency,
}

#[derive(Serialize)]
struct Row {
    backend: &'static str,
    direction: Dir,
    metric: Metric,
    bytes: u64,
    batch: usize,
    channels: usize,
    gib_per_s: f64,
    ns_per_op: f64,
    /// Bandwidth as a fraction of the single-core CPU copy of the same size and
    /// direction measured in the same run (persistent copy, or memcpy out).
    vs_cpu_copy: f64,
}

#[derive(Serialize)]
struct Peer {
    path: &'static str,
    bytes: u64,
    gib_per_s: f64,
    ns_per_op: f64,
}

#[derive(Serialize)]
struct Headline {
    bytes: u64,
    software_gib_per_s: f64,
    persistent_copy_gib_per_s: f64,
    ratio: f64,
}

#[derive(Serialize)]
struct Report {
    machine: Machine,
    region: String,
    durability: String,
    backends: Vec<&'static str>,
    skipped: Vec<String>,
    peers: Vec<Peer>,
    results: Vec<Row>,
    headline: Option<Headline>,
}

/// What one measurement runs.
#[derive(Clone, Copy)]
struct Case {
    dir: Dir,
    metric: Metric,
    bytes: u64,
    batch: usize,
    channels: usize,
}

/// Buffers and destinations shared by every measurement.
struct Bench {
    region: Arc<Region>,
    src: Vec<u8>,
    dst: Vec<u8>,
    slots: u64,
    round: Duration,
}

impl Bench {
    /// Region offset of the `i`-th copy of `bytes`: rotating through the data area so
    /// that copies do not hit the cache.
    fn off(&self, i: u64, bytes: u64) -> u64 {
        let n = self.slots / bytes;
        AREA_BYTES.next_multiple_of(bytes) + (i % n) * bytes
    }

    /// The descriptors of batch `i` on channel `ch`. Reads land in the channel's own
    /// slots of `dst` (the address of `self.dst`, taken once per round so that no
    /// reference to it is made while engines write into it).
    fn descs(&self, case: &Case, i: u64, ch: usize, dst: *mut u8) -> Vec<Desc> {
        let b = case.bytes as usize;
        (0..case.batch)
            .map(|k| {
                let off = self.off(i * case.batch as u64 + k as u64, case.bytes);
                match case.dir {
                    Dir::ToRegion => Desc::write(&self.src[..b], off),
                    Dir::FromRegion => {
                        let slot = ch * case.batch + k;
                        Desc::from_region(off, dst.wrapping_add(slot * b), b)
                    }
                }
            })
            .collect()
    }

    /// Runs `case` on `engine` for one round; returns ns per batch.
    fn engine_round(&mut self, engine: &Engine, case: &Case) -> anyhow::Result<f64> {
        assert!(case.channels * case.batch * case.bytes as usize <= self.dst.len());
        let dst = self.dst.as_mut_ptr();
        let mut last = Outstanding {
            engine,
            sns: vec![None; case.channels],
        };
        let start = Instant::now();
        let mut i = 0u64;
        while start.elapsed() < self.round {
            let ch = (i % case.channels as u64) as usize;
            let descs = self.descs(case, i, ch, dst);
            // SAFETY: `src` is only read, by anyone, during the round. Each channel reads
            // into slots of `dst` of its own (sized above), which its batches fill one
            // after another (a channel runs its batches in order), and nothing else
            // touches `dst` until every SN is over: `last` waits for them, on `?` too.
            let sn = unsafe { engine.submit(ch as u16, &descs)? };
            // A channel's later SN covers its earlier ones.
            last.sns[ch] = Some(sn);
            if case.metric == Metric::Latency {
                last.wait_all()?;
            }
            i += 1;
        }
        last.wait_all()?;
        Ok(start.elapsed().as_nanos() as f64 / i as f64)
    }

    /// The CPU copy of the same bytes on this thread; returns ns per batch.
    fn cpu_round(&mut self, case: &Case) -> f64 {
        let (region, b) = (self.region.clone(), case.bytes as usize);
        let batch = case.batch as u64;
        time_per_op(self.round, |i| {
            for k in 0..batch {
                let off = self.off(i * batch + k, case.bytes);
                match case.dir {
                    Dir::ToRegion => region.copy_persist(off, &self.src[..b]),
                    Dir::FromRegion => region.read(off, &mut self.dst[..b]),
                }
            }
        })
    }
}

/// The last SN submitted to each channel of a round, waited for when dropped: a round
/// that returns early (an error) leaves no copy running into the buffers.
struct Outstanding<'e> {
    engine: &'e Engine,
    sns: Vec<Option<Sn>>,
}

impl Outstanding<'_> {
    /// Waits for every SN; on an error the SNs not yet waited for stay, for `drop`.
    fn wait_all(&mut self) -> engine::Result<()> {
        for slot in &mut self.sns {
            if let Some(sn) = *slot {
                // `Ok` or `Err`, the channel is then done with the SN's buffers.
                *slot = None;
                self.engine.wait(sn)?;
            }
        }
        Ok(())
    }
}

impl Drop for Outstanding<'_> {
    fn drop(&mut self) {
        for sn in self.sns.iter_mut().filter_map(Option::take) {
            let _ = self.engine.wait(sn);
        }
    }
}

/// `easyio bench engine`: set up the region and buffers, measure every case of every
/// backend beside the CPU copy, report.
pub fn run(args: EngineArgs) -> anyhow::Result<()> {
    let region = Arc::new(open_region(args.image.as_deref())?);
    let max = *SIZES.last().unwrap();
    let mut bench = Bench {
        slots: region.len() - AREA_BYTES.next_multiple_of(max),
        region: region.clone(),
        src: (0..max).map(|i| (i * 7) as u8).collect(),
        // A slot of the largest copy per descriptor of a batch, per channel.
        dst: vec![
            0u8;
            max as usize * BATCHES.iter().max().unwrap() * CHANNELS.iter().max().unwrap()
        ],
        round: Duration::from_millis(args.round_ms),
    };
    let (kinds, skipped) = select_backends(args.backends.as_deref())?;
    let channels = *CHANNELS.iter().max().unwrap();
    engine::format_records(&*region, 0, channels)?;
    let cfg = EngineConfig {
        channels,
        ..EngineConfig::default()
    };
    let mut peers = Vec::new();
    let mut results = Vec::new();
    for kind in &kinds {
        let engine = Engine::open(*kind, region.clone(), &cfg)
            .with_context(|| format!("opening the {} engine", kind.name()))?;
        for case in cases(*kind, engine.channels()) {
            let (row, peer) = bench.measure(&engine, *kind, &case)?;
            results.push(row);
            peers.extend(peer);
        }
    }
    std::hint::black_box(&bench.dst);
    let report = Report {
        machine: Machine::this(),
        region: region.path().display().to_string(),
        durability: region.durability().describe().to_string(),
        backends: kinds.iter().map(|k| k.name()).collect(),
        skipped,
        peers,
        headline: headline(&results),
        results,
    };
    if args.json {
        return report::print_json(&report);
    }
    print_table(&report, args.round_ms);
    Ok(())
}

impl Bench {
    /// One case on `engine` beside the CPU copy, in alternating rounds; the CPU copy
    /// is also a peer row when the case is one plain copy.
    fn measure(
        &mut self,
        engine: &Engine,
        kind: BackendKind,
        case: &Case,
    ) -> anyhow::Result<(Row, Option<Peer>)> {
        let (mut eng, mut cpu) = (Vec::new(), Vec::new());
        for r in 0..ROUNDS {
            // Alternate the order so that neither side always runs on a warmer machine.
            if r % 2 == 0 {
                eng.push(self.engine_round(engine, case)?);
                cpu.push(self.cpu_round(case));
            } else {
                cpu.push(self.cpu_round(case));
                eng.push(self.engine_round(engine, case)?);
            }
        }
        let bytes = case.bytes * case.batch as u64;
        let (ns, cpu_ns) = (median(eng), median(cpu));
        let peer = (case.batch == 1 && case.channels == 1 && case.metric == Metric::Bandwidth)
            .then(|| Peer {
                path: match case.dir {
                    Dir::ToRegion => "persistent-copy",
                    Dir::FromRegion => "memcpy-read",
                },
                bytes: case.bytes,
                gib_per_s: gib_per_s(bytes, cpu_ns),
                ns_per_op: cpu_ns,
            });
        let row = Row {
            backend: kind.name(),
            direction: case.dir,
            metric: case.metric,
            bytes: case.bytes,
            batch: case.batch,
            channels: case.channels,
            gib_per_s: gib_per_s(bytes, ns),
            ns_per_op: ns,
            vs_cpu_copy: cpu_ns / ns,
        };
        Ok((row, peer))
    }
}

/// The headline: the software engine's bandwidth into the region at 64 KiB, one
/// channel, no batch, beside the persistent copy.
fn headline(results: &[Row]) -> Option<Headline> {
    results
        .iter()
        .find(|r| {
            r.backend == "software"
                && r.direction == Dir::ToRegion
                && r.metric == Metric::Bandwidth
                && r.bytes == HEADLINE_BYTES
                && r.batch == 1
                && r.channels == 1
        })
        .map(|r| {
            let cpu = r.gib_per_s / r.vs_cpu_copy;
            Headline {
                bytes: HEADLINE_BYTES,
                software_gib_per_s: r.gib_per_s,
                persistent_copy_gib_per_s: cpu,
                ratio: r.vs_cpu_copy,
            }
        })
}

/// The measurements of one backend: bandwidth and latency per size and direction on
/// one channel, bandwidth with batches, and (for engines with workers) on more
/// channels.
fn cases(kind: BackendKind, channels: usize) -> Vec<Case> {
    let mut cases = Vec::new();
    for dir in [Dir::ToRegion, Dir::FromRegion] {
        for &bytes in &SIZES {
            let case = |metric, batch, channels| Case {
                dir,
                metric,
                bytes,
                batch,
                channels,
            };
            for &batch in &BATCHES {
                cases.push(case(Metric::Bandwidth, batch, 1));
            }
            for &n in CHANNELS.iter().filter(|&&n| n > 1 && n <= channels) {
                if kind != BackendKind::Cpu {
                    cases.push(case(Metric::Bandwidth, 1, n));
                }
            }
            cases.push(case(Metric::Latency, 1, 1));
        }
    }
    cases
}

/// The backends asked for (default: all available), and why any were left out.
fn select_backends(names: Option<&[String]>) -> anyhow::Result<(Vec<BackendKind>, Vec<String>)> {
    let available = engine::available();
    if let Some(names) = names {
        let kinds = names
            .iter()
            .map(|n| n.parse::<BackendKind>())
            .collect::<Result<Vec<_>, _>>()?;
        return Ok((kinds, Vec::new()));
    }
    let mut kinds = Vec::new();
    let mut skipped = Vec::new();
    for b in available {
        if b.available {
            kinds.push(b.kind);
        } else {
            skipped.push(format!("{}: {}", b.kind.name(), b.detail.join("; ")));
        }
    }
    Ok((kinds, skipped))
}

fn print_table(report: &Report, round_ms: u64) {
    println!(
        "easyio bench engine — one submitting thread, {ROUNDS} rounds of {round_ms} ms, median"
    );
    println!("machine: {}", report.machine.describe());
    println!("region:  {} ({})", report.region, report.durability);
    for s in &report.skipped {
        println!("skipped: {s}");
    }
    let rows = report
        .results
        .iter()
        .map(|r| {
            vec![
                r.backend.to_string(),
                r.direction.name().to_string(),
                match r.metric {
                    Metric::Bandwidth => "bandwidth",
                    Metric::Latency => "latency",
                }
                .to_string(),
                size_label(r.bytes),
                r.batch.to_string(),
                r.channels.to_string(),
                format!("{:.2}", r.gib_per_s),
                format!("{:.0}", r.ns_per_op),
                format!("{:.2}x", r.vs_cpu_copy),
            ]
        })
        .collect();
    println!(
        "{}",
        report::table(
            &[
                "engine",
                "direction",
                "metric",
                "size",
                "batch",
                "channels",
                "GiB/s",
                "ns/batch",
                "vs CPU copy"
            ],
            rows
        )
    );
    if let Some(h) = &report.headline {
        println!(
            "software engine, {} into the region, one channel: {:.2} GiB/s = {:.2}x the persistent copy ({:.2} GiB/s) of this run",
            size_label(h.bytes),
            h.software_gib_per_s,
            h.ratio,
            h.persistent_copy_gib_per_s
        );
    }
}
