//! Larger unmodified programs under the shim, each compared with the same commands on
//! a tmpfs directory: `grep -r`, `find`, `du`, `tar c/x`, `dd conv=fsync`,
//! `sqlite3` building a 10 000-row database, and `gcc` compiling a C file that lives
//! in the mount (the driver lets the image go before it starts the compiler).

mod common;

use common::{fsck_clean, host_file, need, ok, read_image, World};

fn tree(w: &World) {
    let src = w.dir.join("src");
    std::fs::create_dir_all(src.join("d1/d2")).unwrap();
    std::fs::create_dir_all(src.join("e")).unwrap();
    for i in 0..20 {
        let text = format!(
            "file {i}\n{}\n",
            if i % 3 == 0 { "needle here" } else { "hay" }
        );
        host_file(&src, &format!("d1/f{i}.txt"), text.as_bytes());
    }
    host_file(&src, "d1/d2/deep.txt", b"needle deep\n");
    host_file(&src, "e/blob", &vec![7u8; 70_000]);
    w.same("cp", &["-r", src.to_str().unwrap(), "{R}/src"]);
}

#[test]
fn grep_find_du_and_tar_match_tmpfs() {
    for (program, package) in [
        ("grep", "grep"),
        ("find", "findutils"),
        ("tar", "tar"),
        ("diff", "diffutils"),
    ] {
        need(program, package);
    }
    let w = World::new("tools", 64);
    tree(&w);
    w.same_sorted("grep", &["-rn", "needle", "{R}/src"]);
    w.same_sorted("grep", &["-rlv", "needle", "{R}/src"]);
    w.same_sorted("find", &["{R}/src", "-name", "*.txt", "-size", "-1k"]);
    w.same_sorted("find", &["{R}", "-type", "d"]);
    // Directory sizes differ by nature (0 on easyio): sizes of files only.
    w.same_sorted("find", &["{R}/src", "-printf", "%P %y %m %n\\n"]);
    w.same_sorted("find", &["{R}/src", "-type", "f", "-printf", "%P %s\\n"]);
    w.same_sorted("du", &["-a", "--inodes", "{R}/src"]);
    w.same_sorted("du", &["-ab", "{R}/src/e/blob", "{R}/src/d1/f1.txt"]);
    let det = [
        "--sort=name",
        "--mtime=@0",
        "--owner=0",
        "--group=0",
        "--numeric-owner",
    ];
    let mut c = vec!["cf", "{R}/src.tar", "-C", "{R}", "src"];
    c.extend(det);
    w.same("tar", &c);
    w.same_sorted("tar", &["tf", "{R}/src.tar"]);
    w.same("mkdir", &["{R}/x"]);
    w.same("tar", &["xf", "{R}/src.tar", "-C", "{R}/x"]);
    w.same("diff", &["-r", "{R}/src", "{R}/x/src"]);
    w.same_tree();
    fsck_clean(&w.img);
}

#[test]
fn dd_with_fsync_writes_what_it_read() {
    let w = World::new("dd", 64);
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 31 % 251) as u8).collect();
    let src = host_file(&w.dir, "input", &data);
    let inp = format!("if={}", src.display());
    w.same(
        "dd",
        &[&inp, "of={R}/out", "bs=64k", "conv=fsync", "status=none"],
    );
    w.same(
        "dd",
        &[
            "if={R}/out",
            "of={R}/half",
            "bs=4096",
            "count=100",
            "skip=3",
            "conv=fsync,notrunc",
            "status=none",
        ],
    );
    w.same("sha256sum", &["{R}/out", "{R}/half"]);
    w.same_tree();
    fsck_clean(&w.img);
    assert_eq!(read_image(&w.img, "/out"), data);
}

#[test]
fn sqlite3_builds_ten_thousand_rows_and_passes_its_integrity_check() {
    need("sqlite3", "sqlite3");
    let w = World::new("sqlite", 64);
    let sql = "CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v REAL);
BEGIN;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<10000)
  INSERT INTO t SELECT x, 'name' || x, x*0.5 FROM c;
COMMIT;
CREATE INDEX tn ON t(name);
UPDATE t SET v = v + 1 WHERE id % 7 = 0;
DELETE FROM t WHERE id % 11 = 0;
SELECT count(*), sum(v), max(name) FROM t;
PRAGMA integrity_check;";
    let out = w.same("sqlite3", &["{R}/db.sqlite", sql]);
    assert!(out.ends_with("ok\n"), "{out}");
    let out = w.same(
        "sqlite3",
        &[
            "{R}/db.sqlite",
            "SELECT name FROM t WHERE id = 777; PRAGMA integrity_check;",
        ],
    );
    assert_eq!(out, "name777\nok\n");
    fsck_clean(&w.img);
}

#[test]
fn gcc_compiles_a_file_that_lives_in_the_mount() {
    need("gcc", "gcc");
    let w = World::new("gcc", 64);
    let c = host_file(
        &w.dir,
        "hello.c",
        b"#include <stdio.h>\n#include \"msg.h\"\nint main(void) { puts(MSG); return 0; }\n",
    );
    let h = host_file(
        &w.dir,
        "msg.h",
        b"#define MSG \"compiled from the mount\"\n",
    );
    w.same("cp", &[c.to_str().unwrap(), h.to_str().unwrap(), "{R}/"]);
    // The object file goes to the mount; the program to the host, to be run.
    w.same("gcc", &["-O1", "-c", "{R}/hello.c", "-o", "{R}/hello.o"]);
    let exe = w.dir.join("hello");
    w.ok("gcc", &["-O1", "{R}/hello.o", "-o", exe.to_str().unwrap()]);
    assert_eq!(
        ok(&mut std::process::Command::new(&exe)),
        "compiled from the mount\n"
    );
    w.same_tree();
    fsck_clean(&w.img);
}
