//! What every command of the `easyio` binary shares, file commands and benchmarks
//! alike: the stop flag a signal sets and the handlers that set it ([`signals`]),
//! usage errors and size arguments ([`args`]), where a command's image is
//! ([`image`]), files written whole or not at all
//! ([`output`]), progress on a terminal ([`progress`]), tables and JSON ([`report`]),
//! standard input a signal interrupts ([`stdin`]), and times and owners as `ls -l` and
//! `stat(1)` print them ([`dates`], [`owners`]).
//!
//! It sits beside the file system, not above it: it imports no crate of the workspace,
//! so the everyday commands (`mount`, `serve`, the file commands) use it without
//! linking the benchmarks.

#![warn(missing_docs)]
#![warn(clippy::too_many_lines)]

pub mod args;
pub mod dates;
pub mod image;
pub mod output;
pub mod owners;
pub mod progress;
pub mod report;
pub mod signals;
pub mod stdin;
