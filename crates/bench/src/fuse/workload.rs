//! The timed workloads: the data loop (reads or writes of the data file), the create
//! loop, and a measured run of either with the CPU it took.

use std::time::{Duration, Instant};

use anyhow::bail;
use clap::ValueEnum;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::data::{
    check_created, created, looks_right, open, pattern, prefill, stamp, verify_file, Buf, BLOCK,
    CREATE_DIR, DATA, PATTERN_BLOCKS, SEQ_IO,
};
use super::server;
use crate::target::{cpu_seconds, timed_loop, Handle, Mount, ThreadResult};

/// Seed of the random offsets: every door gets the same sequence.
const SEED: u64 = 0x5EED_F05E;
/// Files the create workload makes before it checks and removes them (untimed).
const CREATE_BATCH: u64 = 1_000;

/// A workload (see the module's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// 4 KiB random reads.
    Randread,
    /// 4 KiB random writes.
    Randwrite,
    /// 1 MiB sequential reads.
    Seqread,
    /// 1 MiB sequential writes.
    Seqwrite,
    /// Create, write 4 KiB, close: many small files in one directory.
    Create,
    /// Real programs on the mount and on tmpfs, by wall time (see [`programs`](super::programs)).
    Programs,
    /// `statx` of the directory with `AT_STATX_FORCE_SYNC`: through the mount one
    /// `getattr` request, which the kernel sends whatever it caches, to the server and
    /// back (the cheapest request; the floor of every other).
    Roundtrip,
}

impl Workload {
    /// Bytes per operation.
    pub(super) fn io(self) -> usize {
        match self {
            Workload::Seqread | Workload::Seqwrite => SEQ_IO,
            Workload::Roundtrip => 0,
            _ => BLOCK,
        }
    }

    fn reads(self) -> bool {
        matches!(self, Workload::Randread | Workload::Seqread)
    }

    pub(super) fn sequential(self) -> bool {
        matches!(self, Workload::Seqread | Workload::Seqwrite)
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Workload::Randread => "randread",
            Workload::Randwrite => "randwrite",
            Workload::Seqread => "seqread",
            Workload::Seqwrite => "seqwrite",
            Workload::Create => "create",
            Workload::Programs => "programs",
            Workload::Roundtrip => "roundtrip",
        }
    }
}

/// What a run measured, before it becomes a row.
pub(super) struct Measured {
    pub(super) result: ThreadResult,
    pub(super) client_cpu_s: f64,
    pub(super) server_cpu_s: Option<f64>,
    pub(super) checked_blocks: u64,
    pub(super) files_checked: Option<u64>,
    pub(super) first_pass_gib_per_s: Option<f64>,
}

/// What a timed data workload measured: the client's result, the blocks its reads
/// checked, and the time of its first pass over the file (sequential workloads).
type DataLoop = (ThreadResult, u64, Option<Duration>);

/// A timed data workload on the open data file (bad blocks read are an error).
fn data_loop(
    t: &Mount,
    h: &Handle,
    w: Workload,
    size: u64,
    deadline: Instant,
) -> anyhow::Result<DataLoop> {
    let io = w.io();
    let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(SEED);
    let (blocks, ios) = (size / BLOCK as u64, size / io as u64);
    let mut buf = Buf::zeroed(io);
    let mut pat = pattern();
    let (mut checked, mut bad) = (0u64, 0u64);
    let mut first_pass = None;
    let begin = Instant::now();
    let r = timed_loop(
        deadline,
        |i| {
            let off = if w.sequential() {
                (i % ios) * io as u64
            } else {
                rng.random_range(0..blocks) * BLOCK as u64
            };
            let b0 = off / BLOCK as u64;
            if w.reads() {
                let n = t.pread(h, &mut buf[..io], off)?;
                if n != io {
                    bail!("short read: {n} of {io} bytes at {off}");
                }
                for (j, block) in buf[..io].chunks(BLOCK).enumerate() {
                    bad += u64::from(!looks_right(block, b0 + j as u64));
                }
                checked += (io / BLOCK) as u64;
                if w.sequential() && i + 1 == ios {
                    first_pass = Some(begin.elapsed());
                }
                return Ok(io as u64);
            }
            let at = (b0 % PATTERN_BLOCKS) as usize * BLOCK;
            let src = &mut pat[at..at + io];
            for (j, block) in src.chunks_mut(BLOCK).enumerate() {
                stamp(block, b0 + j as u64, i + 1);
            }
            t.pwrite(h, src, off)?;
            if w.sequential() && i + 1 == ios {
                first_pass = Some(begin.elapsed());
            }
            Ok(io as u64)
        },
        |_| Ok(false),
    )?;
    if bad > 0 {
        bail!("{bad} of {checked} blocks read were wrong");
    }
    Ok((r, checked, first_pass))
}

/// The timed create workload: returns the client's result and the files checked.
fn create_loop(t: &Mount, deadline: Instant, direct: bool) -> anyhow::Result<(ThreadResult, u64)> {
    t.mkdir(CREATE_DIR)?;
    let mut pat = pattern();
    let mut cleared = 0u64;
    let r = timed_loop(
        deadline,
        |k| {
            let at = (k % PATTERN_BLOCKS) as usize * BLOCK;
            let block = &mut pat[at..at + BLOCK];
            stamp(block, k, 1);
            let h = open(t, &created(k), true, direct)?;
            t.pwrite(&h, block, 0)?;
            t.close(h)?;
            Ok(BLOCK as u64)
        },
        |k| {
            let due = k % CREATE_BATCH == 0;
            if due {
                check_created(t, cleared, k)?;
                cleared = k;
            }
            Ok(due)
        },
    )?;
    check_created(t, cleared, r.ops)?;
    let files = r.ops;
    Ok((r, files))
}

/// The timed round-trip workload: the directory's attributes, uncached, again and again.
fn roundtrip_loop(t: &Mount, deadline: Instant) -> anyhow::Result<ThreadResult> {
    timed_loop(
        deadline,
        |_| {
            t.stat_uncached()?;
            Ok(0)
        },
        |_| Ok(false),
    )
}

/// How a run goes: its length, the data file's size, and whether files are opened
/// with `O_DIRECT`.
#[derive(Clone, Copy)]
pub(super) struct Plan {
    pub(super) duration: Duration,
    pub(super) size: u64,
    pub(super) direct: bool,
}

/// Runs `w` on `t` as `plan` says (the data file pre-filled first, untimed), with the
/// CPU of this process and of `server` if given.
pub(super) fn measure(
    t: &Mount,
    w: Workload,
    plan: Plan,
    server: Option<&server::Server>,
) -> anyhow::Result<Measured> {
    let (size, direct) = (plan.size, plan.direct);
    let data = !matches!(w, Workload::Create | Workload::Roundtrip);
    if data {
        prefill(t, size)?;
    }
    let h = data.then(|| open(t, DATA, false, direct)).transpose()?;
    let server_cpu = || server.map(server::Server::cpu_seconds).transpose();
    let (cpu0, srv0) = (cpu_seconds(), server_cpu()?);
    let deadline = Instant::now() + plan.duration;
    let (result, checked, first_pass) = match &h {
        Some(h) => data_loop(t, h, w, size, deadline)?,
        None if w == Workload::Roundtrip => (roundtrip_loop(t, deadline)?, 0, None),
        None => {
            let (r, files) = create_loop(t, deadline, direct)?;
            (r, files, None)
        }
    };
    let client_cpu_s = cpu_seconds() - cpu0;
    let server_cpu_s = server_cpu()?.zip(srv0).map(|(a, b)| a - b);
    if let Some(h) = h {
        t.close(h)?;
    }
    let (checked_blocks, files_checked) = match w {
        Workload::Create => (checked, Some(checked)),
        Workload::Randwrite | Workload::Seqwrite => (verify_file(t, size, result.ops)?, None),
        _ => (checked, None),
    };
    Ok(Measured {
        result,
        client_cpu_s,
        server_cpu_s,
        checked_blocks,
        files_checked,
        first_pass_gib_per_s: first_pass.map(|d| gib(size) / d.as_secs_f64().max(1e-9)),
    })
}

/// `bytes` in GiB (at least a tiny amount, to divide by).
pub(super) fn gib(bytes: u64) -> f64 {
    (bytes as f64 / (1u64 << 30) as f64).max(1e-12)
}
