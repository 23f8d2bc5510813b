//! `easyio put` killed at random points, on an image in a directory of a disk file
//! system (not tmpfs): every put that reported success is there, byte for byte, after
//! the next command reopened (and recovered) the image, and the image passes fsck.
//!
//! On such a backing the region lives in the page cache and only the file system's
//! fences (each an `fdatasync`) get it to the disk; a kill cannot lose the page cache,
//! so the test also checks what a power loss would: right after every successful put,
//! the kernel holds no dirty or under-write-back page of the image (`cachestat`), i.e.
//! everything the put made durable is on the disk, not only in memory.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::easyio;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

/// Puts attempted; each is killed after a random delay unless it finished first.
const ROUNDS: usize = 24;
const IMAGE_SIZE: &str = "64M";

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn fs_type(path: &Path) -> i64 {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: statfs fills the struct on success, and it is read only then.
    unsafe {
        assert_eq!(libc::statfs(c.as_ptr(), st.as_mut_ptr()), 0);
        st.assume_init().f_type
    }
}

fn ok(args: &[&std::ffi::OsStr]) -> Vec<u8> {
    let out = easyio().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "easyio {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn killed_puts_on_a_disk_image_keep_every_acknowledged_put() {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let dir = Dir(PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("easyio-durable-put-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let kind = fs_type(&dir.0);
    if kind == TMPFS_MAGIC {
        testkit::skip(format_args!(
            "{} is on tmpfs; this test needs a disk file system",
            dir.0.display()
        ));
        return;
    }
    let image = dir.0.join("image");
    let img = image.as_os_str();
    ok(&[
        "mkfs".as_ref(),
        "--image".as_ref(),
        img,
        "--size".as_ref(),
        IMAGE_SIZE.as_ref(),
    ]);

    let seed = std::process::id() as u64;
    let mut rng = Pcg64Mcg::seed_from_u64(seed);
    // Sources of a few sizes: one chunk, several, a partial last chunk.
    let sizes = [1_000usize, 300_000, 1 << 20, (2 << 20) + 4321];
    let sources: Vec<(PathBuf, Vec<u8>)> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let data: Vec<u8> = (0..n).map(|_| rng.random()).collect();
            let p = dir.0.join(format!("src{i}"));
            std::fs::write(&p, &data).unwrap();
            (p, data)
        })
        .collect();

    // How long an unkilled put of the largest source takes here: kills land across it.
    let start = Instant::now();
    ok(&[
        "put".as_ref(),
        "--image".as_ref(),
        img,
        sources[3].0.as_os_str(),
        "/warm".as_ref(),
    ]);
    let span = start.elapsed().max(Duration::from_millis(5));

    let mut acked: Vec<(String, usize)> = vec![("/warm".into(), 3)];
    let mut killed = 0;
    let mut clean_checks = 0;
    for round in 0..ROUNDS {
        let which = rng.random_range(0..sources.len());
        let dest = format!("/f{round}");
        let mut child = easyio()
            .args(["put".as_ref(), "--image".as_ref(), img])
            .arg(&sources[which].0)
            .arg(&dest)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let delay = span.mul_f64(rng.random_range(0.0..1.3));
        std::thread::sleep(delay);
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        if out.status.success() {
            acked.push((dest, which));
            if let Some(n) = testkit::unwritten_pages(&image) {
                assert_eq!(
                    n, 0,
                    "after a put reported success, {n} page(s) of the image were only in \
                     the page cache"
                );
                clean_checks += 1;
            }
        } else {
            killed += 1;
        }
        // Every acknowledged put so far, read back through a fresh open (which
        // recovers after a kill).
        if round % 6 == 5 || round == ROUNDS - 1 {
            for (path, src) in &acked {
                let got = ok(&["cat".as_ref(), "--image".as_ref(), img, path.as_ref()]);
                assert!(
                    got == sources[*src].1,
                    "{path}: {} bytes read back, {} put (seed {seed})",
                    got.len(),
                    sources[*src].1.len()
                );
            }
            let fsck = easyio()
                .args(["fsck".as_ref(), "--image".as_ref(), img])
                .output()
                .unwrap();
            assert!(
                fsck.status.success(),
                "fsck after round {round}: {}{}",
                String::from_utf8_lossy(&fsck.stdout),
                String::from_utf8_lossy(&fsck.stderr)
            );
        }
    }
    eprintln!(
        "image on a disk file system (statfs type {kind:#x}) at {}: {} put(s) acknowledged, \
         {killed} killed; {clean_checks} acknowledgement(s) checked to leave no page \
         unwritten (seed {seed})",
        dir.0.display(),
        acked.len(),
    );
    assert!(killed > 0, "no put was killed: the delays missed every put");
    assert!(acked.len() > 1, "no put finished before its kill");
}
