//! Constants of the C interface.

use std::ffi::c_int;

/// `dirfd` of the `*at` calls meaning the root of the image (the value of Linux's
/// `AT_FDCWD`: an image has no current directory, so relative paths start at its root).
pub const EASYIO_AT_ROOT: c_int = -100;

/// Longest name of a directory entry, in bytes (without the NUL).
pub const EASYIO_NAME_MAX: usize = 255;

/// Size of [`crate::easyio_dirent::name`]: the longest name and its NUL.
pub const EASYIO_DIRENT_NAME_SIZE: usize = 256;

const _: () = assert!(EASYIO_DIRENT_NAME_SIZE == EASYIO_NAME_MAX + 1);
