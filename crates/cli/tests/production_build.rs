//! The production build carries no test hook: with default features, nothing `easyio`
//! links turns on a crate's `testing` feature (fault injection, engine test hooks, the
//! DSA device model). Cargo unifies features across a build, so a single normal
//! dependency that asked for `testing` would put every hook into the binary; tests ask
//! for it through dev-dependencies only, which a production build does not resolve.
//! Built without its default `bench` feature, `easyio` links no benchmark code.

use std::process::Command;

/// The feature that compiles the test hooks in.
const TESTING: &str = "testing";

#[test]
fn the_default_build_of_easyio_enables_no_testing_feature() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    // Normal and build edges only: the dependency graph of `cargo build --release -p
    // easyio-cli`, each package with the features that build resolves for it.
    let out = Command::new(cargo)
        .args(["tree", "--locked", "--manifest-path", manifest])
        .args(["-p", "easyio-cli", "-e", "normal,build", "--prefix", "none"])
        .args(["-f", "{p}|{f}"])
        .output()
        .expect("running cargo tree");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let packages: Vec<(&str, Vec<&str>)> = stdout
        .lines()
        .filter_map(|l| l.split_once('|'))
        .map(|(p, f)| {
            (
                p,
                f.split(',').map(|f| f.trim_end_matches(" (*)")).collect(),
            )
        })
        .collect();
    for name in ["easyio-cli", "engine", "mover", "fs", "crash"] {
        assert!(
            packages
                .iter()
                .any(|(p, _)| p.starts_with(&format!("{name} v"))),
            "{name} is missing from the graph of easyio-cli:\n{stdout}"
        );
    }
    let mut leaks: Vec<&str> = packages
        .iter()
        .filter(|(_, features)| features.contains(&TESTING))
        .map(|(p, _)| *p)
        .collect();
    leaks.sort_unstable();
    leaks.dedup();
    assert!(
        leaks.is_empty(),
        "the production build of easyio enables `{TESTING}` (test hooks) in: {leaks:?}; \
         enable it from [dev-dependencies] only"
    );
}

/// What only the benchmarks link: the crate and the applications' libraries (JPEG, AES,
/// regex, k-d tree, plots).
const BENCHMARK_ONLY: [&str; 7] = [
    "bench",
    "jpeg-decoder",
    "jpeg-encoder",
    "aes",
    "regex",
    "kiddo",
    "plotters",
];

/// The names of the packages `easyio` links, built with `features` (normal edges).
fn linked(features: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let out = Command::new(cargo)
        .args(["tree", "--locked", "--manifest-path", manifest])
        .args(["-p", "easyio-cli", "-e", "normal", "--prefix", "none"])
        .args(features)
        .output()
        .expect("running cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let names = stdout.lines().filter_map(|l| l.split_whitespace().next());
    names.map(String::from).collect()
}

#[test]
fn easyio_without_the_bench_feature_links_no_benchmark_library() {
    let everyday = linked(&["--no-default-features"]);
    assert!(everyday.iter().any(|p| p == "easyio-fuse"), "{everyday:?}");
    let leaks: Vec<&str> = BENCHMARK_ONLY
        .into_iter()
        .filter(|b| everyday.iter().any(|p| p == b))
        .collect();
    assert!(
        leaks.is_empty(),
        "easyio built with --no-default-features links {leaks:?}"
    );
    // The default build has them all: the names above are the ones cargo uses.
    let full = linked(&[]);
    for b in BENCHMARK_ONLY {
        assert!(full.iter().any(|p| p == b), "{b} is not in {full:?}");
    }
}
