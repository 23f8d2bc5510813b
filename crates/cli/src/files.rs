//! File commands on an image: mkfs, fsck, info, ls, stat, put, get, cat, rm, mkdir, mv.
//!
//! Each command opens the region (held exclusively while it runs), mounts — recovering
//! if the last user crashed, and saying so on stderr —, does its work, and unmounts.
//! Every failure path unmounts too (the mount is dropped), and no failure destroys data:
//! `put` writes a new file in the image and renames it over the old one only when it is
//! complete; `get` does the same outside the image (see `command::output`).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::builder::RangedU64ValueParser;
use clap::Args;
use fs::{FileKind, FileSystem, FormatOptions, MountOptions, MountReport, OpenFlags};
use pmem::{Pmem, Region};
use serde::Serialize;

use command::image::ImageArg;
use command::output::{self, Output};
use command::owners::Owners;
use command::{args, dates, progress, report, signals, usage};

/// Chunk size for copying files in and out.
const COPY_CHUNK: usize = 1 << 20;
/// Region size `mkfs` creates when none is given.
pub const DEFAULT_IMAGE_SIZE: u64 = 1 << 30;
/// Channels `mkfs` formats (the file system's default).
const CHANNELS: u64 = 8;

#[derive(Args)]
pub struct MkfsArgs {
    #[command(flatten)]
    pub image: ImageArg,
    /// The image (the same as --image).
    #[arg(value_name = "IMAGE")]
    pub given: Option<PathBuf>,
    /// Size of a new region file (K, M, G suffixes; whole 4 KiB pages; default 1G).
    /// With --force, an image file of another size is replaced by one of this size.
    #[arg(long, value_parser = args::size)]
    size: Option<u64>,
    /// Number of inodes (default: one per 16 KiB).
    #[arg(long, value_parser = RangedU64ValueParser::<u64>::new().range(1..))]
    inodes: Option<u64>,
    /// Reformat an existing region, destroying its contents.
    #[arg(long)]
    force: bool,
}

#[derive(Args)]
pub struct FsckArgs {
    #[command(flatten)]
    pub image: ImageArg,
    /// The image (the same as --image).
    #[arg(value_name = "IMAGE")]
    pub given: Option<PathBuf>,
    #[arg(long)]
    json: bool,
    /// Repair what can be repaired (opens the image writable): drop damaged inodes
    /// with the entries naming them and the blocks only they referenced, keep what
    /// only a dropped directory reached in /lost+found as #INO, fix link counts,
    /// rebuild the allocator. Exit 0 when the image is clean afterwards, 4 when
    /// problems remain (a refusal changes nothing and says why).
    #[arg(long)]
    repair: bool,
}

#[derive(Args)]
pub struct InfoArgs {
    #[command(flatten)]
    pub image: ImageArg,
    /// The image (the same as --image).
    #[arg(value_name = "IMAGE")]
    pub given: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct LsArgs {
    #[command(flatten)]
    pub image: ImageArg,
    /// Directory to list (a file is listed by itself).
    #[arg(default_value = "/")]
    path: String,
    /// Long listing: kind, mode, links, owner and group (by name, as ls(1) shows them;
    /// the number where the system has no name for it), size, modification
    /// time (local; the year instead of the time of day when not within six months).
    #[arg(short, long)]
    long: bool,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct PathArgs {
    #[command(flatten)]
    pub image: ImageArg,
    path: String,
    /// Machine-readable output: every field, times in nanoseconds since the epoch.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct PutArgs {
    #[command(flatten)]
    pub image: ImageArg,
    /// Local file to copy in ("-" for standard input).
    local: PathBuf,
    /// Destination path in the image (an existing directory: the file goes into it).
    /// An existing file is replaced only once the copy is complete.
    dest: String,
}

#[derive(Args)]
pub struct GetArgs {
    #[command(flatten)]
    pub image: ImageArg,
    /// Path in the image.
    src: String,
    /// Local file to write ("-" for standard output; an existing directory: the file
    /// goes into it). Written beside the target and renamed over it when complete.
    local: PathBuf,
}

#[derive(Args)]
pub struct CatArgs {
    #[command(flatten)]
    pub image: ImageArg,
    path: String,
}

#[derive(Args)]
pub struct RmArgs {
    #[command(flatten)]
    pub image: ImageArg,
    path: String,
    /// Remove directories and their contents.
    #[arg(short, long)]
    recursive: bool,
    /// With -r, allow removing everything in / (refused without it, as coreutils does).
    #[arg(long)]
    no_preserve_root: bool,
}

#[derive(Args)]
pub struct MkdirArgs {
    #[command(flatten)]
    pub image: ImageArg,
    path: String,
    /// Create missing parents; no error if it exists.
    #[arg(short, long)]
    parents: bool,
}

#[derive(Args)]
pub struct MvArgs {
    #[command(flatten)]
    pub image: ImageArg,
    from: String,
    /// New path, or an existing directory to move into.
    to: String,
}

/// Opens and mounts the image, telling the user on stderr when recovery had work to do
/// or found damage that left the mount read-only.
pub fn mount(arg: &ImageArg) -> anyhow::Result<(FileSystem, MountReport)> {
    mount_region(arg, open_region(arg)?)
}

/// Opens the image's region as the command asks (read-only or not).
fn open_region(arg: &ImageArg) -> anyhow::Result<Region> {
    let image = arg.path()?;
    Ok(if arg.read_only {
        Region::open_read_only(image)?
    } else {
        Region::open(image)?
    })
}

/// [`mount`] of a region already open.
fn mount_region(arg: &ImageArg, region: Region) -> anyhow::Result<(FileSystem, MountReport)> {
    let image = arg.path()?;
    let pm: Arc<dyn Pmem> = Arc::new(region);
    let opts = MountOptions {
        read_only: arg.read_only,
        ..MountOptions::default()
    };
    let (fs, report) =
        FileSystem::mount(pm, opts).with_context(|| format!("mounting {}", image.display()))?;
    if !report.damage.is_empty() {
        eprintln!(
            "easyio: warning: {} is damaged ({} problem(s), first: {}); mounted read-only: \
             undamaged files read back, damaged ones fail with EUCLEAN; run `easyio fsck`",
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
            report.pending_writes_dropped + report.unsealed_writes_dropped,
            report.orphans_freed
        );
        for name in remove_put_leftovers(&fs)? {
            eprintln!("easyio: removed {name}, left by a put that did not finish");
        }
    }
    Ok((fs, report))
}

/// Mounts the image, runs `work` on the file system and unmounts. When `work` fails
/// the mount is dropped, which unmounts too.
fn with_mount<T>(
    arg: &ImageArg,
    work: impl FnOnce(&FileSystem) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let (fs, _) = mount(arg)?;
    let done = work(&fs)?;
    fs.unmount()?;
    Ok(done)
}

/// Fails unless `path` is a directory (or leads to one).
fn ensure_dir(fs: &FileSystem, path: &str) -> anyhow::Result<()> {
    if fs.stat(path)?.kind != FileKind::Dir {
        return Err(fs::Error::NotDir.into());
    }
    Ok(())
}

pub fn mkfs(a: MkfsArgs) -> anyhow::Result<()> {
    let path = a.image.path()?;
    let opts = FormatOptions {
        inodes: a.inodes,
        channels: None,
    };
    let existing = std::fs::metadata(path).ok();
    if existing.is_some() && !a.force {
        // EEXIST, as the exit statuses promise.
        return Err(
            anyhow::Error::new(std::io::Error::from_raw_os_error(libc::EEXIST)).context(format!(
                "{} exists; pass --force to reformat it (its contents are lost)",
                path.display()
            )),
        );
    }
    let size = a.size.unwrap_or(DEFAULT_IMAGE_SIZE);
    let (region, geo) = match existing {
        None => {
            check_geometry(size, &opts)?;
            let region = Region::create(path, size)?;
            match FileSystem::format(&region, &opts) {
                Ok(geo) => (region, geo),
                Err(e) => {
                    drop(region);
                    let _ = std::fs::remove_file(path);
                    return Err(e.into());
                }
            }
        }
        Some(m) if m.is_file() && a.size.is_some_and(|s| s != m.len()) => {
            check_geometry(size, &opts)?;
            replace_image(path, &m, size, &opts)?
        }
        Some(_) => {
            // Whatever its header says (damaged, another version, none): --force
            // means it. A device DAX region takes the whole device: the size is checked.
            let region = Region::overwrite(path, a.size.unwrap_or(0))?;
            check_geometry(region.len(), &opts)?;
            let geo = FileSystem::format(&region, &opts)?;
            (region, geo)
        }
    };
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

/// Refuses, as a usage error, a size and inode count that make no file system.
fn check_geometry(size: u64, opts: &FormatOptions) -> anyhow::Result<()> {
    let channels = opts.channels.unwrap_or(CHANNELS);
    if let Err(e) = fs::Geometry::new(size, opts.inodes, channels) {
        // Say the smallest size that works, in MiB, where one does.
        let smallest = (1..=1u64 << 20)
            .map(|mib| mib << 20)
            .find(|s| fs::Geometry::new(*s, opts.inodes, channels).is_ok());
        match smallest {
            Some(s) if s > size => usage!("{e}; the smallest image is {}M", s >> 20),
            _ => usage!("{e}"),
        }
    }
    Ok(())
}

/// `mkfs --force --size` of an image file of another size: a new image is made and
/// formatted beside it, then renamed over it; the old one stays whole if that fails.
/// The old image is locked meanwhile, so one in use is refused.
fn replace_image(
    path: &Path,
    old: &std::fs::Metadata,
    size: u64,
    opts: &FormatOptions,
) -> anyhow::Result<(Region, fs::Geometry)> {
    let held = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| path.display().to_string())?;
    if held.try_lock().is_err() {
        return Err(std::io::Error::from_raw_os_error(libc::EBUSY))
            .with_context(|| format!("{} is in use", path.display()));
    }
    let mut name = std::ffi::OsString::from(".");
    name.push(path.file_name().unwrap_or_default());
    name.push(format!(".easyio-mkfs-{}", std::process::id()));
    let temp = path.with_file_name(name);
    let made = Region::create(&temp, size)
        .map_err(anyhow::Error::from)
        .and_then(|region| {
            let geo = FileSystem::format(&region, opts)?;
            std::fs::set_permissions(&temp, old.permissions())?;
            std::fs::rename(&temp, path)?;
            Ok((region, geo))
        });
    if made.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    made
}

pub fn fsck(a: FsckArgs) -> anyhow::Result<()> {
    if a.repair {
        return fsck_repair(a);
    }
    let region = Region::open_read_only(a.image.path()?)?;
    let spin = progress::spinner("checking the image", a.json);
    let r = fs::fsck::check(&region);
    spin.finish_and_clear();
    let r = r?;
    let out = &mut std::io::stdout().lock();
    if a.json {
        report::print_json(&r)?;
    } else {
        writeln!(
            out,
            "{}: {} inodes, {} log entries, {} of {} pool blocks in use, {}cleanly unmounted",
            a.image.path()?.display(),
            r.inodes,
            r.log_entries,
            r.used_blocks,
            r.pool_blocks,
            if r.clean_unmount { "" } else { "not " }
        )?;
        for n in &r.notes {
            writeln!(out, "note: {n}")?;
        }
        for p in &r.problems {
            writeln!(out, "PROBLEM: {p}")?;
        }
        match r.problems.len() {
            0 => writeln!(out, "no problems found")?,
            n => writeln!(out, "{n} problem(s) found")?,
        }
    }
    if !r.ok() {
        std::process::exit(4);
    }
    Ok(())
}

fn fsck_repair(a: FsckArgs) -> anyhow::Result<()> {
    let region: Arc<dyn Pmem> = Arc::new(Region::open(a.image.path()?)?);
    let spin = progress::spinner("repairing the image", a.json);
    let r = fs::fsck::repair(region);
    spin.finish_and_clear();
    let r = r?;
    let out = &mut std::io::stdout().lock();
    if a.json {
        report::print_json(&r)?;
    } else {
        let image = a.image.path()?.display();
        if r.before.ok() {
            writeln!(out, "{image}: no problems found; nothing to repair")?;
        }
        for act in &r.actions {
            writeln!(out, "repaired: {act}")?;
        }
        for why in &r.refused {
            writeln!(out, "REFUSED: {why}")?;
        }
        if !r.refused.is_empty() {
            writeln!(out, "{image}: not repaired; the image was not changed")?;
        }
        for p in &r.after.problems {
            writeln!(out, "PROBLEM: {p}")?;
        }
        let remain = r.after.problems.len();
        if !r.before.ok() && r.ok() {
            writeln!(out, "{image}: no problems found after repair")?;
        } else if !r.before.ok() {
            writeln!(out, "{image}: {remain} problem(s) remain")?;
        }
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
    /// What survives a power loss: `CpuFlush`, `PageCache` or `Dram`.
    durability_kind: String,
    /// How the region is mapped: `devdax`, `MAP_SYNC` or `shared`.
    mapping: &'static str,
    geometry: GeometryInfo,
    usage: fs::Usage,
    mount: MountReport,
    protection: Protection,
    /// What `easyio mount` of this image would serve through on this machine.
    fuse_transport: String,
}

/// Whether stray stores of the application into a region mounted in its process
/// are caught.
#[derive(Serialize)]
struct Protection {
    /// The CPU and the kernel offer memory protection keys.
    pku: bool,
    /// The region mounted here is tagged with one (`EASYIO_PROTECT=1`; a client of
    /// `easyio serve` maps the image read-only instead).
    used: bool,
    /// The key, when used.
    key: Option<u32>,
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
    let region = open_region(&a.image)?;
    let mapping = region.mapping();
    let (fs, report) = mount_region(&a.image, region)?;
    let g = fs.geometry();
    let info = Info {
        image: a.image.path()?.display().to_string(),
        durability: fs.pmem().durability().describe(),
        durability_kind: format!("{:?}", fs.pmem().durability()),
        mapping: mapping.name(),
        geometry: GeometryInfo {
            total_blocks: g.total_blocks,
            pool_start: g.pool_start,
            inodes: g.inodes,
            journals: g.journals,
            channels: g.channels,
        },
        usage: fs.usage(),
        mount: report,
        protection: Protection {
            pku: pmem::persist::features().pku,
            used: fs.pmem().protection_key().is_some(),
            key: fs.pmem().protection_key(),
        },
        fuse_transport: easyio_fuse::transport(),
    };
    if a.json {
        report::print_json(&info)?;
    } else {
        let out = &mut std::io::stdout().lock();
        let u = info.usage;
        writeln!(
            out,
            "image:      {} ({}; {}: {})",
            info.image,
            info.durability,
            info.durability_kind,
            mapping.describe()
        )?;
        writeln!(
            out,
            "blocks:     {} free of {} ({} MiB free)",
            u.free_blocks,
            u.total_blocks,
            (u.free_blocks * 4096) >> 20
        )?;
        writeln!(out, "inodes:     {} used of {}", u.inodes_used, u.inodes)?;
        writeln!(
            out,
            "mount:      {} µs, {}",
            info.mount.mount_us,
            if info.mount.clean {
                "clean (allocators loaded)"
            } else {
                "recovered (allocators rebuilt from the logs)"
            }
        )?;
        let p = &info.protection;
        let how = match (p.key, p.pku) {
            (Some(k), _) => format!(
                "on (protection key {k}): a stray store of the program into the region faults"
            ),
            (None, true) => format!(
                "off: a stray store of the program can reach the region ({}=1 turns \
                 protection keys on; this CPU has them)",
                pmem::pkey::ENV
            ),
            (None, false) => "none: a stray store of the program can reach the region (this \
                 CPU or kernel has no protection keys)"
                .to_string(),
        };
        writeln!(
            out,
            "protection: {how}; clients of `easyio serve` map the image read-only"
        )?;
        writeln!(out, "fuse:       {}", info.fuse_transport)?;
    }
    fs.unmount()?;
    Ok(())
}

/// The type letter of `ls -l`, by the kind's number (1 to 7).
fn kind_char(k: FileKind) -> char {
    char::from(b"?-dlpscb"[k as usize])
}

/// One line of `ls -l`: kind and mode, links, owner and group (names where the
/// databases have them), size, the modification time as `ls -l` shows it (`now_ns`
/// decides between time and year).
fn long_line(st: &fs::Stat, name: &str, owners: &mut Owners, now_ns: i64) -> String {
    let user = owners.user(st.uid).to_string();
    format!(
        "{}{:04o} {:>3} {user} {} {:>12} {} {}",
        kind_char(st.kind),
        st.mode & 0o7777,
        st.nlink,
        owners.group(st.gid),
        st.size,
        dates::short(st.mtime_ns, now_ns),
        name
    )
}

pub fn ls(a: LsArgs) -> anyhow::Result<()> {
    with_mount(&a.image, |fs| {
        let st = fs.stat(&a.path).with_context(|| a.path.clone())?;
        // A file lists itself, by the name it was given, as `ls FILE` does.
        let (entries, dir) = if st.kind == FileKind::Dir {
            (
                fs.readdir(&a.path).with_context(|| a.path.clone())?,
                Some(&a.path),
            )
        } else {
            let st = fs.lstat(&a.path).with_context(|| a.path.clone())?;
            let (name, ino, kind) = (a.path.clone(), st.ino, Some(st.kind));
            (vec![fs::DirEntry { name, ino, kind }], None)
        };
        if a.json {
            return report::print_json(&entries);
        }
        let out = &mut std::io::stdout().lock();
        let now = dates::now_ns();
        let mut owners = Owners::default();
        for e in &entries {
            if a.long && e.kind.is_none() {
                // As `ls -l` shows an entry whose inode it cannot stat.
                let q = "?";
                writeln!(
                    out,
                    "?????? {q:>3} {q:>8} {q:>8} {q:>12} {q:>12} {}",
                    e.name
                )?;
            } else if a.long {
                let path = dir.map_or_else(|| e.name.clone(), |d| join(d, &e.name));
                writeln!(
                    out,
                    "{}",
                    long_line(&fs.lstat(&path)?, &e.name, &mut owners, now)
                )?;
            } else {
                writeln!(out, "{}", e.name)?;
            }
        }
        Ok(())
    })
}

fn join(dir: &str, name: &str) -> String {
    format!("{}/{}", dir.trim_end_matches('/'), name)
}

/// The last component of a path (of the image or local), for copying into a directory.
fn base_name(path: &str) -> &str {
    path.trim_end_matches('/').rsplit('/').next().unwrap_or("")
}

pub fn stat(a: PathArgs) -> anyhow::Result<()> {
    with_mount(&a.image, |fs| {
        let st = fs.lstat(&a.path).with_context(|| a.path.clone())?;
        if a.json {
            return report::print_json(&st);
        }
        let (path, kind, ino, nlink) = (&a.path, st.kind, st.ino, st.nlink);
        let (size, blocks, mode, uid, gid) = (st.size, st.blocks, st.mode & 0o7777, st.uid, st.gid);
        let access = dates::full(st.atime_ns);
        let modify = dates::full(st.mtime_ns);
        let change = dates::full(st.ctime_ns);
        Ok(write!(
            std::io::stdout().lock(),
            "  path: {path}\n  kind: {kind:?}  inode: {ino}  links: {nlink}\n  size: {size}  \
             blocks: {blocks}  mode: {mode:04o}\n  uid: {uid}  gid: {gid}\n\
             access: {access}\nmodify: {modify}\nchange: {change}\n"
        )?)
    })
}

/// Names of the new file a `put` writes before renaming it into place: in the root
/// directory, so that one left by a `put` that was killed (SIGKILL, a second Ctrl-C, a
/// crash) is found and removed by the next mount that recovers, without a search.
const PUT_TEMP_PREFIX: &str = ".easyio-put-";

fn put_temp() -> String {
    format!("/{PUT_TEMP_PREFIX}{}", std::process::id())
}

/// Removes what interrupted `put`s left in the root directory; returns their names.
fn remove_put_leftovers(fs: &FileSystem) -> anyhow::Result<Vec<String>> {
    let mut removed = Vec::new();
    for e in fs.readdir("/")? {
        if e.kind == Some(FileKind::File) && e.name.starts_with(PUT_TEMP_PREFIX) {
            let path = format!("/{}", e.name);
            fs.unlink(&path).with_context(|| path.clone())?;
            removed.push(path);
        }
    }
    Ok(removed)
}

/// Where `put` writes in the image: `dest`, or the local file's name in `dest` if that
/// is a directory; with the stat of what is there now. What the final rename would
/// refuse is refused here, before the copy.
fn put_dest(fs: &FileSystem, a: &PutArgs) -> anyhow::Result<(String, Option<fs::Stat>)> {
    let mut dest = a.dest.clone();
    let old = match fs.stat(&dest) {
        Ok(st) if st.kind == FileKind::Dir => {
            if a.local.as_os_str() == "-" {
                return Err(fs::Error::IsDir).context(dest);
            }
            let name = a.local.file_name().unwrap_or_default().to_string_lossy();
            dest = join(&dest, &name);
            fs.stat(&dest).ok()
        }
        Ok(st) => Some(st),
        Err(_) => None,
    };
    if old.as_ref().is_some_and(|st| st.kind == FileKind::Dir) {
        return Err(fs::Error::IsDir).context(dest);
    }
    if old.is_none() {
        let parent = match dest.trim_end_matches('/').rfind('/') {
            Some(0) | None => "/",
            Some(i) => &dest[..i],
        };
        ensure_dir(fs, parent).with_context(|| dest.clone())?;
        if base_name(&dest).len() > fs::MAX_NAME {
            return Err(fs::Error::NameTooLong).context(dest);
        }
    }
    Ok((dest, old))
}

/// Copies `input` to the open file `fd` of the image until its end or a signal.
fn copy_in(
    fs: &FileSystem,
    fd: fs::Fd,
    input: &mut dyn Read,
    (from, to): (&str, &str),
) -> anyhow::Result<()> {
    let mut buf = vec![0u8; COPY_CHUNK];
    loop {
        signals::check()?;
        let n = match input.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).context(from.to_string()),
        };
        if n == 0 {
            return Ok(());
        }
        fs.write(fd, &buf[..n]).with_context(|| to.to_string())?;
    }
}

pub fn put(a: PutArgs) -> anyhow::Result<()> {
    let local_name = a.local.display().to_string();
    let mut input: Box<dyn Read> = if a.local.as_os_str() == "-" {
        Box::new(command::stdin::Stdin)
    } else {
        let f = std::fs::File::open(&a.local).with_context(|| local_name.clone())?;
        if f.metadata().with_context(|| local_name.clone())?.is_dir() {
            return Err(std::io::Error::from_raw_os_error(libc::EISDIR)).context(local_name);
        }
        Box::new(f)
    };
    with_mount(&a.image, |fs| {
        let (dest, old) = put_dest(fs, &a)?;
        // The new content goes to a file of its own, renamed over the old one only
        // when complete: a put that fails (no space, a read error, a signal) leaves
        // the old file as it was.
        let temp = put_temp();
        let _ = fs.unlink(&temp);
        let mode = old.as_ref().map_or(0o644, |st| st.mode & 0o7777);
        let flags = OpenFlags::WRONLY | OpenFlags::CREAT | OpenFlags::EXCL;
        let fd = fs.open(&temp, flags, mode).with_context(|| dest.clone())?;
        let copied = copy_in(fs, fd, &mut *input, (&local_name, &dest));
        let closed = fs.close(fd);
        let placed = copied
            .and_then(|()| Ok(closed?))
            .and_then(|()| fs.rename(&temp, &dest).with_context(|| dest.clone()));
        if placed.is_err() {
            let _ = fs.unlink(&temp);
        }
        placed
    })
}

fn copy_out(fs: &FileSystem, path: &str, out: &mut dyn Write) -> anyhow::Result<()> {
    let fd = fs
        .open(path, OpenFlags::RDONLY, 0)
        .with_context(|| path.to_string())?;
    let mut buf = vec![0u8; COPY_CHUNK];
    let copied = (|| -> anyhow::Result<()> {
        loop {
            signals::check()?;
            let n = fs.read(fd, &mut buf).with_context(|| path.to_string())?;
            if n == 0 {
                return Ok(());
            }
            out.write_all(&buf[..n])?;
        }
    })();
    let closed = fs.close(fd);
    copied?;
    out.flush()?;
    Ok(closed?)
}

pub fn get(a: GetArgs) -> anyhow::Result<()> {
    with_mount(&a.image, |fs| {
        let st = fs.stat(&a.src).with_context(|| a.src.clone())?;
        if st.kind == FileKind::Dir {
            return Err(fs::Error::IsDir).context(a.src.clone());
        }
        if a.local.as_os_str() == "-" {
            output::refuse_image_stdout(a.image.path()?)?;
            return copy_out(fs, &a.src, &mut std::io::stdout().lock());
        }
        let target = if a.local.is_dir() {
            a.local.join(base_name(&a.src))
        } else {
            a.local.clone()
        };
        let mut out = Output::create(&target, Some(a.image.path()?))?;
        copy_out(fs, &a.src, &mut out)?;
        out.commit()
    })
}

pub fn cat(a: CatArgs) -> anyhow::Result<()> {
    output::refuse_image_stdout(a.image.path()?)?;
    with_mount(&a.image, |fs| {
        copy_out(fs, &a.path, &mut std::io::stdout().lock())
    })
}

/// Removes everything in the directory `path`, then (unless `keep`) the directory;
/// returns the number of entries removed.
fn remove_tree(fs: &FileSystem, path: &str, keep: bool) -> anyhow::Result<u64> {
    let mut removed = 0;
    for e in fs.readdir(path).with_context(|| path.to_string())? {
        signals::check()?;
        let child = join(path, &e.name);
        if e.kind == Some(FileKind::Dir) {
            removed += remove_tree(fs, &child, false)?;
        } else {
            fs.unlink(&child).with_context(|| child.clone())?;
            removed += 1;
        }
    }
    if !keep {
        fs.rmdir(path).with_context(|| path.to_string())?;
        removed += 1;
    }
    Ok(removed)
}

pub fn rm(a: RmArgs) -> anyhow::Result<()> {
    with_mount(&a.image, |fs| {
        let st = fs.lstat(&a.path).with_context(|| a.path.clone())?;
        if st.kind != FileKind::Dir {
            return fs.unlink(&a.path).with_context(|| a.path.clone());
        }
        if !a.recursive {
            bail!("{}: is a directory (use -r)", a.path);
        }
        if st.ino != fs::ROOT_INO {
            return remove_tree(fs, &a.path, false).map(drop);
        }
        if !a.no_preserve_root {
            bail!(
                "{}: refusing to remove / recursively (every file of the image); \
                 pass --no-preserve-root to remove everything in it",
                a.path
            );
        }
        let n = remove_tree(fs, "/", true)?;
        println!("removed everything in / ({n} entries); / itself stays");
        Ok(())
    })
}

pub fn mkdir(a: MkdirArgs) -> anyhow::Result<()> {
    with_mount(&a.image, |fs| {
        if !a.parents {
            return fs.mkdir(&a.path, 0o755).with_context(|| a.path.clone());
        }
        let mut at = String::new();
        for c in a.path.split('/').filter(|c| !c.is_empty()) {
            at = format!("{at}/{c}");
            match fs.mkdir(&at, 0o755) {
                // What is there must be a directory (or lead to one).
                Ok(()) => {}
                Err(fs::Error::Exists) => ensure_dir(fs, &at).with_context(|| at.clone())?,
                Err(e) => return Err(e).context(at),
            }
        }
        Ok(())
    })
}

pub fn mv(a: MvArgs) -> anyhow::Result<()> {
    with_mount(&a.image, |fs| {
        // Onto an existing directory (or a name ending in '/'): into it, as mv(1) does.
        let to = match fs.stat(&a.to) {
            Ok(st) if st.kind == FileKind::Dir && !base_name(&a.from).is_empty() => {
                join(&a.to, base_name(&a.from))
            }
            _ => a.to.clone(),
        };
        fs.rename(&a.from, &to)
            .with_context(|| format!("{} -> {}", a.from, to))?;
        Ok(())
    })
}
