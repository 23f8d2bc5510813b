//! The libc entries the shim serves beside its first ones (`temp.rs`, `walk.rs`,
//! `variadic.rs` and `variadic.c`): `tests/c/entries.c`, built with `cc`, runs
//! `mkstemp` and its family, `glob`, `scandir`, `ftw`/`nftw`, `execl`/`execle`/
//! `execlp`, `dprintf`, raw `syscall`s and the `mknod` family under the mount and in
//! a tmpfs directory in the same shimmed process and compares every result, on an
//! image it mounts and through a server. Then the programs these entries were added
//! for: `sed -i` (a temporary file by `mkostemp`) and `git init` on the mount.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use common::{fsck_clean, host_file, need, ok, read_image, run, World};

#[test]
fn the_added_entries_answer_as_the_kernel_does() {
    let w = World::new("entries", 64);
    compare_entries(&w, None);
    fsck_clean(&w.img);
    check_image(&w);
}

/// The same by a client of a server (`EASYIO_SERVER`): the server is this test's
/// thread, the program another process; here `execl` also hands a descriptor and
/// the current directory over to the program it starts.
#[test]
fn the_added_entries_answer_as_the_kernel_does_through_a_server() {
    static STOP: AtomicBool = AtomicBool::new(false);
    let w = World::new("entries-served", 64);
    let served = common::serve(&w, || STOP.load(Ordering::SeqCst));
    compare_entries(&w, Some(&served.socket));
    STOP.store(true, Ordering::SeqCst);
    served.end(&w);
    check_image(&w);
}

/// What the program left in the image, read with the file system itself: the file
/// a raw `syscall(SYS_openat, AT_FDCWD, "/easyio/x", ...)` made and wrote, the
/// directory a relative raw `mkdirat` made from a current directory inside the
/// mount, and the files programs started by `execl`, `execle`, `execlp` wrote.
fn check_image(w: &World) {
    assert_eq!(read_image(&w.img, "/x"), b"RAW data via syscall");
    assert_eq!(read_image(&w.img, "/ex-le"), b"execle argc 5 [x] extra le");
    assert_eq!(
        read_image(&w.img, "/ex-l"),
        b"execl argc 7 [a b] [] [c] extra -"
    );
    assert_eq!(read_image(&w.img, "/ex-lp"), b"execlp argc 4 extra -");
}

/// Runs `entries.c` under the shim (joined to the server on `socket`, if given),
/// from a kernel directory holding a file `victim`: the relative raw `unlinkat`
/// the program makes from a current directory inside the mount must remove the
/// mount's `victim`, not this one, and nothing else may appear here.
fn compare_entries(w: &World, socket: Option<&Path>) {
    need("cc", "gcc");
    let exe = common::build_c(w, "entries");
    let host = w.dir.join("host");
    std::fs::create_dir_all(&host).unwrap();
    host_file(&host, "victim", b"the host's\n");
    let kernel = w.reference.to_str().unwrap().to_owned();
    let mut cmd = w.shim_cmd(
        exe.to_str().unwrap(),
        &["{R}", &kernel, host.to_str().unwrap()],
    );
    cmd.current_dir(&host);
    if let Some(s) = socket {
        cmd.env("EASYIO_SERVER", s);
    }
    let out = run(&mut cmd);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let compared: usize = stdout
        .trim()
        .strip_suffix(" calls compared: same")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(compared > 400, "{stdout}");
    let mut left: Vec<String> = std::fs::read_dir(&host)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["victim"], "the kernel's current directory changed");
    assert_eq!(std::fs::read(host.join("victim")).unwrap(), b"the host's\n");
}

/// `sed -i` makes its temporary file with `mkostemp` beside the file and renames it
/// over the file: the same result as on tmpfs.
#[test]
fn sed_in_place_edits_a_file_of_the_mount() {
    let w = World::new("sed", 32);
    std::fs::write(w.reference.join("notes"), "alpha\nbeta\ngamma\n").unwrap();
    w.ok(
        "cp",
        &[w.reference.join("notes").to_str().unwrap(), "{R}/notes"],
    );
    w.same("sed", &["-i", "s/beta/BETA/;$a delta", "{R}/notes"]);
    w.same("sed", &["-i.bak", "1d", "{R}/notes"]);
    w.same("cat", &["{R}/notes", "{R}/notes.bak"]);
    w.same_sorted("ls", &["-a", "{R}"]);
    assert_eq!(read_image(&w.img, "/notes"), b"BETA\ngamma\ndelta\n");
    fsck_clean(&w.img);
}

/// `git init`, `add`, `commit` and `log` in a repository of the mount: git makes
/// its temporary files with `mkstemp`.
#[test]
fn git_makes_a_repository_on_the_mount() {
    need("git", "git");
    let w = World::new("git", 64);
    let git = |args: &[&str]| {
        let mut c = w.shim_cmd("git", args);
        c.env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", &w.dir)
            .env("GIT_AUTHOR_NAME", "easyio")
            .env("GIT_AUTHOR_EMAIL", "easyio@example.org")
            .env("GIT_COMMITTER_NAME", "easyio")
            .env("GIT_COMMITTER_EMAIL", "easyio@example.org")
            .env("GIT_AUTHOR_DATE", "2024-01-01T00:00:00Z")
            .env("GIT_COMMITTER_DATE", "2024-01-01T00:00:00Z");
        ok(&mut c)
    };
    git(&["init", "-q", "-b", "main", "{R}/repo"]);
    w.ok("sh", &["-c", "echo hello > {R}/repo/a.txt"]);
    git(&["-C", "{R}/repo", "add", "a.txt"]);
    git(&["-C", "{R}/repo", "commit", "-q", "-m", "first"]);
    let log = git(&["-C", "{R}/repo", "log", "--format=%s %an"]);
    assert_eq!(log, "first easyio\n");
    let status = git(&["-C", "{R}/repo", "status", "--porcelain"]);
    assert_eq!(status, "");
    assert_eq!(read_image(&w.img, "/repo/a.txt"), b"hello\n");
    fsck_clean(&w.img);
}
