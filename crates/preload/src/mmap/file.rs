//! The file's side of an object: reading the file into it, growing it, and
//! writing back the pages that differ.

use std::sync::atomic::Ordering;

use super::object::{page, Object, CHUNK};
use crate::call::mount_of;
use crate::guard::errno_of;
use crate::live::Live;
use crate::report::Once;
use crate::table::Desc;

static WRITE_BACK: Once = Once::new();

/// Whether write back may go through `d` (it must also read, to compare).
pub(super) fn writable(d: &Desc) -> bool {
    let s = d.status.load(Ordering::Relaxed);
    s & libc::O_PATH == 0 && s & libc::O_ACCMODE == libc::O_RDWR
}

pub(super) fn file_size(l: &Live, d: &Desc) -> Result<u64, i32> {
    l.fs.fstat(d.fd).map(|s| s.size).map_err(errno_of)
}

/// Reads the file at `off` until `b` is full or the file ends.
pub(super) fn file_read(l: &Live, d: &Desc, b: &mut [u8], off: u64) -> Result<usize, i32> {
    let mut at = 0;
    while at < b.len() {
        match l.fs.pread(d.fd, &mut b[at..], off + at as u64) {
            Ok(0) => break,
            Ok(n) => at += n,
            Err(e) => return Err(errno_of(e)),
        }
    }
    Ok(at)
}

fn file_write(l: &Live, d: &Desc, b: &[u8], off: u64) -> Result<(), i32> {
    let mut at = 0;
    while at < b.len() {
        match l.fs.pwrite(d.fd, &b[at..], off + at as u64) {
            Ok(0) => return Err(libc::EIO),
            Ok(n) => at += n,
            Err(e) => return Err(errno_of(e)),
        }
    }
    Ok(())
}

/// Copies the file's `[from, to)` into the object (which holds zeros there when
/// `fresh`: zero chunks are then skipped, so a sparse file stays sparse).
pub(super) fn fill(
    obj: &Object,
    l: &Live,
    d: &Desc,
    from: u64,
    to: u64,
    fresh: bool,
) -> Result<(), i32> {
    let mut b = vec![0u8; CHUNK.min(to.saturating_sub(from) as usize)];
    let mut at = from;
    while at < to {
        let n = ((to - at) as usize).min(b.len());
        let got = file_read(l, d, &mut b[..n], at)?;
        b[got..n].fill(0);
        if !(fresh && b[..n].iter().all(|&x| x == 0)) {
            obj.write(&b[..n], at)?;
        }
        at += n as u64;
    }
    Ok(())
}

/// Makes the object at least `size` bytes long, the new part filled from the file.
pub(super) fn grow(obj: &Object, l: &Live, d: &Desc, size: u64) -> Result<(), i32> {
    let old = obj.size()?;
    if size > old {
        obj.resize(size)?;
        fill(obj, l, d, old, size, false)?;
    }
    Ok(())
}

/// Writes the object's `[from, to)` (within the file and the object) back to the
/// file: the pages that differ from the file's. In the object's turn.
pub(super) fn flush_locked(
    obj: &Object,
    l: &Live,
    d: &Desc,
    from: u64,
    to: u64,
) -> Result<(), i32> {
    let to = to.min(file_size(l, d)?).min(obj.size()?);
    if from >= to {
        return Ok(());
    }
    let cap = CHUNK.min((to - from) as usize);
    let (mut mine, mut theirs) = (vec![0u8; cap], vec![0u8; cap]);
    let mut at = from;
    while at < to {
        let want = ((to - at) as usize).min(cap);
        // The file's length bounds the write back: it never grows the file.
        let n = file_read(l, d, &mut theirs[..want], at)?;
        let got = obj.read(&mut mine[..n], at)?;
        mine[got..n].fill(0);
        write_differences(l, d, &mine[..n], &theirs[..n], at)?;
        if n < want {
            break;
        }
        at += n as u64;
    }
    Ok(())
}

/// Writes the runs of pages of `mine` that differ from `theirs` (both at `off`).
fn write_differences(l: &Live, d: &Desc, mine: &[u8], theirs: &[u8], off: u64) -> Result<(), i32> {
    let pg = page();
    let differs = |i: usize| {
        let e = (i + pg).min(mine.len());
        mine[i..e] != theirs[i..e]
    };
    let mut i = 0;
    while i < mine.len() {
        if !differs(i) {
            i += pg;
            continue;
        }
        let start = i;
        while i < mine.len() && differs(i) {
            i += pg;
        }
        let end = i.min(mine.len());
        file_write(l, d, &mine[start..end], off + start as u64)?;
    }
    Ok(())
}

/// Writes the object's `[from, to)` back to the file (nothing for a process that
/// cannot write the file, or that is a child of the image's holder).
pub(super) fn flush(obj: &Object, from: u64, to: u64) -> Result<(), i32> {
    if obj.inherited.load(Ordering::Relaxed) {
        return Ok(());
    }
    let d = obj.desc();
    if !writable(&d) {
        return Ok(());
    }
    let l = mount_of(&d)?;
    obj.locked(|| flush_locked(obj, &l, &d, from, to))
}

/// Says once on stderr that a write back failed (the data stays in the mapping).
pub(super) fn report(r: Result<(), i32>) -> Result<(), i32> {
    if let Err(e) = r {
        WRITE_BACK.say(|| {
            format!(
                "writing a shared mapping back to its easyio file failed: {}",
                std::io::Error::from_raw_os_error(e)
            )
        });
    }
    r
}
