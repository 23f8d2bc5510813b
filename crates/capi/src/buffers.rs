//! I/O buffers a program asks the library for (`easyio_buffer_alloc`): on a
//! server's connection, staging buffers the server also maps, so that reads into
//! them and writes from them make no copy through the connection (zero-copy); on an
//! image mounted here, plain page-aligned memory.

use std::alloc::Layout;
use std::ffi::{c_int, c_void};

use crate::error::{call, Failure};
use crate::mount::{easyio_fs, mount_of, Target};

/// A failure of the server's connection, with its errno.
fn served(e: easyio_serve::Error) -> Failure {
    Failure::new(e.errno(), e.to_string())
}

/// The alignment of every buffer: a page.
const ALIGN: usize = 4096;

/// Allocates an I/O buffer of at least `len` bytes, page-aligned, for the calls of
/// `fs`. On a server's connection ([`crate::easyio_connect`]) it is memory the server
/// also maps: `easyio_pwrite`, `easyio_write`, `easyio_pread` and `easyio_read` of a
/// buffer inside it make no copy through the connection. A buffer is at most 64 MiB
/// (EINVAL past that, or for 0); a connection holds at most 16 buffers and 256 MiB,
/// and the server a limit over all its clients (ENOMEM past those). Other calls given
/// memory inside it (and the data calls of another handle) work on a private copy;
/// a path or name inside it is EINVAL. Like any shared
/// mapping it is shared with the children the process forks. On an image mounted in
/// this process it is plain memory. Free it with [`easyio_buffer_free`] on the same
/// handle; what is left is freed by `easyio_unmount`. Returns NULL with errno on
/// failure.
#[no_mangle]
pub extern "C" fn easyio_buffer_alloc(fs: *mut easyio_fs, len: usize) -> *mut c_void {
    call(std::ptr::null_mut(), || {
        let m = mount_of(fs)?;
        if len == 0 {
            return Err(Failure::new(libc::EINVAL, "a buffer of 0 bytes"));
        }
        match &m.fs {
            Target::Server(r) => {
                let (at, _) = r.0.map_staging(len).map_err(served)?;
                Ok(at.as_ptr().cast())
            }
            Target::Here(_) => {
                let layout = Layout::from_size_align(len, ALIGN)
                    .map_err(|_| Failure::new(libc::ENOMEM, "a buffer too large"))?;
                // SAFETY: `layout` has a non-zero size (checked above).
                let at = unsafe { std::alloc::alloc(layout) };
                if at.is_null() {
                    return Err(Failure::new(libc::ENOMEM, "out of memory"));
                }
                m.buffers.0.lock().insert(at as usize, layout);
                Ok(at.cast())
            }
        }
    })
}

/// Frees a buffer [`easyio_buffer_alloc`] gave out on the same handle. Returns 0, or
/// -1 with errno (EINVAL: `buf` is not such a buffer).
#[no_mangle]
pub extern "C" fn easyio_buffer_free(fs: *mut easyio_fs, buf: *mut c_void) -> c_int {
    call(-1, || {
        let m = mount_of(fs)?;
        match &m.fs {
            // SAFETY: the C caller gives the buffer back and uses it no more, as the
            // header asks; a buffer of `easyio_buffer_alloc` is never a `StagingBuf`.
            Target::Server(r) => unsafe { r.0.release_staging(buf.cast()) }.map_err(served)?,
            Target::Here(_) => {
                let layout = m.buffers.0.lock().remove(&(buf as usize)).ok_or_else(|| {
                    Failure::new(libc::EINVAL, "not a buffer easyio_buffer_alloc gave out")
                })?;
                // SAFETY: allocated by `easyio_buffer_alloc` with this layout; removed
                // from the map, so freed once.
                unsafe { std::alloc::dealloc(buf.cast(), layout) };
            }
        }
        Ok(0)
    })
}
