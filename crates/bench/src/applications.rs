//! The eight real-world applications of EASYIO §6.3 (Table 1): their data, generated
//! deterministically, and the computation each performs on one input.

use std::sync::Arc;

use aes::cipher::{KeyIvInit, StreamCipher};
use clap::ValueEnum;
use kiddo::{KdTree, SquaredEuclidean};
use rand::{Rng as _, RngCore as _, SeedableRng};
use rand_pcg::Pcg64Mcg;
use regex::bytes::Regex;
use serde::Serialize;

/// Table 1 sizes at `--scale 1`. Snappy: the decompressed output (the compressed input
/// comes out near half of it, Table 1's 910 KB).
const SNAPPY_OUT_BYTES: f64 = 1.9 * MIB;
/// JPGDecoder: the decoded RGB888 output (the JPEG input is a few hundred KB).
const JPEG_RGB_BYTES: f64 = 6.3 * MIB;
/// AES: plaintext read and ciphertext written.
const AES_BYTES: f64 = 64.0 * KIB;
/// Grep: text read per task.
const GREP_BYTES: f64 = 2.0 * MIB;
/// KNN: query samples read per task.
const KNN_BYTES: f64 = MIB;
/// BFS: serialised graph read per task.
const BFS_BYTES: f64 = MIB;
/// Fileserver: whole-file write and read, plus the append of each task (1040 KB written).
const FILESERVER_BYTES: f64 = MIB;
const FILESERVER_APPEND_BYTES: f64 = 16.0 * KIB;
/// Webserver: size of each file read, reads per task, and the log append of each task.
const WEBSERVER_FILE_BYTES: f64 = 256.0 * KIB;
/// Whole-file reads of one webserver task.
pub const WEBSERVER_READS: usize = 10;
const WEBSERVER_LOG_BYTES: f64 = 16.0 * KIB;

const KIB: f64 = 1024.0;
const MIB: f64 = 1024.0 * KIB;

/// Input files of each application, shared by its clients (client `c` starts at file
/// `c % INPUTS` and goes round them).
pub const INPUTS: usize = 4;
/// JPEG quality of the generated images.
const JPEG_QUALITY: u8 = 85;
/// Points in the k-d tree KNN searches, and bytes per query sample (three coordinates
/// and a payload of features the search does not use).
const KNN_TREE_POINTS: usize = 50_000;
const KNN_SAMPLE_BYTES: usize = 64;
/// Average out-degree of the BFS graph.
const BFS_DEGREE: usize = 8;
/// One line in this many of the grep text matches the pattern.
const GREP_MATCH_EVERY: u64 = 50;
/// What grep looks for; the generated words never match it by chance.
const GREP_PATTERN: &str = r"\b(?:error|failure) [0-9]{3}: [a-z]+\b";

/// One of the applications.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum App {
    /// Decompress Snappy files, write the output.
    Snappy,
    /// Decode JPEG images to RGB888, write them.
    Jpeg,
    /// Encrypt files with AES-128-CTR, write the ciphertext.
    Aes,
    /// Count the lines of text files that match a regular expression.
    Grep,
    /// Nearest-neighbour queries from sample files against an in-memory k-d tree.
    Knn,
    /// Load a serialised graph, build it, breadth-first search from vertex 0.
    Bfs,
    /// Filebench fileserver: create, write, append, read, delete, stat.
    Fileserver,
    /// Filebench webserver: ten whole-file reads, then an append to one shared log.
    Webserver,
    /// All eight.
    All,
}

impl App {
    /// The eight applications in Table 1's order.
    pub const EVERY: [App; 8] = [
        App::Snappy,
        App::Jpeg,
        App::Aes,
        App::Grep,
        App::Knn,
        App::Bfs,
        App::Fileserver,
        App::Webserver,
    ];

    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            App::Snappy => "snappy",
            App::Jpeg => "jpeg",
            App::Aes => "aes",
            App::Grep => "grep",
            App::Knn => "knn",
            App::Bfs => "bfs",
            App::Fileserver => "fileserver",
            App::Webserver => "webserver",
            App::All => "all",
        }
    }
}

/// One input file and what processing it must give.
pub struct Input {
    /// The file's content.
    pub data: Vec<u8>,
    /// Checksum of the output (snappy, jpeg, aes, fileserver's read-back), or the
    /// result itself (grep's match count, knn's and bfs's result checksums).
    pub expect: u64,
}

/// An application's generated data.
pub struct Dataset {
    /// The application the data is for.
    pub app: App,
    /// Its input files, [`INPUTS`] of them.
    pub inputs: Vec<Input>,
    /// Bytes appended by fileserver (to each file) and webserver (to the log).
    pub append: Vec<u8>,
    knn_tree: Option<Arc<KdTree<f32, 3>>>,
    grep: Option<Regex>,
}

/// What a client keeps of its own to process inputs: its clone of grep's regex. A
/// clone has a pool of search caches of its own, and a pool serves the first thread
/// that searches with it from a cache it keeps for it alone and every other thread
/// through a lock. One regex shared by every client gave that fast path to whichever
/// client, and so whichever mode, searched first (measured: grep's task took 2.0 ms in
/// the mode run first and 2.5 ms in the next, whichever the order).
pub struct Scratch {
    grep: Option<Regex>,
}

/// What processing one input gave.
pub enum Output {
    /// Bytes to write to the client's output file.
    Bytes(Vec<u8>),
    /// A result that is only checked.
    Value(u64),
}

/// The unit interval from the generator's top 24 bits.
fn unit(rng: &mut Pcg64Mcg) -> f32 {
    (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32
}

/// The checksum outputs are compared by.
pub fn checksum(data: &[u8]) -> u64 {
    u64::from(crc32c::crc32c(data))
}

fn scaled(bytes: f64, scale: f64) -> usize {
    ((bytes * scale) as usize).max(64)
}

/// Syllables the generated words are made of; none spells a grep match.
const SYLLABLES: [&str; 16] = [
    "ka", "lo", "mi", "nu", "pe", "ra", "so", "ti", "va", "ze", "bo", "du", "gi", "ho", "ju", "qy",
];

/// Lines of pseudo-words, `len` bytes, every `match_every`-th line (if any) a match of
/// [`GREP_PATTERN`]; returns the text and the number of matching lines.
fn text(rng: &mut Pcg64Mcg, len: usize, match_every: Option<u64>) -> (Vec<u8>, u64) {
    let mut out = Vec::with_capacity(len + 128);
    let (mut line, mut matches) = (0u64, 0u64);
    while out.len() < len {
        if match_every.is_some_and(|m| line % m == m - 1) {
            let kind = if rng.random_range(0..2) == 0 {
                "error"
            } else {
                "failure"
            };
            out.extend_from_slice(format!("{kind} {:03}: ", rng.random_range(0..1000)).as_bytes());
            matches += 1;
        }
        for w in 0..4 + rng.random_range(0..8) {
            if w > 0 {
                out.push(b' ');
            }
            for _ in 0..1 + rng.random_range(0..4) {
                out.extend_from_slice(SYLLABLES[rng.random_range(0..16) as usize].as_bytes());
            }
        }
        out.push(b'\n');
        line += 1;
    }
    // Cut at the last whole line that fits, and recount what was cut.
    let cut = out[..len]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    out.truncate(cut);
    if let Some(re) = match_every.map(|_| grep_regex()) {
        matches = count_matching_lines(&re, &out);
    }
    (out, matches)
}

fn grep_regex() -> Regex {
    Regex::new(GREP_PATTERN).expect("the grep pattern is a valid regex")
}

/// Lines of `text` in which `re` matches, as grep counts them.
fn count_matching_lines(re: &Regex, text: &[u8]) -> u64 {
    text.split(|&b| b == b'\n')
        .filter(|line| re.is_match(line))
        .count() as u64
}

/// A synthetic photograph: smooth gradients, a few shapes and mild noise, so that JPEG
/// compresses it about as much as a real one.
fn image(rng: &mut Pcg64Mcg, w: usize, h: usize) -> Vec<u8> {
    let mut px = Vec::with_capacity(w * h * 3);
    let (cx, cy) = (
        rng.random_range(0..w as u64) as f32,
        rng.random_range(0..h as u64) as f32,
    );
    for y in 0..h {
        for x in 0..w {
            let (fx, fy) = (x as f32 / w as f32, y as f32 / h as f32);
            let d = ((x as f32 - cx).powi(2) + (y as f32 - cy).powi(2)).sqrt() / w as f32;
            let ring = ((d * 40.0).sin() * 0.5 + 0.5) * 90.0;
            let noise = rng.random_range(0..24) as f32;
            px.push((fx * 160.0 + ring * 0.5 + noise) as u8);
            px.push((fy * 140.0 + ring * 0.3 + noise) as u8);
            px.push(((1.0 - fx) * 120.0 + ring + noise) as u8);
        }
    }
    px
}

fn aes_cipher(index: usize) -> ctr::Ctr128BE<aes::Aes128> {
    let mut key = [0u8; 16];
    let mut iv = [0u8; 16];
    let mut rng = Pcg64Mcg::seed_from_u64(0xAE5 ^ index as u64);
    key.iter_mut().for_each(|b| *b = rng.next_u64() as u8);
    iv.iter_mut().for_each(|b| *b = rng.next_u64() as u8);
    ctr::Ctr128BE::<aes::Aes128>::new(&key.into(), &iv.into())
}

/// A random graph of `bytes` serialised as `n, m` then `m` edges `(u, v)`, all u32 LE.
fn graph(rng: &mut Pcg64Mcg, bytes: usize) -> Vec<u8> {
    let m = (bytes.saturating_sub(8) / 8).max(1);
    let n = (m / BFS_DEGREE).max(2);
    let mut out = Vec::with_capacity(8 + m * 8);
    out.extend_from_slice(&(n as u32).to_le_bytes());
    out.extend_from_slice(&(m as u32).to_le_bytes());
    for _ in 0..m {
        out.extend_from_slice(&(rng.random_range(0..n as u64) as u32).to_le_bytes());
        out.extend_from_slice(&(rng.random_range(0..n as u64) as u32).to_le_bytes());
    }
    out
}

fn u32_at(b: &[u8], i: usize) -> anyhow::Result<u32> {
    let s = b
        .get(i..i + 4)
        .ok_or_else(|| anyhow::anyhow!("serialised graph truncated at byte {i}"))?;
    Ok(u32::from_le_bytes(s.try_into()?))
}

/// Builds the graph in compressed-sparse-row form (undirected) and runs BFS from
/// vertex 0; the result is the number of vertices reached and the sum of their depths.
fn bfs(data: &[u8]) -> anyhow::Result<u64> {
    let (n, m) = (u32_at(data, 0)? as usize, u32_at(data, 4)? as usize);
    let mut edges = Vec::with_capacity(m);
    let mut degree = vec![0u32; n + 1];
    for e in 0..m {
        let (u, v) = (u32_at(data, 8 + e * 8)?, u32_at(data, 12 + e * 8)?);
        anyhow::ensure!((u as usize) < n && (v as usize) < n, "edge out of range");
        degree[u as usize] += 1;
        degree[v as usize] += 1;
        edges.push((u, v));
    }
    let mut start = vec![0u32; n + 1];
    for i in 0..n {
        start[i + 1] = start[i] + degree[i];
    }
    let mut fill = start.clone();
    let mut adj = vec![0u32; start[n] as usize];
    for (u, v) in edges {
        adj[fill[u as usize] as usize] = v;
        fill[u as usize] += 1;
        adj[fill[v as usize] as usize] = u;
        fill[v as usize] += 1;
    }
    let mut depth = vec![u32::MAX; n];
    let mut queue = std::collections::VecDeque::from([0u32]);
    depth[0] = 0;
    let (mut reached, mut sum) = (0u64, 0u64);
    while let Some(u) = queue.pop_front() {
        reached += 1;
        sum += u64::from(depth[u as usize]);
        for &v in &adj[start[u as usize] as usize..start[u as usize + 1] as usize] {
            if depth[v as usize] == u32::MAX {
                depth[v as usize] = depth[u as usize] + 1;
                queue.push_back(v);
            }
        }
    }
    Ok(reached << 32 | (sum & 0xFFFF_FFFF))
}

/// Query samples for KNN: each [`KNN_SAMPLE_BYTES`] long, three f32 coordinates first.
fn knn_samples(rng: &mut Pcg64Mcg, bytes: usize) -> Vec<u8> {
    let n = (bytes / KNN_SAMPLE_BYTES).max(1);
    let mut out = Vec::with_capacity(n * KNN_SAMPLE_BYTES);
    for _ in 0..n {
        for _ in 0..3 {
            out.extend_from_slice(&unit(rng).to_le_bytes());
        }
        for _ in 12..KNN_SAMPLE_BYTES {
            out.push(rng.next_u64() as u8);
        }
    }
    out
}

/// Searches the tree for each sample's nearest point; the result sums their indices.
fn knn(tree: &KdTree<f32, 3>, data: &[u8]) -> u64 {
    data.chunks_exact(KNN_SAMPLE_BYTES)
        .map(|s| {
            let c = |i: usize| f32::from_le_bytes([s[i], s[i + 1], s[i + 2], s[i + 3]]);
            tree.nearest_one::<SquaredEuclidean>(&[c(0), c(4), c(8)])
                .item
        })
        .fold(0u64, u64::wrapping_add)
}

/// A JPEG input: an image of about `JPEG_RGB_BYTES × scale` pixels, encoded; the
/// expected result is the checksum of its decoding.
fn jpeg_input(rng: &mut Pcg64Mcg, scale: f64) -> anyhow::Result<Input> {
    let side = ((JPEG_RGB_BYTES * scale / 3.0).sqrt() as usize).clamp(16, 8192);
    let px = image(rng, side, side);
    let mut data = Vec::new();
    jpeg_encoder::Encoder::new(&mut data, JPEG_QUALITY).encode(
        &px,
        side as u16,
        side as u16,
        jpeg_encoder::ColorType::Rgb,
    )?;
    let decoded = jpeg_decoder::Decoder::new(&data[..]).decode()?;
    anyhow::ensure!(decoded.len() == px.len(), "JPEG decoded to the wrong size");
    Ok(Input {
        expect: checksum(&decoded),
        data,
    })
}

impl Dataset {
    /// Generates the application's inputs at `scale` times Table 1's sizes and works
    /// out what processing each must give.
    pub fn generate(app: App, scale: f64) -> anyhow::Result<Dataset> {
        let mut rng = Pcg64Mcg::seed_from_u64(0xEA51_0000 ^ app as u64);
        let mut set = Dataset {
            app,
            inputs: Vec::new(),
            append: Vec::new(),
            knn_tree: None,
            grep: None,
        };
        if app == App::Knn {
            let mut tree = KdTree::<f32, 3>::new();
            for i in 0..KNN_TREE_POINTS {
                tree.add(&[unit(&mut rng), unit(&mut rng), unit(&mut rng)], i as u64);
            }
            set.knn_tree = Some(Arc::new(tree));
        }
        if app == App::Grep {
            set.grep = Some(grep_regex());
        }
        set.append = match app {
            App::Fileserver => text(&mut rng, scaled(FILESERVER_APPEND_BYTES, scale), None).0,
            App::Webserver => text(&mut rng, scaled(WEBSERVER_LOG_BYTES, scale), None).0,
            _ => Vec::new(),
        };
        for index in 0..INPUTS {
            let input = set.input(&mut rng, index, scale)?;
            set.inputs.push(input);
        }
        Ok(set)
    }

    /// Input `index` of the application, generated from `rng`.
    fn input(&self, rng: &mut Pcg64Mcg, index: usize, scale: f64) -> anyhow::Result<Input> {
        Ok(match self.app {
            App::Snappy => {
                let (plain, _) = text(rng, scaled(SNAPPY_OUT_BYTES, scale), None);
                let data = snap::raw::Encoder::new().compress_vec(&plain)?;
                Input {
                    data,
                    expect: checksum(&plain),
                }
            }
            App::Jpeg => jpeg_input(rng, scale)?,
            App::Aes => {
                let data: Vec<u8> = (0..scaled(AES_BYTES, scale))
                    .map(|_| rng.next_u64() as u8)
                    .collect();
                let mut cipher = data.clone();
                aes_cipher(index).apply_keystream(&mut cipher);
                Input {
                    expect: checksum(&cipher),
                    data,
                }
            }
            App::Grep => {
                let (data, matches) = text(rng, scaled(GREP_BYTES, scale), Some(GREP_MATCH_EVERY));
                anyhow::ensure!(matches > 0, "grep input without a matching line");
                Input {
                    data,
                    expect: matches,
                }
            }
            App::Knn => {
                let data = knn_samples(rng, scaled(KNN_BYTES, scale));
                let tree = self.knn_tree.as_ref().expect("tree built above");
                Input {
                    expect: knn(tree, &data),
                    data,
                }
            }
            App::Bfs => {
                let data = graph(rng, scaled(BFS_BYTES, scale));
                Input {
                    expect: bfs(&data)?,
                    data,
                }
            }
            App::Fileserver | App::Webserver => self.file_input(rng, scale),
            App::All => anyhow::bail!("`all` is not one application"),
        })
    }

    /// An input of fileserver or webserver: bytes to store and read back whole (with
    /// the append, for fileserver).
    fn file_input(&self, rng: &mut Pcg64Mcg, scale: f64) -> Input {
        let bytes = if self.app == App::Fileserver {
            FILESERVER_BYTES
        } else {
            WEBSERVER_FILE_BYTES
        };
        let data: Vec<u8> = (0..scaled(bytes, scale))
            .map(|_| rng.next_u64() as u8)
            .collect();
        let mut whole = data.clone();
        if self.app == App::Fileserver {
            whole.extend_from_slice(&self.append);
        }
        Input {
            expect: checksum(&whole),
            data,
        }
    }

    /// A client's own [`Scratch`], made before it starts.
    pub fn scratch(&self) -> Scratch {
        Scratch {
            grep: self.grep.clone(),
        }
    }

    /// The computation of snappy, jpeg, aes, grep, knn and bfs on input `index`, whose
    /// content was read into `data`, with a client's `scratch`; checks the result
    /// against the expected one.
    pub fn process(&self, scratch: &Scratch, index: usize, data: &[u8]) -> anyhow::Result<Output> {
        let expect = self.inputs[index].expect;
        let out = match self.app {
            App::Snappy => Output::Bytes(snap::raw::Decoder::new().decompress_vec(data)?),
            App::Jpeg => Output::Bytes(jpeg_decoder::Decoder::new(data).decode()?),
            App::Aes => {
                let mut buf = data.to_vec();
                aes_cipher(index).apply_keystream(&mut buf);
                Output::Bytes(buf)
            }
            App::Grep => Output::Value(count_matching_lines(
                scratch.grep.as_ref().expect("grep regex compiled"),
                data,
            )),
            App::Knn => Output::Value(knn(self.knn_tree.as_ref().expect("knn tree built"), data)),
            App::Bfs => Output::Value(bfs(data)?),
            App::Fileserver | App::Webserver | App::All => {
                anyhow::bail!("{} has no computation step", self.app.name())
            }
        };
        let got = match &out {
            Output::Bytes(b) => checksum(b),
            Output::Value(v) => *v,
        };
        anyhow::ensure!(
            got == expect,
            "{} gave a wrong result for input {index}: {got:#x}, expected {expect:#x}",
            self.app.name()
        );
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_application_verifies_its_own_inputs() {
        for app in App::EVERY {
            let set = Dataset::generate(app, 0.02).unwrap();
            if matches!(app, App::Fileserver | App::Webserver) {
                continue;
            }
            let scratch = set.scratch();
            for (i, input) in set.inputs.iter().enumerate() {
                set.process(&scratch, i, &input.data).unwrap();
            }
        }
    }

    #[test]
    fn a_corrupted_input_fails_verification() {
        let set = Dataset::generate(App::Aes, 0.02).unwrap();
        let mut data = set.inputs[0].data.clone();
        data[0] ^= 1;
        assert!(set.process(&set.scratch(), 0, &data).is_err());
    }

    #[test]
    fn grep_text_has_the_planted_matches() {
        let mut rng = Pcg64Mcg::seed_from_u64(1);
        let (text, matches) = text(&mut rng, 100_000, Some(GREP_MATCH_EVERY));
        let lines = text.iter().filter(|&&b| b == b'\n').count() as u64;
        assert_eq!(matches, lines / GREP_MATCH_EVERY);
    }
}
