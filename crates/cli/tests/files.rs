//! The file commands end to end on a real image in /dev/shm: mkfs, put, get, cat, ls,
//! mv, rm, mkdir, stat, info, fsck, and the errors a user sees.

use std::path::PathBuf;
use std::process::{Command, Output};

struct Image(PathBuf);

impl Image {
    fn new(tag: &str) -> Image {
        let p = PathBuf::from(format!("/dev/shm/easyio-cli-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        Image(p)
    }
    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_easyio"))
            .args(args)
            .env("EASYIO_IMAGE", &self.0)
            .output()
            .unwrap()
    }
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn file_commands_round_trip() {
    let img = Image::new("rt");
    img.ok(&["mkfs", "--size", "32M"]);
    let local = std::env::temp_dir().join(format!("easyio-cli-in-{}", std::process::id()));
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&local, &data).unwrap();
    img.ok(&["mkdir", "-p", "/x/y"]);
    img.ok(&["put", local.to_str().unwrap(), "/x/y/data"]);
    let back = local.with_extension("out");
    img.ok(&["get", "/x/y/data", back.to_str().unwrap()]);
    assert_eq!(std::fs::read(&back).unwrap(), data);
    img.ok(&["mv", "/x/y/data", "/x/moved"]);
    assert_eq!(img.ok(&["ls", "/x"]), "moved\ny\n");
    let st: serde_json::Value =
        serde_json::from_str(&img.ok(&["stat", "/x/moved", "--json"])).unwrap();
    assert_eq!(st["size"], 300_000);
    assert_eq!(st["kind"], "file");
    let cat = img.run(&["cat", "/x/moved"]);
    assert_eq!(cat.stdout, data);
    img.ok(&["rm", "-r", "/x"]);
    assert_eq!(img.ok(&["ls", "/"]), "");
    let fsck: serde_json::Value = serde_json::from_str(&img.ok(&["fsck", "--json"])).unwrap();
    assert_eq!(fsck["problems"].as_array().unwrap().len(), 0);
    assert_eq!(fsck["clean_unmount"], true);
    let info: serde_json::Value = serde_json::from_str(&img.ok(&["info", "--json"])).unwrap();
    assert_eq!(info["usage"]["inodes_used"], 1);
    // What the kernel says of the CPU: both flags, or the keys cannot be used.
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap();
    let flag = |f: &str| {
        cpuinfo
            .lines()
            .any(|l| l.starts_with("flags") && l.split_whitespace().any(|w| w == f))
    };
    assert_eq!(info["protection"]["pku"], flag("pku") && flag("ospke"));
    assert_eq!(info["protection"]["used"], false);
    // Asked for, the region is protected exactly where the CPU has keys.
    let asked = Command::new(env!("CARGO_BIN_EXE_easyio"))
        .args(["info", "--json"])
        .env("EASYIO_IMAGE", &img.0)
        .env(pmem::pkey::ENV, "1")
        .output()
        .unwrap();
    assert!(asked.status.success());
    let asked: serde_json::Value = serde_json::from_slice(&asked.stdout).unwrap();
    assert_eq!(asked["protection"]["used"], flag("pku") && flag("ospke"));
    assert_eq!(
        asked["protection"]["key"].is_u64(),
        flag("pku") && flag("ospke")
    );
    let _ = std::fs::remove_file(&local);
    let _ = std::fs::remove_file(&back);
}

#[test]
fn errors_are_clear_and_leave_the_image_intact() {
    let img = Image::new("err");
    let out = img.run(&["ls", "/"]);
    assert_eq!(out.status.code(), Some(libc::ENOENT));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such file"));
    img.ok(&["mkfs", "--size", "16M"]);
    let again = img.run(&["mkfs", "--size", "16M"]);
    assert_eq!(again.status.code(), Some(libc::EEXIST));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    let tiny = img.run(&["mkfs", "--size", "1", "--image", "/dev/shm/easyio-never"]);
    assert_eq!(tiny.status.code(), Some(64));
    assert!(
        String::from_utf8_lossy(&tiny.stderr).contains("the smallest image is "),
        "{}",
        String::from_utf8_lossy(&tiny.stderr)
    );
    assert!(!std::path::Path::new("/dev/shm/easyio-never").exists());
    let missing = img.run(&["cat", "/nope"]);
    assert_eq!(missing.status.code(), Some(libc::ENOENT));
    img.ok(&["mkdir", "/d"]);
    let rm = img.run(&["rm", "/d"]);
    assert!(String::from_utf8_lossy(&rm.stderr).contains("is a directory"));
    let bad = img.run(&["mkfs", "--size", "12Q", "--image", "/dev/shm/easyio-never"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("suffix"));
    // Corrupt the superblock and its replica: mount and fsck refuse with a clear
    // message and a non-zero status, and nothing panics.
    let mut bytes = std::fs::read(&img.0).unwrap();
    bytes[4096] ^= 0xFF;
    bytes[8192] ^= 0xFF;
    std::fs::write(&img.0, &bytes).unwrap();
    let ls = img.run(&["ls", "/"]);
    assert_eq!(ls.status.code(), Some(libc::EUCLEAN));
    assert!(String::from_utf8_lossy(&ls.stderr).contains("superblock"));
    let fsck = img.run(&["fsck"]);
    assert_eq!(fsck.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&fsck.stdout).contains("PROBLEM"));
}

/// Whether `s` is `YYYY-MM-DD HH:MM:SS.NNNNNNNNN +HHMM`, as stat(1) prints a time.
fn is_stat_time(s: &str) -> bool {
    let pattern = "dddd-dd-dd dd:dd:dd.ddddddddd sdddd";
    s.len() == pattern.len()
        && s.bytes().zip(pattern.bytes()).all(|(c, p)| match p {
            b'd' => c.is_ascii_digit(),
            b's' => c == b'+' || c == b'-',
            _ => c == p,
        })
}

#[test]
fn stat_and_ls_long_show_times_and_owners_as_coreutils_does() {
    let img = Image::new("times");
    img.ok(&["mkfs", "--size", "16M"]);
    img.ok(&["mkdir", "/d"]);
    let run_utc = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_easyio"))
            .args(args)
            .env("EASYIO_IMAGE", &img.0)
            .env("TZ", "UTC")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let text = run_utc(&["stat", "/d"]);
    let st: serde_json::Value = serde_json::from_str(&img.ok(&["stat", "/d", "--json"])).unwrap();
    // --json keeps the raw nanoseconds.
    let mtime_ns = st["mtime_ns"].as_i64().unwrap();
    for label in ["access: ", "modify: ", "change: "] {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(label))
            .unwrap_or_else(|| panic!("no {label} line:\n{text}"));
        assert!(is_stat_time(line), "{line:?}");
        assert!(line.ends_with(" +0000"), "{line:?}");
    }
    let modify = text
        .lines()
        .find_map(|l| l.strip_prefix("modify: "))
        .unwrap();
    let date = Command::new("date")
        .args(["-u", "-d", &format!("@{}", mtime_ns / 1_000_000_000)])
        .arg("+%Y-%m-%d %H:%M:%S")
        .output()
        .unwrap();
    let want = format!(
        "{}.{:09} +0000",
        String::from_utf8(date.stdout).unwrap().trim(),
        mtime_ns % 1_000_000_000
    );
    assert_eq!(modify, want);
    // ls -l: owner and group (by name), size, and the time as `ls -l` shows it.
    let long = run_utc(&["ls", "-l", "/"]);
    let date = Command::new("date")
        .args(["-u", "-d", &format!("@{}", mtime_ns / 1_000_000_000)])
        .arg("+%b %e %H:%M")
        .output()
        .unwrap();
    let when = String::from_utf8(date.stdout)
        .unwrap()
        .trim_end()
        .to_string();
    let f: Vec<&str> = long.split_whitespace().collect();
    let user = name_of("passwd", st["uid"].as_u64().unwrap());
    let group = name_of("group", st["gid"].as_u64().unwrap());
    assert_eq!(f[2..5], [user.as_str(), group.as_str(), "0"], "{long}");
    assert!(long.ends_with(&format!(" {when} d\n")), "{long:?} {when:?}");
}

/// What ls(1) shows for `id` in the database `db` (passwd or group): the name
/// `getent` finds, else the number.
fn name_of(db: &str, id: u64) -> String {
    let out = Command::new("getent")
        .args([db, &id.to_string()])
        .output()
        .expect("running getent");
    match out.status.code() {
        Some(0) => {
            let line = String::from_utf8(out.stdout).unwrap();
            line.split(':').next().unwrap().to_string()
        }
        // 2: no such entry.
        Some(2) => id.to_string(),
        _ => panic!("getent {db} {id}: {out:?}"),
    }
}

#[test]
fn ls_long_names_owners_and_groups_from_the_system_databases_as_ls_does() {
    let img = Image::new("owners");
    img.ok(&["mkfs", "--size", "16M"]);
    img.ok(&["mkdir", "/root-owned"]);
    img.ok(&["mkdir", "/nobody-known"]);
    // Owners the databases have (0 is root's on every system) and ones they lack.
    let unknown: (u32, u32) = (4_000_123, 4_000_321);
    assert_eq!(name_of("passwd", unknown.0.into()), unknown.0.to_string());
    assert_eq!(name_of("group", unknown.1.into()), unknown.1.to_string());
    let region = pmem::Region::open(&img.0).unwrap();
    let (fs, _) =
        fs::FileSystem::mount(std::sync::Arc::new(region), fs::MountOptions::default()).unwrap();
    for (path, (uid, gid)) in [("/root-owned", (0, 0)), ("/nobody-known", unknown)] {
        let what = fs::SetAttr {
            uid: Some(uid),
            gid: Some(gid),
            ..fs::SetAttr::default()
        };
        fs.setattr(fs.stat(path).unwrap().ino, &what).unwrap();
    }
    fs.unmount().unwrap();
    let long = img.ok(&["ls", "-l", "/"]);
    let columns = |name: &str| -> Vec<String> {
        let line = long
            .lines()
            .find(|l| l.ends_with(&format!(" {name}")))
            .unwrap_or_else(|| panic!("no {name} in:\n{long}"));
        line.split_whitespace()
            .skip(2)
            .take(2)
            .map(String::from)
            .collect()
    };
    let root = [name_of("passwd", 0), name_of("group", 0)];
    assert_eq!(root[0], "root");
    assert_eq!(columns("root-owned"), root, "{long}");
    assert_eq!(
        columns("nobody-known"),
        [unknown.0.to_string(), unknown.1.to_string()],
        "{long}"
    );
}

#[test]
fn the_image_may_be_given_before_the_command() {
    let img = Image::new("global");
    let image = img.0.to_str().unwrap();
    let other = format!("{image}-not-there");
    let easyio = |args: &[&str], env: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_easyio"));
        cmd.args(args).env_remove("EASYIO_IMAGE");
        if let Some(e) = env {
            cmd.env("EASYIO_IMAGE", e);
        }
        let out = cmd.output().unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let made = easyio(&["--image", image, "mkfs", "--size", "16M"], None);
    assert_eq!(made.0, Some(0), "{made:?}");
    assert!(
        made.1.starts_with(&format!("formatted {image}")),
        "{made:?}"
    );
    assert_eq!(easyio(&["--image", image, "mkdir", "/d"], None).0, Some(0));
    let listed = (Some(0), "d\n".to_string(), String::new());
    assert_eq!(easyio(&["--image", image, "ls", "/"], None), listed);
    assert_eq!(easyio(&["ls", "--image", image, "/"], None), listed);
    assert_eq!(easyio(&[&format!("--image={image}"), "ls"], None), listed);
    // The command line wins over the environment; two ways that name different
    // images are a usage error that names both (the same image twice is fine).
    assert_eq!(easyio(&["--image", image, "ls"], Some(&other)), listed);
    let twice = easyio(&["--image", &other, "ls", "--image", image], None);
    assert_eq!(twice.0, Some(64), "{twice:?}");
    assert!(twice.2.contains("two images given"), "{twice:?}");
    assert!(
        twice.2.contains(&other) && twice.2.contains(image),
        "{twice:?}"
    );
    assert_eq!(
        easyio(&["--image", image, "ls", "--image", image], None),
        listed
    );
    // mkfs, fsck and info also take the image as their argument, alone or beside an
    // --image that agrees.
    let checked = easyio(&["fsck", image], Some(&other));
    assert_eq!(checked.0, Some(0), "{checked:?}");
    assert_eq!(easyio(&["--image", image, "fsck"], None).1, checked.1);
    assert_eq!(easyio(&["--image", image, "info", image], None).0, Some(0));
    let differ = easyio(&["--image", image, "fsck", &other], None);
    assert_eq!(differ.0, Some(64), "{differ:?}");
    assert!(differ.2.contains("the IMAGE argument"), "{differ:?}");
    // Without an image, and before a command that opens none: usage errors.
    let none = easyio(&["ls", "/"], None);
    assert_eq!(none.0, Some(64), "{none:?}");
    assert!(none.2.contains("--image"), "{none:?}");
    let engines = easyio(&["--image", image, "engines"], None);
    assert_eq!(engines.0, Some(64), "{engines:?}");
    assert!(
        engines.2.contains("`engines` opens no image"),
        "{engines:?}"
    );
    // mount and serve take it either way too; two images are refused before any
    // mount is tried, and so is a mount with no directory.
    let mount = easyio(&["--image", image, "mount", &other, "/mnt"], None);
    assert_eq!(mount.0, Some(64), "{mount:?}");
    assert!(mount.2.contains("two images given"), "{mount:?}");
    let serve = easyio(&["serve", image, "--image", &other, "--socket", "/x"], None);
    assert_eq!(serve.0, Some(64), "{serve:?}");
    assert!(serve.2.contains("two images given"), "{serve:?}");
    let nodir = easyio(&["--image", image, "mount"], None);
    assert_eq!(nodir.0, Some(64), "{nodir:?}");
    assert!(nodir.2.contains("no directory to mount on"), "{nodir:?}");
    assert!(!std::path::Path::new(&other).exists());
}
