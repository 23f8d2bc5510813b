//! `capi`: the C ABI of easyio — `libeasyio.so` / `libeasyio.a`, described by the
//! generated header `include/easyio.h` and found through `pkg-config easyio`.
//!
//! Conventions of every call, as in libc: a call returns 0 on success or -1 with
//! `errno` set; a call that answers a number (bytes, a descriptor, an offset) returns
//! it (>= 0) or -1 with `errno`; a call that answers a handle returns it or NULL with
//! `errno`. [`easyio_last_error`] gives the message of the last failure on the calling
//! thread. Nothing crosses the boundary unchecked: a NULL pointer is EINVAL, a handle
//! that is not live (never made, closed, unmounted) is EBADF, and a Rust panic is
//! caught and turned into EIO with its message.
//!
//! Handles (`easyio_fs`, `easyio_dir`, `easyio_rt`, `easyio_uthread`) are only ever
//! numbers looked up in tables of live handles, never dereferenced nor reused, so a
//! stale or made-up pointer is an error, not a crash. Descriptors are numbers of one
//! `easyio_fs` (the lowest free one, as the kernel gives them), so a shim can map its
//! own kernel descriptor numbers onto them.
//!
//! Inside a uthread of an easyio runtime ([`easyio_rt_start`], [`easyio_spawn`]) the
//! blocking calls yield while their copy runs, as the Rust calls do.
//!
//! # Place in the layers
//!
//! A door: it imports `fs` (and `pmem`, `mover`, `engine` to set a mount up), `rt`,
//! and `serve` for a server's connection (`easyio_connect`); nothing below imports it. It must not add behaviour of its own to the file
//! system: every call is one call of `fs` with its arguments converted.

#![warn(missing_docs)]
#![warn(clippy::too_many_lines)]
// The exported names are the C names of the header (`easyio_fs`, `easyio_stat`).
#![allow(non_camel_case_types)]

mod aio;
mod args;
mod buffers;
pub mod descriptors;
mod dir;
mod error;
mod files;
mod handles;
mod mount;
mod names;
mod requests;
mod uthread;
mod xattr;

pub use aio::*;
pub use buffers::*;
pub use dir::*;
pub use error::easyio_last_error;
pub use files::*;
pub use mount::*;
pub use names::*;
pub use uthread::*;
pub use xattr::*;
