//! Fuzzing without a fuzzer, for stable CI: the checked-in corpus of the
//! `serve_requests` cargo-fuzz target replayed, then each seed with every byte flipped
//! in turn and cut at every length, through the server's decoder and dispatch on a
//! fresh file system (`easyio_serve::fuzz::requests`), which must neither panic nor
//! leave the image inconsistent.

use std::path::PathBuf;

use easyio_serve::fuzz::requests;

#[test]
fn the_corpus_and_its_mutations_replay_cleanly() {
    let seeds = testkit::fuzz_seeds("serve_requests");
    assert!(seeds.len() >= 3, "the corpus has {} files", seeds.len());
    for (name, input) in &seeds {
        requests(input);
        // The small seeds byte by byte; the large one at a stride.
        let stride = (input.len() / 200).max(1);
        for at in (1..input.len()).step_by(stride) {
            let mut flipped = input.clone();
            flipped[at] ^= 0x5a;
            requests(&flipped);
            requests(&input[..at]);
        }
        eprintln!("{name}: replayed with its mutations");
    }
}

/// The seed of lookups (a client that resolves paths itself, `Request::Lookup`) is
/// what `encode` makes of its requests; `EASYIO_BLESS=1` writes it.
#[test]
fn the_lookup_seed_is_its_requests() {
    use easyio_serve::wire::Request;
    let path = |p: &str| p.to_string();
    let input = easyio_serve::fuzz::encode(
        // Clients read directly (they may look up), as an unprivileged user.
        0b011,
        &[
            Request::Mkdir {
                path: path("/d"),
                mode: 0o700,
            },
            Request::Open {
                path: path("/d/f"),
                flags: libc::O_CREAT | libc::O_WRONLY,
                mode: 0o644,
            },
            Request::Lookup {
                dir: 1,
                name: path("d"),
            },
            Request::Lookup {
                dir: 2,
                name: path("f"),
            },
            Request::Lookup {
                dir: 2,
                name: path("."),
            },
            Request::Lookup {
                dir: 3,
                name: path("x"),
            },
            Request::Lookup {
                dir: u64::MAX,
                name: path(""),
            },
        ],
    );
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus/serve_requests/seed-lookup");
    if std::env::var_os("EASYIO_BLESS").is_some() {
        std::fs::write(&file, &input).unwrap();
    }
    assert_eq!(
        std::fs::read(&file).ok(),
        Some(input),
        "{} is stale: run with EASYIO_BLESS=1",
        file.display()
    );
}
