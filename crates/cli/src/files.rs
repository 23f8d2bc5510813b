//! File commands on an image: mkfs, fsck, info, ls, stat, put, get, cat, rm, mkdir, mv.
//!
//! Each command opens the region (held exclusively while it runs), mounts — recovering
//! if the last user crashed, and saying so on stderr —, does its work, and unmounts.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::Args;
use fs::{FileKind, FileSystem, FormatOptions, MountOptions, MountReport, OpenFlags};
use pmem::{Pmem, Region};
use serde::Serialize;

use crate::report;

/// Chunk size for copying files in and out.
const COPY_CHUNK: usize = 1 << 20;
/// Region size `mkfs` creates when none is given.
pub const DEFAULT_IMAGE_SIZE: &str = "1G";

/// The image to work on.
#[derive(Args, Clone)]
pub struct ImageArg {
    /// Region holding the file system (a file, e.g. in /dev/shm, or a devdax device).
    #[arg(long, env = "EASYIO_IMAGE")]
    pub image: PathBuf,
    /// Mount read-only: nothing is written to the image (a crash is recovered in memory
    /// only), a damaged file fails alone with EUCLEAN, and the image file itself may be
    /// read-only. (A mount falls back to this by itself, with a warning, when it finds
    /// damage it cannot repair.)
    #[arg(long)]
    pub read_only: bool,
}

#[derive(Args)]
pub struct MkfsArgs {
    #[command(flatten)]
    image: ImageArg,
    /// Size of a new region file (K, M, G suffixes; whole 4 KiB pages).
    #[arg(long, default_value = DEFAULT_IMAGE_SIZE)]
    size: String,
    /// Number of inodes (default: one per 16 KiB).
    #[arg(long)]
    inodes: Option<u64>,
    /// Reformat an existing region, destroying its contents.
    #[arg(long)]
    force: bool,
}

#[derive(Args)]
pub struct FsckArgs {
    #[command(flatten)]
    image: ImageArg,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct InfoArgs {
    #[command(flatten)]
    image: ImageArg,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct LsArgs {
    #[command(flatten)]
    image: ImageArg,
    /// Directory to list.
    #[arg(default_value = "/")]
    path: String,
    /// Long listing: kind, mode, links, size.
    #[arg(short, long)]
    long: bool,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct PathArgs {
    #[command(flatten)]
    image: ImageArg,
    path: String,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct PutArgs {
    #[command(flatten)]
    image: ImageArg,
    /// Local file to copy in ("-" for standard input).
    local: PathBuf,
    /// Destination path in the image.
    dest: String,
}

#[derive(Args)]
pub struct GetArgs {
    #[command(flatten)]
    image: ImageArg,
    /// Path in the image.
    src: String,
    /// Local file to write ("-" for standard output).
    local: PathBuf,
}

#[derive(Args)]
pub struct CatArgs {
    #[command(flatten)]
    image: ImageArg,
    path: String,
}

#[derive(Args)]
pub struct RmArgs {
    #[command(flatten)]
    image: ImageArg,
    path: String,
    /// Remove directories and their contents.
    #[arg(short, long)]
    recursive: bool,
}

#[derive(Args)]
pub struct MkdirArgs {
    #[command(flatten)]
    image: ImageArg,
    path: String,
    /// Create missing parents; no error if it exists.
    #[arg(short, long)]
    parents: bool,
}

#[derive(Args)]
pub struct MvArgs {
    #[command(flatten)]
    image: ImageArg,
    from: String,
    to: String,
}

/// Parses a size like `256M`, `1G`, `4096`.
pub fn parse_size(s: &str) -> anyhow::Result<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let mult = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => bail!("size {s:?}: unknown suffix {c:?} (use K, M, G or T)"),
            };
            (&s[..i], mult)
        }
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .with_context(|| format!("size {s:?} is not a number"))?;
    n.checked_mul(mult)
        .with_context(|| format!("size {s:?} is too large"))
}

/// A mounted image for the duration of one command.
pub struct Mounted {
    pub fs: FileSystem,
    pub report: MountReport,
}

/// Opens and mounts the image, telling the user on stderr when recovery had work to do
/// or found damage that left the mount read-only.
pub fn mount(arg: &ImageArg) -> anyhow::Result<Mounted> {
    let image = &arg.image;
    let region = if arg.read_only {
        Region::open_read_only(image)?
    } else {
        Region::open(image)?
    };
    let pm: Arc<dyn Pmem> = Arc::new(region);
    let opts = MountOptions {
        read_only: arg.read_only,
        ..MountOptions::default()
    };
    let (fs, report) =
        FileSystem::mount(pm, opts).with_context(|| format!("mounting {}", image.display()))?;
    if !report.damage.is_empty() {
        eprintln!(
            "easyio: warning: {} is damaged ({} problem(s), first: {}); mounted read-only:              undamaged files read back, damaged ones fail with EUCLEAN; run `easyio fsck`",
            image.display(),
            report.damage.len(),
            report.damage[0]
        );
    } else if !report.clean && !report.read_only {
        eprintln!(
            "easyio: {} was not cleanly unmounted; recovered in {} µs ({} journal(s) rolled back, \
             {} pending write(s) dropped, {} orphan(s) freed)",
            image.display(),
            report.mount_us,
            report.journals_rolled_back,
            report.pending_writes_dropped,
            report.orphans_freed
        );
    }
    Ok(Mounted { fs, report })
}

pub fn mkfs(a: MkfsArgs) -> anyhow::Result<()> {
    let path = &a.image.image;
    let region = if path.exists() {
        if !a.force {
            bail!(
                "{} exists; pass --force to reformat it (its contents are lost)",
                path.display()
            );
        }
        // Whatever its header says (damaged, another version, none): --force means it.
        Region::overwrite(path, 0)?
    } else {
        Region::create(path, parse_size(&a.size)?)?
    };
    let geo = FileSystem::format(
        &region,
        &FormatOptions {
            inodes: a.inodes,
            channels: None,
        },
    )?;
    println!(
        "formatted {}: {} blocks of 4 KiB ({} in the data pool), {} inodes; {}",
        path.display(),
        geo.total_blocks,
        geo.pool_blocks(),
        geo.inodes - 1,
        region.durability().describe()
    );
    Ok(())
}

pub fn fsck(a: FsckArgs) -> anyhow::Result<()> {
    // Read-only: a read-only image file (or file system) can be checked too.
    let region = Region::open_read_only(&a.image.image)?;
    let r = fs::fsck::check(&region)?;
    if a.json {
        report::print_json(&r)?;
    } else {
        println!(
            "{}: {} inodes, {} log entries, {} of {} pool blocks in use, {}",
            a.image.image.display(),
            r.inodes,
            r.log_entries,
            r.used_blocks,
            r.pool_blocks,
            if r.clean_unmount {
                "cleanly unmounted"
            } else {
                "not cleanly unmounted"
            }
        );
        for n in &r.notes {
            println!("note: {n}");
        }
        for p in &r.problems {
            println!("PROBLEM: {p}");
        }
        println!(
            "{}",
            if r.ok() {
                "no problems found".to_string()
            } else {
                format!("{} problem(s) found", r.problems.len())
            }
        );
    }
    if !r.ok() {
        std::process::exit(4);
    }
    Ok(())
}

#[derive(Serialize)]
struct Info {
    image: String,
    durability: &'static str,
    geometry: GeometryInfo,
    usage: fs::Usage,
    mount: MountReport,
}

#[derive(Serialize)]
struct GeometryInfo {
    total_blocks: u64,
    pool_start: u64,
    inodes: u64,
    journals: u64,
    channels: u64,
}

pub fn info(a: InfoArgs) -> anyhow::Result<()> {
    let m = mount(&a.image)?;
    let g = m.fs.geometry();
    let info = Info {
        image: a.image.image.display().to_string(),
        durability: m.fs.pmem().durability().describe(),
        geometry: GeometryInfo {
            total_blocks: g.total_blocks,
            pool_start: g.pool_start,
            inodes: g.inodes,
            journals: g.journals,
            channels: g.channels,
        },
        usage: m.fs.usage(),
        mount: m.report.clone(),
    };
    if a.json {
        report::print_json(&info)?;
    } else {
        let u = info.usage;
        println!("image:      {} ({})", info.image, info.durability);
        println!(
            "blocks:     {} free of {} ({} MiB free)",
            u.free_blocks,
            u.total_blocks,
            (u.free_blocks * 4096) >> 20
        );
        println!("inodes:     {} used of {}", u.inodes_used, u.inodes);
        println!(
            "mount:      {} µs, {}",
            info.mount.mount_us,
            if info.mount.clean {
                "clean (allocators loaded)"
            } else {
                "recovered (allocators rebuilt from the logs)"
            }
        );
    }
    m.fs.unmount()?;
    Ok(())
}

fn kind_char(k: FileKind) -> char {
    match k {
        FileKind::File => '-',
        FileKind::Dir => 'd',
        FileKind::Symlink => 'l',
    }
}

pub fn ls(a: LsArgs) -> anyhow::Result<()> {
    let m = mount(&a.image)?;
    let entries = m.fs.readdir(&a.path).with_context(|| a.path.clone())?;
    if a.json {
        report::print_json(&entries)?;
    } else {
        for e in &entries {
            if a.long {
                let full = join(&a.path, &e.name);
                let st = m.fs.lstat(&full)?;
                println!(
                    "{}{:04o} {:>3} {:>12} {}",
                    kind_char(st.kind),
                    st.mode & 0o7777,
                    st.nlink,
                    st.size,
                    e.name
                );
            } else {
                println!("{}", e.name);
            }
        }
    }
    m.fs.unmount()?;
    Ok(())
}

fn join(dir: &str, name: &str) -> String {
    format!("{}/{}", dir.trim_end_matches('/'), name)
}

pub fn stat(a: PathArgs) -> anyhow::Result<()> {
    let m = mount(&a.image)?;
    let st = m.fs.lstat(&a.path).with_context(|| a.path.clone())?;
    if a.json {
        report::print_json(&st)?;
    } else {
        println!("  path: {}", a.path);
        println!(
            "  kind: {:?}  inode: {}  links: {}",
            st.kind, st.ino, st.nlink
        );
        println!(
            "  size: {}  blocks: {}  mode: {:04o}",
            st.size,
            st.blocks,
            st.mode & 0o7777
        );
        println!("  uid: {}  gid: {}", st.uid, st.gid);
        println!("  mtime: {} ns  ctime: {} ns", st.mtime_ns, st.ctime_ns);
    }
    m.fs.unmount()?;
    Ok(())
}

pub fn put(a: PutArgs) -> anyhow::Result<()> {
    let mut input: Box<dyn Read> = if a.local.as_os_str() == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(
            std::fs::File::open(&a.local)
                .with_context(|| format!("opening {}", a.local.display()))?,
        )
    };
    let m = mount(&a.image)?;
    let flags = OpenFlags::WRONLY | OpenFlags::CREAT | OpenFlags::TRUNC;
    let fd =
        m.fs.open(&a.dest, flags, 0o644)
            .with_context(|| a.dest.clone())?;
    let mut buf = vec![0u8; COPY_CHUNK];
    loop {
        let n = input.read(&mut buf)?;
        if n == 0 {
            break;
        }
        m.fs.write(fd, &buf[..n]).with_context(|| a.dest.clone())?;
    }
    m.fs.close(fd)?;
    m.fs.unmount()?;
    Ok(())
}

fn copy_out(fs: &FileSystem, path: &str, out: &mut dyn Write) -> anyhow::Result<()> {
    let fd = fs
        .open(path, OpenFlags::RDONLY, 0)
        .with_context(|| path.to_string())?;
    let mut buf = vec![0u8; COPY_CHUNK];
    loop {
        let n = fs.read(fd, &mut buf).with_context(|| path.to_string())?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])?;
    }
    fs.close(fd)?;
    Ok(())
}

pub fn get(a: GetArgs) -> anyhow::Result<()> {
    let m = mount(&a.image)?;
    if a.local.as_os_str() == "-" {
        copy_out(&m.fs, &a.src, &mut std::io::stdout().lock())?;
    } else {
        let mut f = std::fs::File::create(&a.local)
            .with_context(|| format!("creating {}", a.local.display()))?;
        copy_out(&m.fs, &a.src, &mut f)?;
    }
    m.fs.unmount()?;
    Ok(())
}

pub fn cat(a: CatArgs) -> anyhow::Result<()> {
    let m = mount(&a.image)?;
    copy_out(&m.fs, &a.path, &mut std::io::stdout().lock())?;
    m.fs.unmount()?;
    Ok(())
}

fn remove_tree(fs: &FileSystem, path: &str) -> anyhow::Result<()> {
    for e in fs.readdir(path)? {
        let child = join(path, &e.name);
        if e.kind == FileKind::Dir {
            remove_tree(fs, &child)?;
        } else {
            fs.unlink(&child).with_context(|| child.clone())?;
        }
    }
    fs.rmdir(path).with_context(|| path.to_string())?;
    Ok(())
}

pub fn rm(a: RmArgs) -> anyhow::Result<()> {
    let m = mount(&a.image)?;
    let st = m.fs.lstat(&a.path).with_context(|| a.path.clone())?;
    if st.kind == FileKind::Dir {
        if !a.recursive {
            bail!("{}: is a directory (use -r)", a.path);
        }
        remove_tree(&m.fs, &a.path)?;
    } else {
        m.fs.unlink(&a.path).with_context(|| a.path.clone())?;
    }
    m.fs.unmount()?;
    Ok(())
}

pub fn mkdir(a: MkdirArgs) -> anyhow::Result<()> {
    let m = mount(&a.image)?;
    if a.parents {
        let mut at = String::new();
        for c in a.path.split('/').filter(|c| !c.is_empty()) {
            at = format!("{at}/{c}");
            match m.fs.mkdir(&at, 0o755) {
                Ok(()) | Err(fs::Error::Exists) => {}
                Err(e) => return Err(anyhow::Error::new(e).context(at)),
            }
        }
    } else {
        m.fs.mkdir(&a.path, 0o755).with_context(|| a.path.clone())?;
    }
    m.fs.unmount()?;
    Ok(())
}

pub fn mv(a: MvArgs) -> anyhow::Result<()> {
    let m = mount(&a.image)?;
    m.fs.rename(&a.from, &a.to)
        .with_context(|| format!("{} -> {}", a.from, a.to))?;
    m.fs.unmount()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("256M").unwrap(), 256 << 20);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("abc").is_err());
        assert!(parse_size("99999999999T").is_err());
    }
}
