//! Directory handles: `opendir`, `readdir`, `closedir` over the file system's
//! cookie-ordered listing, which neither repeats nor skips an entry added or removed
//! while a listing runs.

use std::collections::VecDeque;
use std::ffi::{c_char, c_int};
use std::sync::{Arc, Weak};

use fs::{DirEntryAt, FileKind, OpenFlags};
use parking_lot::Mutex;

use crate::args::{out, string};
use crate::error::{call, CResult, Failure};
use crate::handles::Registry;
use crate::mount::mount_of;
use crate::mount::{as_caller, easyio_fs, Mount};
use crate::names::{EASYIO_DIRENT_NAME_SIZE, EASYIO_NAME_MAX};

/// An open directory listing (opaque).
pub struct easyio_dir {
    _opaque: [u8; 0],
}

/// One entry of a listing: `.` and `..` come first.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct easyio_dirent {
    /// Inode number.
    pub ino: u64,
    /// The entry's kind as `DT_REG`, `DT_DIR`, `DT_LNK`, `DT_FIFO`, `DT_SOCK`,
    /// `DT_CHR`, `DT_BLK`, or `DT_UNKNOWN` for an inode that cannot be read.
    pub kind: u8,
    /// The name, NUL-terminated.
    pub name: [c_char; EASYIO_DIRENT_NAME_SIZE],
}

/// A listing in progress: the directory's descriptor on its mount, the entries
/// fetched and not yet returned, and the cookie to resume after.
struct Dir {
    mount: Weak<Mount>,
    fd: fs::Fd,
    state: Mutex<(VecDeque<DirEntryAt>, u64, bool)>,
}

static DIRS: Registry<Dir> = Registry::new("easyio_dir");

/// `DT_*` of a kind.
fn dtype(k: Option<FileKind>) -> u8 {
    match k {
        Some(FileKind::File) => libc::DT_REG,
        Some(FileKind::Dir) => libc::DT_DIR,
        Some(FileKind::Symlink) => libc::DT_LNK,
        Some(FileKind::Fifo) => libc::DT_FIFO,
        Some(FileKind::Socket) => libc::DT_SOCK,
        Some(FileKind::CharDev) => libc::DT_CHR,
        Some(FileKind::BlockDev) => libc::DT_BLK,
        None => libc::DT_UNKNOWN,
    }
}

/// Opens the directory at `path` for listing (ENOTDIR if it is not one).
#[no_mangle]
pub extern "C" fn easyio_opendir(fs: *mut easyio_fs, path: *const c_char) -> *mut easyio_dir {
    call(std::ptr::null_mut(), || {
        let m = mount_of(fs)?;
        let p = string(path, "path")?;
        let flags = OpenFlags::RDONLY | OpenFlags::DIRECTORY;
        let fd = as_caller!(m, open(p, flags, 0))?;
        Ok(DIRS.insert(Dir {
            mount: Arc::downgrade(&m),
            fd,
            state: Mutex::new((VecDeque::new(), 0, false)),
        }))
    })
}

/// The next entry of a listing, fetching more when none is buffered.
fn next(d: &Dir) -> CResult<Option<DirEntryAt>> {
    let m = d
        .mount
        .upgrade()
        .ok_or_else(|| Failure::new(libc::EBADF, "the directory's file system is unmounted"))?;
    let mut st = d.state.lock();
    if st.0.is_empty() && !st.2 {
        let fetched = m.fs.readdir_fd(d.fd, st.1)?;
        st.2 = fetched.is_empty();
        st.0.extend(fetched);
    }
    let e = st.0.pop_front();
    if let Some(e) = &e {
        st.1 = e.offset;
    }
    Ok(e)
}

/// Puts the next entry into `entry`: returns 1 with an entry, 0 at the end of the
/// listing, -1 with errno.
#[no_mangle]
pub extern "C" fn easyio_readdir(dir: *mut easyio_dir, entry: *mut easyio_dirent) -> c_int {
    call(-1, || {
        let d = DIRS.get(dir)?;
        let mut out = out(entry, "entry")?;
        let Some(e) = next(&d)? else {
            return Ok(0);
        };
        out.ino = e.entry.ino;
        out.kind = dtype(e.entry.kind);
        let name = e.entry.name.as_bytes();
        let n = name.len().min(EASYIO_NAME_MAX);
        for (o, &b) in out.name.iter_mut().zip(&name[..n]) {
            *o = b as c_char;
        }
        out.name[n] = 0;
        Ok(1)
    })
}

/// Starts the listing again from its first entry.
#[no_mangle]
pub extern "C" fn easyio_rewinddir(dir: *mut easyio_dir) -> c_int {
    call(-1, || {
        let d = DIRS.get(dir)?;
        *d.state.lock() = (VecDeque::new(), 0, false);
        Ok(0)
    })
}

/// Ends a listing and closes its descriptor; the handle is dead afterwards.
#[no_mangle]
pub extern "C" fn easyio_closedir(dir: *mut easyio_dir) -> c_int {
    call(-1, || {
        let d = DIRS.remove(dir)?;
        if let Some(m) = d.mount.upgrade() {
            m.fs.close(d.fd)?;
        }
        Ok(0)
    })
}
