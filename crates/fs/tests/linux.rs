//! Corner cases of open(2) and write(2) run twice: on the host's kernel (a directory
//! in the temporary file system) and on easyio. Both must give the same errno and
//! leave the same names and contents behind.

mod common;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use common::*;
use fs::{FileKind, FileSystem, OpenFlags};

/// One step of a scenario; paths are relative to the scenario's root.
#[derive(Clone, Copy, Debug)]
enum Step {
    Mkdir(&'static str),
    Symlink(&'static str, &'static str),
    /// Open with flags (libc bits), write the bytes, write nothing, read one byte at the
    /// position, close. The result is what the open gave, then what the read saw.
    OpenWriteRead(&'static str, i32, &'static [u8]),
    /// Rename; the result is the errno, or an empty read.
    Rename(&'static str, &'static str),
}

/// What a step gave: an errno, or the bytes its read saw.
type Outcome = Result<Vec<u8>, i32>;

/// The root's tree: name → file contents, symlink target or "dir".
type Tree = BTreeMap<String, String>;

fn host_tree(root: &Path, rel: &str, out: &mut Tree) {
    for e in std::fs::read_dir(root.join(rel.trim_start_matches('/'))).unwrap() {
        let e = e.unwrap();
        let name = format!("{rel}/{}", e.file_name().to_string_lossy());
        let ty = e.file_type().unwrap();
        if ty.is_symlink() {
            let t = std::fs::read_link(e.path()).unwrap();
            out.insert(name, format!("-> {}", t.display()));
        } else if ty.is_dir() {
            out.insert(name.clone(), "dir".into());
            host_tree(root, &name, out);
        } else {
            let data = std::fs::read(e.path()).unwrap();
            out.insert(name, String::from_utf8_lossy(&data).into_owned());
        }
    }
}

fn easyio_tree(fs: &FileSystem, rel: &str, out: &mut Tree) {
    let dir = if rel.is_empty() { "/" } else { rel };
    for e in fs.readdir(dir).unwrap() {
        if e.name == "." || e.name == ".." {
            continue;
        }
        let name = format!("{rel}/{}", e.name);
        match e.kind.expect("every inode reads") {
            FileKind::Symlink => {
                let t = fs.readlink(&name).unwrap();
                out.insert(name, format!("-> {t}"));
            }
            FileKind::Dir => {
                out.insert(name.clone(), "dir".into());
                easyio_tree(fs, &name, out);
            }
            _ => {
                let data = read_file(fs, &name);
                out.insert(name, String::from_utf8_lossy(&data).into_owned());
            }
        }
    }
}

fn on_host(root: &Path, steps: &[Step]) -> (Vec<Outcome>, Tree) {
    let path = |p: &str| -> PathBuf { root.join(p.trim_start_matches('/')) };
    let mut outcomes = Vec::new();
    for &s in steps {
        match s {
            Step::Mkdir(p) => std::fs::create_dir(path(p)).unwrap(),
            Step::Symlink(t, p) => std::os::unix::fs::symlink(t, path(p)).unwrap(),
            Step::Rename(a, b) => {
                // `Path::join` drops a trailing slash: keep it, it changes the answer.
                let slashed = |p: &str| {
                    let mut s = path(p).into_os_string();
                    if p.ends_with('/') {
                        s.push("/");
                    }
                    s
                };
                let r = std::fs::rename(slashed(a), slashed(b));
                outcomes.push(r.map(|_| Vec::new()).map_err(|e| e.raw_os_error().unwrap()));
            }
            Step::OpenWriteRead(p, flags, data) => {
                let mut c = path(p).as_os_str().as_bytes().to_vec();
                if p.ends_with('/') {
                    c.push(b'/');
                }
                let c = CString::new(c).unwrap();
                // SAFETY: a NUL-terminated path; the descriptor is closed below.
                let fd = unsafe { libc::open(c.as_ptr(), flags, 0o644) };
                if fd < 0 {
                    outcomes.push(Err(std::io::Error::last_os_error().raw_os_error().unwrap()));
                    continue;
                }
                let mut byte = [0u8; 1];
                // SAFETY: `fd` is open; the buffers outlive the calls.
                let n = unsafe {
                    assert_eq!(
                        libc::write(fd, data.as_ptr().cast(), data.len()),
                        data.len() as isize
                    );
                    assert_eq!(libc::write(fd, data.as_ptr().cast(), 0), 0);
                    let n = libc::read(fd, byte.as_mut_ptr().cast(), 1);
                    libc::close(fd);
                    n
                };
                outcomes.push(Ok(byte[..n.max(0) as usize].to_vec()));
            }
        }
    }
    let mut tree = Tree::new();
    host_tree(root, "", &mut tree);
    (outcomes, tree)
}

fn on_easyio(steps: &[Step]) -> (Vec<Outcome>, Tree) {
    let pm = fresh(8 * MIB);
    let fs = mount(&pm);
    let mut outcomes = Vec::new();
    for &s in steps {
        match s {
            Step::Mkdir(p) => fs.mkdir(p, 0o755).unwrap(),
            Step::Symlink(t, p) => fs.symlink(t, p).unwrap(),
            Step::Rename(a, b) => {
                outcomes.push(fs.rename(a, b).map(|_| Vec::new()).map_err(|e| e.errno()))
            }
            Step::OpenWriteRead(p, flags, data) => {
                let fd = match fs.open(p, OpenFlags(flags), 0o644) {
                    Ok(fd) => fd,
                    Err(e) => {
                        outcomes.push(Err(e.errno()));
                        continue;
                    }
                };
                assert_eq!(fs.write(fd, data).unwrap(), data.len());
                assert_eq!(fs.write(fd, &[]).unwrap(), 0);
                let mut byte = [0u8; 1];
                let n = fs.read(fd, &mut byte).unwrap();
                fs.close(fd).unwrap();
                outcomes.push(Ok(byte[..n].to_vec()));
            }
        }
    }
    let mut tree = Tree::new();
    easyio_tree(&fs, "", &mut tree);
    (outcomes, tree)
}

fn agree(name: &str, steps: &[Step]) {
    let root = std::env::temp_dir().join(format!("easyio-linux-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir(&root).unwrap();
    let host = on_host(&root, steps);
    std::fs::remove_dir_all(&root).unwrap();
    let ours = on_easyio(steps);
    assert_eq!(
        ours, host,
        "{name}: easyio (left) and the kernel (right) differ"
    );
}

const RW_CREAT: i32 = libc::O_RDWR | libc::O_CREAT;

#[test]
fn open_creat_through_symbolic_links_agrees_with_the_kernel() {
    use Step::*;
    agree(
        "dangling",
        &[Symlink("t", "/l"), OpenWriteRead("/l", RW_CREAT, b"x")],
    );
    agree(
        "into-dir",
        &[
            Mkdir("/d"),
            Symlink("d/t", "/l"),
            OpenWriteRead("/l", RW_CREAT, b"x"),
        ],
    );
    agree(
        "relative-to-link",
        &[
            Mkdir("/d"),
            Symlink("../t", "/d/l"),
            OpenWriteRead("/d/l", RW_CREAT, b"x"),
        ],
    );
    agree(
        "chain",
        &[
            Symlink("l2", "/l1"),
            Symlink("t", "/l2"),
            OpenWriteRead("/l1", RW_CREAT, b"x"),
        ],
    );
    agree(
        "excl",
        &[
            Symlink("t", "/l"),
            OpenWriteRead("/l", RW_CREAT | libc::O_EXCL, b"x"),
        ],
    );
    agree(
        "nofollow",
        &[
            Symlink("t", "/l"),
            OpenWriteRead("/l", RW_CREAT | libc::O_NOFOLLOW, b"x"),
        ],
    );
    agree(
        "missing-dir",
        &[Symlink("no/t", "/l"), OpenWriteRead("/l", RW_CREAT, b"x")],
    );
    agree(
        "slash-target",
        &[Symlink("t/", "/l"), OpenWriteRead("/l", RW_CREAT, b"x")],
    );
    agree(
        "loop",
        &[Symlink("l", "/l"), OpenWriteRead("/l", RW_CREAT, b"x")],
    );
    agree("slash-new", &[OpenWriteRead("/t/", RW_CREAT, b"x")]);
    agree(
        "slash-dangling",
        &[Symlink("t", "/l"), OpenWriteRead("/l/", RW_CREAT, b"x")],
    );
    agree(
        "slash-file",
        &[
            OpenWriteRead("/f", RW_CREAT, b"x"),
            OpenWriteRead("/f/", RW_CREAT, b"y"),
        ],
    );
    agree(
        "slash-dir-excl",
        &[
            Mkdir("/d"),
            OpenWriteRead("/d/", RW_CREAT | libc::O_EXCL, b"x"),
        ],
    );
    agree(
        "existing-target",
        &[
            OpenWriteRead("/t", RW_CREAT, b"ab"),
            Symlink("t", "/l"),
            OpenWriteRead("/l", RW_CREAT, b"c"),
        ],
    );
}

#[test]
fn a_write_of_nothing_leaves_the_position_alone_even_with_o_append() {
    use Step::*;
    agree(
        "append-empty",
        &[
            OpenWriteRead("/f", RW_CREAT, b"abc"),
            OpenWriteRead("/f", libc::O_RDWR | libc::O_APPEND, b""),
        ],
    );
}

#[test]
fn rename_onto_an_ancestor_agrees_with_the_kernel() {
    use Step::*;
    let file = OpenWriteRead("/d/a", RW_CREAT, b"x");
    agree("file-to-parent", &[Mkdir("/d"), file, Rename("/d/a", "/d")]);
    agree(
        "file-to-parent-slash",
        &[Mkdir("/d"), file, Rename("/d/a", "/d/")],
    );
    agree("file-slash", &[Mkdir("/d"), file, Rename("/d/a/", "/d/b")]);
    agree(
        "dir-to-parent-slash",
        &[Mkdir("/d"), Mkdir("/d/s"), Rename("/d/s", "/d/")],
    );
    agree(
        "dir-to-grandparent",
        &[
            Mkdir("/d"),
            Mkdir("/d/s"),
            Mkdir("/d/s/t"),
            Rename("/d/s/t", "/d"),
        ],
    );
}
