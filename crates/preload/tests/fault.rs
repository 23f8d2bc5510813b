//! Calls the shim cannot see fail; none reaches the host. `tests/c/fault.c` makes
//! system calls with the `syscall` instruction itself (as a static program or a
//! language runtime would) on a path of the mount, on descriptors of the mount,
//! and relative to a current directory inside the mount, from a host directory
//! that holds a file `victim`; then, through libc, writes, reads, `close`, `dup2`
//! onto and `fcntl` of every descriptor number from 3 to 1023 it did not open (the
//! shim's own among them). Every call must fail, the host directory must be
//! unchanged, and the image must still hold what the program wrote through the
//! shim and pass fsck. On an image served on demand, mounted in the process, and
//! through a server.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use common::{fsck_clean, host_file, read_image, World};

/// The host directory's names and contents.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let bytes = std::fs::read(e.path()).unwrap_or_default();
            (e.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    v.sort();
    v
}

/// How the program reaches the image.
enum Way<'a> {
    /// With `EASYIO_IMAGE` alone: a server started on demand.
    OnDemand,
    /// Mounted in the process alone (`EASYIO_PRIVATE=1`).
    Private,
    /// A client of this server.
    Server(&'a Path),
}

fn unseen_calls_fail(w: &World, way: Way<'_>) {
    let exe = common::build_c(w, "fault");
    let host = w.dir.join("host");
    std::fs::create_dir_all(&host).unwrap();
    host_file(&host, "victim", b"the host's\n");
    let before = snapshot(&host);
    let mut cmd = w.shim_cmd(exe.to_str().unwrap(), &["{R}", host.to_str().unwrap()]);
    cmd.current_dir(&host);
    match way {
        Way::OnDemand => {}
        Way::Private => {
            cmd.env("EASYIO_PRIVATE", "1");
        }
        Way::Server(s) => {
            cmd.env("EASYIO_SERVER", s);
        }
    }
    let stdout = common::ok(&mut cmd);
    let calls: Vec<&str> = stdout.lines().filter(|l| l.starts_with("raw ")).collect();
    assert!(calls.len() >= 20, "{stdout}");
    for line in &calls {
        let (_, result) = line.rsplit_once(": ").unwrap();
        assert!(
            result.starts_with('E'),
            "a call the shim does not see succeeded: {line}\n{stdout}"
        );
    }
    assert!(
        stdout.contains("stray descriptor calls that did not fail: 0"),
        "{stdout}"
    );
    assert!(
        stdout.contains("the mount's file by the shim: the image's"),
        "{stdout}"
    );
    assert_eq!(snapshot(&host), before, "the host directory changed");
}

#[test]
fn calls_the_shim_does_not_see_fail_on_an_image_served_on_demand() {
    let w = World::new("fault", 32);
    unseen_calls_fail(&w, Way::OnDemand);
    drop(common::open_when_free(&w.img));
    fsck_clean(&w.img);
    assert_eq!(read_image(&w.img, "/file"), b"the image's\n");
}

/// The same with the image mounted in the program's process: the region file and
/// the engine's descriptors are the shim's to keep.
#[test]
fn calls_the_shim_does_not_see_fail_in_a_private_mount() {
    let w = World::new("fault-private", 32);
    unseen_calls_fail(&w, Way::Private);
    fsck_clean(&w.img);
    assert_eq!(read_image(&w.img, "/file"), b"the image's\n");
}

#[test]
fn calls_the_shim_does_not_see_fail_through_a_server() {
    static STOP: AtomicBool = AtomicBool::new(false);
    let w = World::new("fault-served", 32);
    let served = common::serve(&w, || STOP.load(Ordering::SeqCst));
    unseen_calls_fail(&w, Way::Server(&served.socket));
    STOP.store(true, Ordering::SeqCst);
    served.end(&w);
    assert_eq!(read_image(&w.img, "/file"), b"the image's\n");
}
