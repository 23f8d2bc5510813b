//! Standard input that a stopping signal interrupts (see [`crate::signals`]).

use std::io::Read;

/// How long a wait for standard input lasts before it looks at the stop flag again
/// (a signal normally ends the wait at once; this covers one that arrives just before
/// it starts).
const STDIN_SLICE: rustix::time::Timespec = rustix::time::Timespec {
    tv_sec: 0,
    tv_nsec: 100_000_000,
};

/// Standard input, read so that a stopping signal ends a wait for input: the signal
/// handlers restart an interrupted read(2), so each read first waits in poll(2), which
/// a signal always interrupts, and looks at the stop flag between waits. It reads the
/// descriptor itself: no buffer of its own holds input that poll would not see.
pub struct Stdin;

impl Read for Stdin {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use rustix::event::{poll, PollFd, PollFlags};
        let fd = std::os::fd::AsFd::as_fd(&std::io::stdin()).try_clone_to_owned()?;
        loop {
            crate::signals::check().map_err(std::io::Error::other)?;
            let mut fds = [PollFd::new(&fd, PollFlags::IN)];
            match poll(&mut fds, Some(&STDIN_SLICE)) {
                // Data, end of file, or an error the read reports.
                Ok(n) if n > 0 => return Ok(rustix::io::read(&fd, &mut *buf)?),
                Ok(_) | Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}
