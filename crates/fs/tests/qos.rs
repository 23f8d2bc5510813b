//! The file system with the channel manager and calibration profiles: a handle's class
//! picks its channels, and a mount with a profile uses the profile's thresholds.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use fs::{Class, FileSystem, Mode, MountOptions, MoverConfig, QosConfig};
use mover::profile::{Machine, Profile, Thresholds, PROFILE_VERSION};
use pmem::Pmem;

fn engine_bytes(fs: &FileSystem) -> Vec<u64> {
    let e = fs.engine().unwrap();
    (0..e.channels() as u16)
        .map(|c| e.stats(c).unwrap().bytes)
        .collect()
}

fn profile(cpu_max: usize, machine: Machine) -> Profile {
    Profile {
        version: PROFILE_VERSION,
        machine,
        engine: "software".into(),
        engine_bandwidth: 1 << 30,
        thresholds: Thresholds {
            cpu_max,
            dma_write_min: 2 * cpu_max,
            dma_read_min: 2 * cpu_max,
            dma_concurrency: 2,
        },
    }
}

fn temp_profile(p: &Profile, name: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("easyio-{}-{name}.toml", std::process::id()));
    p.save(&path).unwrap();
    path
}

#[test]
fn a_mount_with_a_profile_uses_its_thresholds() {
    let data = vec![5u8; 32 << 10];
    // Defaults: a 32 KiB write is above the 4 KiB offload threshold and goes to the
    // engine; with a profile whose threshold is 64 KiB it goes by CPU.
    let path = temp_profile(&profile(64 << 10, Machine::here()), "ok");
    for (opts, offloaded) in [
        (MountOptions::with_mode(Mode::Async), true),
        (
            MountOptions::with_mode(Mode::Async)
                .with_profile(&path)
                .unwrap(),
            false,
        ),
    ] {
        let pm = fresh(16 * MIB);
        let (fs, _) = FileSystem::mount(pm.clone(), opts).unwrap();
        let fd = fs.open("/f", rw_create(), 0o644).unwrap();
        let before: u64 = engine_bytes(&fs).iter().sum();
        fs.pwrite(fd, &data, 0).unwrap();
        let after: u64 = engine_bytes(&fs).iter().sum();
        assert_eq!(after > before, offloaded);
        let mut back = vec![0u8; data.len()];
        fs.pread(fd, &mut back, 0).unwrap();
        assert_eq!(back, data);
    }
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_profile_from_another_machine_is_refused() {
    let mut other = Machine::here();
    other.cpu = format!("not {}", other.cpu);
    let path = temp_profile(&profile(64 << 10, other), "other");
    let e = MountOptions::with_mode(Mode::Async)
        .with_profile(&path)
        .unwrap_err()
        .to_string();
    assert!(e.contains("another machine"), "{e}");
    let _ = std::fs::remove_file(path);
}

#[test]
fn handles_of_each_class_use_their_channels() {
    let pm: Arc<dyn Pmem> = fresh(32 * MIB);
    let opts = MountOptions {
        mover: MoverConfig {
            qos: Some(QosConfig::default()),
            ..MoverConfig::default()
        },
        ..MountOptions::with_mode(Mode::Async)
    };
    let (fs, _) = FileSystem::mount(pm, opts).unwrap();
    let q = QosConfig::default();
    let flags = rw_create();
    let l = fs
        .open_with_class(
            "/l",
            flags,
            0o644,
            Class::Latency {
                target: Duration::from_micros(100),
            },
        )
        .unwrap();
    let b = fs
        .open_with_class("/b", flags, 0o644, Class::Bandwidth)
        .unwrap();
    let data: Vec<u8> = (0..(1 << 20)).map(|i| (i % 253) as u8).collect();
    let before = engine_bytes(&fs);
    fs.pwrite(b, &data, 0).unwrap();
    let mid = engine_bytes(&fs);
    let b_bytes: u64 = (q.l_channels..q.channels())
        .map(|c| mid[c] - before[c])
        .sum();
    assert_eq!(b_bytes, data.len() as u64);
    fs.pwrite(l, &data[..256 << 10], 0).unwrap();
    let end = engine_bytes(&fs);
    let l_bytes: u64 = (0..q.l_channels).map(|c| end[c] - mid[c]).sum();
    assert_eq!(l_bytes, 256 << 10);
    let mut back = vec![0u8; data.len()];
    fs.pread(b, &mut back, 0).unwrap();
    assert_eq!(back, data);
}
