//! The server through the library, on a real mount: basic calls of this process
//! through the kernel, then a clean unmount.

use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use easyio_fuse::{unmount, Mount, Options};
use fs::{FileSystem, FormatOptions, MountOptions};
use pmem::{Pmem, Region};

#[test]
fn basic_calls_through_a_mount() {
    if !std::path::Path::new("/dev/fuse").exists() {
        eprintln!("skipped: no /dev/fuse");
        return;
    }
    let region = Region::create_temp(64 << 20).unwrap();
    FileSystem::format(&region, &FormatOptions::default()).unwrap();
    let pm: Arc<dyn Pmem> = Arc::new(region);
    let (fs, _) = FileSystem::mount(pm, MountOptions::default()).unwrap();
    let fs = Arc::new(fs);
    let dir = std::env::temp_dir().join(format!("easyio-fuse-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let m = Mount::new(fs.clone(), &dir, &Options::default()).unwrap();
    let t = std::thread::spawn(move || m.run());
    let p = dir.join("a");
    std::fs::write(&p, b"hello world").unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"hello world");
    let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
    f.write_all(b"!").unwrap();
    drop(f);
    let mut f = std::fs::File::open(&p).unwrap();
    f.seek(SeekFrom::Start(6)).unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "world!");
    std::fs::create_dir(dir.join("d")).unwrap();
    std::fs::rename(&p, dir.join("d/b")).unwrap();
    let names: Vec<_> = std::fs::read_dir(dir.join("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec!["b"]);
    drop(f);
    let t0 = Instant::now();
    unmount(&dir, false).unwrap();
    t.join().unwrap().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(10));
    let fs = Arc::try_unwrap(fs)
        .ok()
        .expect("server dropped its reference");
    assert_eq!(fs.stat("/d/b").unwrap().size, 12);
    fs.unmount().unwrap();
    std::fs::remove_dir(&dir).unwrap();
}
