//! Buffers of `easyio_buffer_alloc` on a server's connection (staging buffers, which
//! the server maps too) handed to calls other than the connection's data calls: the
//! library copies them through raw pointers and never refers to them, so each call
//! answers as it does with plain memory; a path inside one is EINVAL.

use std::ffi::{c_void, CString};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use easyio::*;

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// A scratch directory in /dev/shm, removed on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn staging_buffers_given_to_other_calls_are_copied_and_paths_in_them_refused() {
    static STOP: AtomicBool = AtomicBool::new(false);
    let s = Scratch(PathBuf::from(format!(
        "/dev/shm/easyio-capi-staging-{}",
        std::process::id()
    )));
    let _ = std::fs::remove_dir_all(&s.0);
    std::fs::create_dir_all(&s.0).unwrap();
    let img = s.0.join("served.img");
    let region = pmem::Region::create(&img, 16 << 20).unwrap();
    fs::FileSystem::format(&region, &fs::FormatOptions::default()).unwrap();
    let (served, _) = fs::FileSystem::mount(Arc::new(region), fs::MountOptions::default()).unwrap();
    let socket = s.0.join("sock");
    let server = easyio_serve::Server::bind(Arc::new(served), &img, &socket, false, true).unwrap();
    let serving = std::thread::spawn(move || server.run(|| STOP.load(Ordering::SeqCst)));

    let remote = easyio_connect(c(socket.to_str().unwrap()).as_ptr());
    assert!(!remote.is_null());
    let here_img = s.0.join("here.img");
    let here_path = c(here_img.to_str().unwrap());
    assert_eq!(easyio_mkfs(here_path.as_ptr(), 16 << 20), 0);
    let here = easyio_mount(here_path.as_ptr(), std::ptr::null());
    assert!(!here.is_null());

    let b = easyio_buffer_alloc(remote, 8192).cast::<u8>();
    assert!(!b.is_null());
    let data: Vec<u8> = (0..100u8).collect();
    // SAFETY: the buffer has 8192 bytes; this thread alone uses it.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), b, data.len()) };

    // A path inside the buffer: EINVAL, on either handle.
    let name = b"f\0";
    // SAFETY: inside the buffer, as above.
    unsafe { std::ptr::copy_nonoverlapping(name.as_ptr(), b.wrapping_add(4096), name.len()) };
    for fs in [remote, here] {
        let fd = easyio_open(
            fs,
            b.wrapping_add(4096).cast(),
            libc::O_CREAT | libc::O_RDWR,
            0o644,
        );
        assert_eq!((fd, errno::errno().0), (-1, libc::EINVAL));
    }

    // The data calls of another handle (an image mounted here), and a stat, given
    // the buffer: through a private copy.
    let fd = easyio_open(here, c("f").as_ptr(), libc::O_CREAT | libc::O_RDWR, 0o644);
    assert!(fd >= 0);
    assert_eq!(easyio_pwrite(here, fd, b.cast(), 100, 0), 100);
    let back = b.wrapping_add(1000);
    assert_eq!(easyio_pread(here, fd, back.cast::<c_void>(), 100, 0), 100);
    let mut got = vec![0u8; 100];
    // SAFETY: inside the buffer, as above.
    unsafe { std::ptr::copy_nonoverlapping(back, got.as_mut_ptr(), 100) };
    assert_eq!(got, data);
    let st = b.wrapping_add(2048).cast::<libc::stat>();
    assert_eq!(easyio_fstat(here, fd, st), 0);
    // SAFETY: the stat just written there, read through a raw pointer.
    assert_eq!(unsafe { std::ptr::read_unaligned(st) }.st_size, 100);
    let id = easyio_submit_pread(here, fd, back.cast(), 50, 10);
    assert!(id >= 1);
    let mut done = easyio_completion::default();
    assert_eq!(easyio_wait(here, id as u64, &mut done), 0);
    assert_eq!(done.res, 50);
    // SAFETY: inside the buffer, as above.
    unsafe { std::ptr::copy_nonoverlapping(back, got.as_mut_ptr(), 50) };
    assert_eq!(got[..50], data[10..60]);
    assert_eq!(easyio_close(here, fd), 0);

    // The connection's own data calls take the buffer by its address.
    let fd = easyio_open(remote, c("g").as_ptr(), libc::O_CREAT | libc::O_RDWR, 0o644);
    assert!(fd >= 0);
    assert_eq!(easyio_pwrite(remote, fd, b.cast(), 100, 0), 100);
    assert_eq!(easyio_pread(remote, fd, back.cast(), 100, 0), 100);
    // SAFETY: inside the buffer, as above.
    unsafe { std::ptr::copy_nonoverlapping(back, got.as_mut_ptr(), 100) };
    assert_eq!(got, data);
    assert_eq!(easyio_close(remote, fd), 0);

    assert_eq!(easyio_buffer_free(remote, b.cast()), 0);
    assert_eq!(easyio_unmount(here), 0);
    assert_eq!(easyio_unmount(remote), 0);
    STOP.store(true, Ordering::SeqCst);
    let fs = serving.join().unwrap().unwrap();
    Arc::try_unwrap(fs).ok().unwrap().unmount().unwrap();
}
