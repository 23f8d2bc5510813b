//! Fuzzing without a fuzzer, for stable CI: the checked-in corpus of both cargo-fuzz
//! targets replayed, every field of the valid images set to every kind of value, and a
//! bounded number of seeded multi-field corruptions — all through mount, read-back and
//! fsck, none of which may panic.

use crash::fuzz::{
    corrupt_field, encode_patches, mount_image, sample_image, seeded_corruptions, targets,
    CORRUPTION_BYTES,
};

/// Seeded corruptions per run (the fuzzer explores further).
const SEEDED_CORRUPTIONS: usize = 2000;
const SEED: u64 = 0x00C0_FFEE;
/// Value kinds `corrupt` knows (zero, all ones, ±1..3, a flipped bit, a block
/// offset, a word offset, raw).
const VALUE_KINDS: u8 = 8;

use testkit::{fuzz_corpus as corpus, fuzz_seeds as seeds};

#[test]
fn the_corpus_replays_without_panics() {
    let images = seeds("mount_image");
    assert!(
        images.len() >= 3,
        "mount_image corpus has {} files",
        images.len()
    );
    for (_, input) in &images {
        mount_image(input);
    }
    let corruptions = seeds("corrupt_field");
    assert!(!corruptions.is_empty());
    for (_, input) in &corruptions {
        corrupt_field(input);
    }
}

#[test]
fn every_field_of_the_valid_images_survives_every_kind_of_value() {
    for (t, target) in targets().iter().enumerate() {
        for field in 0..target.fields.len() {
            for kind in 0..VALUE_KINDS {
                // Checksum fixed (the value reaches the code that interprets it) and,
                // for one kind, left stale.
                for fix in [0u8, 1].into_iter().take(if kind == 0 { 2 } else { 1 }) {
                    let mut input = vec![t as u8];
                    input.extend_from_slice(&(field as u16).to_le_bytes());
                    input.push(kind);
                    input.extend_from_slice(&0x1234_5678_9ABC_DEF1u64.to_le_bytes());
                    input.push(fix);
                    assert_eq!(input.len(), CORRUPTION_BYTES);
                    corrupt_field(&input);
                }
            }
        }
    }
}

#[test]
fn seeded_multi_field_corruptions_survive() {
    for (i, one) in seeded_corruptions(SEED, SEEDED_CORRUPTIONS).enumerate() {
        // Two or three corruptions of one image now and then.
        let mut input = one;
        if i % 3 == 0 {
            input.extend(seeded_corruptions(SEED ^ i as u64, 2).flat_map(|c| c[1..].to_vec()));
        }
        corrupt_field(&input);
    }
}

/// Regression: a symbolic link whose log gives it a 4 GiB size (checksum valid) made
/// readlink allocate 4 GiB and abort. Every write entry's size field is set so.
#[test]
fn a_huge_size_in_any_write_entry_is_survived() {
    /// Kind byte of a write entry and the offset of its file-size field.
    const WRITE_KIND: u8 = 1;
    const SIZE_OFF: u64 = 32;
    const RAW_VALUE_KIND: u8 = 7;
    let mut hit = 0;
    for (t, target) in targets().iter().enumerate() {
        for (i, f) in target.fields.iter().enumerate() {
            let Some(cs) = f.csum else { continue };
            if f.off != cs.start + SIZE_OFF || target.image[cs.start as usize] != WRITE_KIND {
                continue;
            }
            hit += 1;
            let mut input = vec![t as u8];
            input.extend_from_slice(&(i as u16).to_le_bytes());
            input.push(RAW_VALUE_KIND);
            input.extend_from_slice(&(1u64 << 32).to_le_bytes());
            input.push(0);
            corrupt_field(&input);
        }
    }
    assert!(hit >= 4, "{hit} write entries found");
}

/// Regenerates the seed files: `cargo test -p crash --test fuzz_corpus -- --ignored`.
#[test]
#[ignore]
fn write_seed_corpus() {
    let images = [
        ("seed-clean", sample_image(true)),
        ("seed-crashed", sample_image(false)),
    ];
    let dir = corpus("mount_image");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, img) in &images {
        std::fs::write(dir.join(name), encode_patches(img)).unwrap();
    }
    // A formatted, empty file system.
    let empty = {
        let pm = pmem::MemPmem::new(crash::fuzz::FUZZ_REGION_BYTES);
        fs::FileSystem::format(&pm, &fs::FormatOptions::default()).unwrap();
        pm.into_image()
    };
    std::fs::write(dir.join("seed-empty"), encode_patches(&empty)).unwrap();
    let dir = corpus("corrupt_field");
    std::fs::create_dir_all(&dir).unwrap();
    for (i, input) in seeded_corruptions(SEED, 8).enumerate() {
        std::fs::write(dir.join(format!("seed-{i}")), input).unwrap();
    }
}
