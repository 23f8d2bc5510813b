//! Unmodified coreutils and Python under the shim, compared with the same commands
//! on a tmpfs directory: outputs and the resulting trees must be equal, and the image
//! clean after every program has exited.

mod common;

use common::{fsck_clean, host_file, need, read_image, World};

/// A small source tree on the host to copy in: text, binary, nested directories.
fn sample(w: &World) -> String {
    let src = w.dir.join("sample");
    std::fs::create_dir_all(src.join("sub/deeper")).unwrap();
    host_file(&src, "a.txt", b"alpha\nbeta\ngamma needle\n");
    host_file(&src, "sub/b.txt", b"needle in sub\n");
    let big: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    host_file(&src, "sub/deeper/big.bin", &big);
    host_file(&src, "empty", b"");
    src.to_str().unwrap().to_owned()
}

#[test]
fn coreutils_give_the_results_they_give_on_tmpfs() {
    need("python3", "python3");
    let w = World::new("core", 64);
    let src = sample(&w);
    w.same("mkdir", &["-p", "{R}/x/y/z"]);
    w.same("mkdir", &["-p", "{R}/x/y/z"]);
    w.same("cp", &[&format!("{src}/a.txt"), "{R}/x/a.txt"]);
    w.same("cp", &["-r", &src, "{R}/tree"]);
    w.same("cat", &["{R}/x/a.txt", "{R}/tree/sub/b.txt"]);
    w.same("cat", &["{R}/missing"]);
    w.same("sha256sum", &["{R}/tree/sub/deeper/big.bin", "{R}/x/a.txt"]);
    w.same("cp", &["{R}/tree/sub/deeper/big.bin", "{R}/x/big.copy"]);
    w.same("cmp", &["{R}/tree/sub/deeper/big.bin", "{R}/x/big.copy"]);
    w.same("mv", &["{R}/x/big.copy", "{R}/x/y/moved"]);
    w.same("mv", &["{R}/tree/sub", "{R}/x/sub-moved"]);
    // Times and directory sizes differ by nature (easyio directories report 0):
    // both are left out of the comparison.
    w.same(
        "ls",
        &[
            "-ln",
            "--time-style=+",
            "{R}/x/a.txt",
            "{R}/x/y/moved",
            "{R}/tree/empty",
        ],
    );
    w.same("ls", &["-1aR", "{R}"]);
    w.same("ls", &["-d", "{R}/x/y/z/../.."]);
    w.same("rm", &["-r", "{R}/x/y"]);
    w.same("rm", &["{R}/x"]);
    w.same("ls", &["-1R", "{R}"]);
    w.same_tree();
    fsck_clean(&w.img);
    assert_eq!(
        read_image(&w.img, "/tree/a.txt"),
        b"alpha\nbeta\ngamma needle\n"
    );
}

#[test]
fn python_file_calls_match_tmpfs() {
    need("python3", "python3");
    let w = World::new("py", 64);
    let script = r#"
import os, sys
root = sys.argv[1]
os.makedirs(os.path.join(root, 'p/q'), exist_ok=True)
with open(os.path.join(root, 'p/t.txt'), 'w') as f:
    f.write('line one\nline two\n' * 100)
with open(os.path.join(root, 'p/b.bin'), 'wb') as f:
    f.write(bytes(range(256)) * 64)
with open(os.path.join(root, 'p/b.bin'), 'r+b') as f:
    f.seek(1000)
    f.write(b'XYZ')
    f.seek(-10, 2)
    print(f.tell(), f.read())
    f.seek(998)
    print(f.read(7))
with open(os.path.join(root, 'p/t.txt')) as f:
    print(f.readline().strip(), len(f.read()))
with open(os.path.join(root, 'p/t.txt'), 'a') as f:
    f.write('appended\n')
print(open(os.path.join(root, 'p/t.txt')).read()[-20:])
os.rename(os.path.join(root, 'p/t.txt'), os.path.join(root, 'p/q/u.txt'))
print(sorted(os.listdir(os.path.join(root, 'p'))))
for d, dirs, files in os.walk(root):
    print(os.path.relpath(d, root), sorted(dirs), sorted(files))
st = os.stat(os.path.join(root, 'p/b.bin'))
print(st.st_size, oct(st.st_mode))
print(os.path.exists(os.path.join(root, 'nope')), os.path.isdir(os.path.join(root, 'p/q')))
os.unlink(os.path.join(root, 'p/b.bin'))
try:
    os.unlink(os.path.join(root, 'p/b.bin'))
except FileNotFoundError as e:
    print('gone', e.errno)
try:
    os.rmdir(os.path.join(root, 'p'))
except OSError as e:
    print('not empty', e.errno)
os.chdir(os.path.join(root, 'p/q'))
print(os.path.relpath(os.getcwd(), root), os.listdir('.'), open('u.txt').read(8))
os.symlink('q/u.txt', os.path.join(root, 'p/link'))
print(os.readlink(os.path.join(root, 'p/link')), open(os.path.join(root, 'p/link')).read(4))
print(os.path.relpath(os.path.realpath(os.path.join(root, 'p/link')), root))
"#;
    w.same("python3", &["-c", script, "{R}"]);
    w.same_tree();
    fsck_clean(&w.img);
    assert!(read_image(&w.img, "/p/q/u.txt").ends_with(b"appended\n"));
}

#[test]
fn threads_of_one_process_share_the_mount_in_async_mode() {
    need("python3", "python3");
    let w = World::new("threads", 64);
    let script = r#"
import os, sys, threading
root = sys.argv[1]
def work(i):
    for j in range(40):
        p = os.path.join(root, 't%d_%d' % (i, j))
        with open(p, 'wb') as f:
            f.write(bytes([i]) * (4096 * (j % 5) + 100))
        with open(p, 'rb') as f:
            assert f.read() == bytes([i]) * (4096 * (j % 5) + 100)
        if j % 3 == 0:
            os.unlink(p)
threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(len(os.listdir(root)))
"#;
    let mut a = w.shim_cmd("python3", &["-c", script, "{R}"]);
    a.env("EASYIO_MODE", "async");
    let out = common::ok(&mut a);
    assert_eq!(
        out,
        common::ok(&mut w.ref_cmd("python3", &["-c", script, "{R}"]))
    );
    w.same_tree();
    fsck_clean(&w.img);
}
