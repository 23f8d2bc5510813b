//! The staging buffers of a connection, and the calls whose data they carry
//! (the buffers themselves: [`crate::staging`]).

use std::sync::atomic::Ordering;

use super::Conn;
use crate::direct::At;
use crate::staging;
use crate::wire::Answer;
#[cfg(doc)]
use crate::wire::Request;

/// A staged read or write as the request says it: descriptor, buffer, offset and
/// length in the buffer, and the file offset (`None`: the descriptor's position).
pub(super) type Staged = (u32, u32, u64, u64, Option<u64>);

/// The largest scratch buffer kept between staged calls, bytes.
const SCRATCH_KEPT: usize = 1 << 20;

impl Conn<'_> {
    /// A new staging buffer of at least `len` bytes: its number, its length and its
    /// descriptor; `EINVAL` for a length of 0 or past the largest, `ENOMEM` past
    /// what a connection may hold.
    pub(super) fn new_staging(
        &mut self,
        len: u64,
    ) -> Result<(u32, u64, std::os::fd::OwnedFd), i32> {
        if len == 0 || len > staging::MAX_BYTES {
            return Err(libc::EINVAL);
        }
        let held: u64 = self.staging.values().map(|b| b.len() as u64).sum();
        if self.staging.len() >= staging::MAX_COUNT || held + len > staging::MAX_TOTAL {
            return Err(libc::ENOMEM);
        }
        let (buffer, fd) =
            staging::Buffer::create(len).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        let len = buffer.len() as u64;
        // The server's limits, over all connections.
        let c = &self.common.counts;
        let bytes = c.staging_bytes.fetch_add(len, Ordering::SeqCst) + len;
        let count = c.staging_buffers.fetch_add(1, Ordering::SeqCst) + 1;
        if bytes > staging::SERVER_BYTES || count > staging::SERVER_COUNT {
            self.uncount_staging(len);
            return Err(libc::ENOMEM);
        }
        // A number no buffer of this connection has (after 2^32 buffers they wrap).
        loop {
            self.last_staging = self.last_staging.wrapping_add(1).max(1);
            if !self.staging.contains_key(&self.last_staging) {
                break;
            }
        }
        let id = self.last_staging;
        self.staging.insert(id, buffer);
        Ok((id, len, fd))
    }

    /// Lets staging buffer `id` go; `EINVAL` if this connection holds none.
    pub(super) fn drop_staging(&mut self, id: u32) -> fs::Result<()> {
        if self.submitted.uses(id) {
            self.settle_all();
        }
        let b = self
            .staging
            .remove(&id)
            .ok_or(fs::Error::Errno(libc::EINVAL))?;
        self.uncount_staging(b.len() as u64);
        Ok(())
    }

    pub(super) fn uncount_staging(&self, len: u64) {
        self.common
            .counts
            .staging_bytes
            .fetch_sub(len, Ordering::SeqCst);
        self.common
            .counts
            .staging_buffers
            .fetch_sub(1, Ordering::SeqCst);
    }

    /// Staging buffer `id` of this connection (`EINVAL` if it holds none).
    pub(super) fn staging(&self, id: u32) -> fs::Result<&staging::Buffer> {
        self.staging.get(&id).ok_or(fs::Error::Errno(libc::EINVAL))
    }

    /// A write from staging buffer `id`, as [`Request::WriteStaged`] says; `EFAULT`
    /// for bytes outside the buffer.
    pub(super) fn write_staged(&mut self, (fd, id, at, len, off): Staged) -> fs::Result<usize> {
        let (fd, o) = self.own(fd)?;
        let fs = self.fs;
        // The bytes are copied out of the shared buffer first: the client may change
        // them meanwhile (tearing its own write, nothing else).
        let mut data = std::mem::take(&mut self.scratch);
        if !self.staging(id)?.read_into(at, len, &mut data) {
            self.scratch = data;
            return Err(fs::Error::Errno(libc::EFAULT));
        }
        let data_ = &data[..];
        // As `write` and `pwrite`: an appending descriptor writes at the end.
        let r = match (off, o.append) {
            (_, true) => self.writing(o.ino, At::End, data.len(), || match off {
                Some(off) => fs.pwrite(fd, data_, off),
                None => fs.write(fd, data_),
            }),
            (Some(off), false) => self.writing(o.ino, At::Offset(off), data.len(), || {
                fs.pwrite(fd, data_, off)
            }),
            (None, false) => {
                self.writing(o.ino, At::Cursor(fd), data.len(), || fs.write(fd, data_))
            }
        };
        self.keep_scratch(data);
        r
    }

    /// Keeps `buf` as the scratch buffer of the next staged call, unless it grew
    /// past what is worth keeping.
    pub(super) fn keep_scratch(&mut self, buf: Vec<u8>) {
        if buf.capacity() <= SCRATCH_KEPT {
            self.scratch = buf;
        }
    }

    /// A submitted write from staging buffer `id`, as [`Request::SubmitStaged`] says;
    /// `EFAULT` for bytes outside the buffer. The answer carries the copy's SN only
    /// to a client that can poll it: one that maps the image and reads directly (not
    /// on emulated slow memory, where a record says done before the model does), of
    /// an engine that stores the records' durable counters (not a device);
    /// otherwise the copy is waited for here.
    pub(super) fn submit_staged(
        &mut self,
        fd: u32,
        (id, at, len): (u32, u64, u64),
        off: u64,
    ) -> fs::Result<Answer> {
        let (fd, o) = self.own(fd)?;
        // Before the page table is touched: a descriptor that cannot write must not
        // send the file's readers to the server.
        if !o.writable {
            return Err(fs::Error::BadFd);
        }
        let fs = self.fs;
        // The copy runs from the server's own copy of the bytes (the client may
        // change the shared ones meanwhile), kept with the copy until it is done.
        let mut data = self.submitted.spare();
        if !self.staging(id)?.read_into(at, len, &mut data) {
            return Err(fs::Error::Errno(libc::EFAULT));
        }
        let at_ = if o.append { At::End } else { At::Offset(off) };
        // SAFETY: `data`'s heap bytes stay allocated and unchanged until the token is
        // done: the token is kept in `self.submitted` with `data` (dropped after it),
        // or waited for below before `data` goes.
        let start = || unsafe { fs.submit_pwrite_borrowed(fd, &data, off) };
        let (token, unpublished) = match self.direct {
            Some(d) => d.submit(fs, o.ino, at_, len, start),
            None => (start(), None),
        };
        let token = match token {
            Ok(t) => t,
            Err(e) => {
                if let (Some(d), Some(u)) = (self.direct, unpublished) {
                    d.finish(fs, u);
                }
                return Err(e);
            }
        };
        let count = data.len() as u64;
        match token.running_sn() {
            Some(sn) if self.may_poll() => {
                self.submitted.keep(token, data, sn, id, unpublished);
                Ok(Answer::Submitted { count, sn })
            }
            _ => {
                let r = token.wait();
                if let (Some(d), Some(u)) = (self.direct, unpublished) {
                    d.finish(fs, u);
                }
                self.submitted.give_back(data);
                Ok(Answer::Submitted {
                    count: r? as u64,
                    sn: 0,
                })
            }
        }
    }

    /// Whether this client can poll the completion records of this server's copies
    /// (see [`Conn::submit_staged`]).
    pub(super) fn may_poll(&self) -> bool {
        self.reads_directly
            && self.direct.is_some()
            && self
                .fs
                .engine()
                .is_some_and(|e| e.publishes_durable_counter())
    }

    /// A read into staging buffer `id`, as [`Request::ReadStaged`] says; `EFAULT` for
    /// bytes outside the buffer.
    pub(super) fn read_staged(&mut self, (fd, id, at, len, off): Staged) -> fs::Result<usize> {
        let (fd, o) = self.own(fd)?;
        if !self.staging(id)?.holds(at, len) {
            return Err(fs::Error::Errno(libc::EFAULT));
        }
        // Read into the server's own memory, then copied into the shared buffer.
        let len = len as usize;
        let mut buf = std::mem::take(&mut self.scratch);
        if buf.len() < len {
            buf.resize(len, 0);
        }
        let read = match off {
            Some(off) => self.fs.pread(fd, &mut buf[..len], off).inspect(|&n| {
                if let (Some(d), true) = (self.direct, o.table) {
                    d.publish_read(self.fs, o.ino, off, n as u64);
                }
            }),
            None => self.fs.read(fd, &mut buf[..len]),
        };
        if let Ok(n) = read {
            let copied = self.staging(id).is_ok_and(|b| b.copy_from(at, &buf[..n]));
            debug_assert!(copied, "the range was checked above");
        }
        self.keep_scratch(buf);
        read
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::testing::*;

    #[test]
    fn a_submitted_write_keeps_its_pages_asking_until_its_copy_is_finished() {
        use crate::direct::{ASK, PAGE0, SIZE, UNKNOWN};
        let pm: Arc<dyn Pmem> = Arc::new(MemPmem::new(64 << 20));
        FileSystem::format(&*pm, &FormatOptions::default()).unwrap();
        let options = MountOptions {
            mode: fs::Mode::Async,
            ..MountOptions::default()
        };
        let fs = FileSystem::mount(pm, options).unwrap().0;
        let direct = Direct::new(1 << 16).unwrap();
        let common = Common::default();
        let mut c = Conn::new(&fs, Cred::root(), &common, Some(&direct));
        let fd = open_rw(&mut c, "/f");
        let len = 8u64 << 20;
        let (id, client) = staging_of(&mut c, len);
        assert!(client.copy_from(0, &vec![0x5a; len as usize]));
        let ino = c.own(fd).unwrap().1.ino;
        let table = direct.table(&fs, ino).unwrap();
        let word = |i: usize| table.words().at(i).load(Ordering::SeqCst);
        let submit = Request::SubmitStaged {
            fd,
            id,
            at: 0,
            len,
            off: 0,
        };
        let mut running = 0;
        for _ in 0..8 {
            let Answer::Submitted { count, sn } = c.answer(submit.clone()) else {
                panic!()
            };
            assert_eq!(count, len);
            if sn != 0 && !c.submitted.is_empty() {
                running += 1;
                // While the copy runs, readers are sent to the server.
                assert_eq!(
                    (word(SIZE), word(PAGE0), word(PAGE0 + 2047)),
                    (UNKNOWN, ASK, ASK)
                );
            }
            assert_eq!(c.answer(Request::Settle { sn, wait: true }), Answer::Done);
            assert!(c.submitted.is_empty());
            assert_eq!(word(SIZE), len);
            assert_table_is_the_files(&fs, &direct, ino);
        }
        assert!(
            running > 0,
            "every copy was done when its write was answered"
        );
        // A buffer given back with a copy running waits for the copy.
        let _ = c.answer(submit.clone());
        assert_eq!(c.answer(Request::DropStaging { id }), Answer::Done);
        assert!(c.submitted.is_empty());
        assert_eq!(c.answer(submit), Answer::Error(libc::EINVAL));
        direct.release(ino);
        drop(c);
        fs.unmount().unwrap();
    }

    #[test]
    fn a_write_by_another_user_clears_setuid_submitted_or_not() {
        let fs = memory_fs();
        let common = Common::default();
        let mut root = Conn::new(&fs, Cred::root(), &common, None);
        let mut user = Conn::new(&fs, Cred::user(1000, 1000), &common, None);
        for (k, submit) in [false, true].into_iter().enumerate() {
            let path = format!("/suid{k}");
            let Answer::Fd(fd) = root.answer(Request::Open {
                path: path.clone(),
                flags: libc::O_CREAT | libc::O_RDWR,
                mode: 0o644,
            }) else {
                panic!()
            };
            assert_eq!(root.answer(Request::Close { fd }), Answer::Done);
            let chmod = Request::Chmod {
                path: path.clone(),
                mode: 0o6777,
            };
            assert_eq!(root.answer(chmod), Answer::Done);
            let Answer::Fd(fd) = user.answer(Request::Open {
                path: path.clone(),
                flags: libc::O_WRONLY,
                mode: 0,
            }) else {
                panic!()
            };
            let (id, _client) = staging_of(&mut user, 4096);
            let written = match submit {
                true => user.answer(Request::SubmitStaged {
                    fd,
                    id,
                    at: 0,
                    len: 100,
                    off: 0,
                }),
                false => user.answer(Request::WriteStaged {
                    fd,
                    id,
                    at: 0,
                    len: 100,
                    off: Some(0),
                }),
            };
            assert!(
                matches!(
                    written,
                    Answer::Submitted { count: 100, .. } | Answer::Count(100)
                ),
                "{written:?}"
            );
            let mode = fs.stat(&path).unwrap().mode;
            assert_eq!(mode & 0o7777, 0o777, "submitted: {submit}");
            assert_eq!(user.answer(Request::Close { fd }), Answer::Done);
        }
        drop((root, user));
        fs.unmount().unwrap();
    }

    #[test]
    fn staged_writes_and_reads_copy_between_the_clients_buffer_and_the_file() {
        let fs = memory_fs();
        let direct = Direct::new(1 << 16).unwrap();
        let common = Common::default();
        let mut c = Conn::new(&fs, Cred::root(), &common, Some(&direct));
        let fd = open_rw(&mut c, "/f");
        let (id, client) = staging_of(&mut c, 10_000);
        assert!(client.len() >= 10_000);
        let data: Vec<u8> = (0..9000u32).map(|i| (i % 251) as u8).collect();
        assert!(client.copy_from(100, &data));
        let write = |c: &mut Conn<'_>, at, len, off| {
            c.answer(Request::WriteStaged {
                fd,
                id,
                at,
                len,
                off,
            })
        };
        assert_eq!(write(&mut c, 100, 9000, Some(50)), Answer::Count(9000));
        // At the position (0 after the open) as `write`: the first 10 bytes again.
        assert_eq!(write(&mut c, 100, 10, None), Answer::Count(10));
        let Answer::Data(got) = c.answer(Request::Pread {
            fd,
            len: 9050,
            off: 0,
        }) else {
            panic!()
        };
        assert_eq!(&got[..10], &data[..10]);
        assert_eq!(&got[10..50], &[0u8; 40]);
        assert_eq!(&got[50..], &data[..]);
        // Read back into the buffer's start: a short read at the end of the file.
        let read = c.answer(Request::ReadStaged {
            fd,
            id,
            at: 0,
            len: 100,
            off: Some(9000),
        });
        assert_eq!(read, Answer::Count(50));
        let mut got = vec![0u8; 50];
        assert!(client.copy_to(0, &mut got));
        assert_eq!(got, &data[8950..]);
        // Ranges outside the buffer, unknown buffers, descriptors not open.
        let past = client.len() as u64;
        assert_eq!(write(&mut c, past, 1, Some(0)), Answer::Error(libc::EFAULT));
        assert_eq!(
            write(&mut c, 1, u64::MAX, Some(0)),
            Answer::Error(libc::EFAULT)
        );
        let read = c.answer(Request::ReadStaged {
            fd,
            id,
            at: past - 1,
            len: 2,
            off: Some(0),
        });
        assert_eq!(read, Answer::Error(libc::EFAULT));
        let other = c.answer(Request::WriteStaged {
            fd,
            id: id + 1,
            at: 0,
            len: 1,
            off: None,
        });
        assert_eq!(other, Answer::Error(libc::EINVAL));
        let closed = c.answer(Request::WriteStaged {
            fd: fd + 7,
            id,
            at: 0,
            len: 1,
            off: None,
        });
        assert_eq!(closed, Answer::Error(libc::EBADF));
        assert_eq!(c.answer(Request::DropStaging { id }), Answer::Done);
        assert_eq!(write(&mut c, 0, 1, Some(0)), Answer::Error(libc::EINVAL));
        assert_eq!(
            c.answer(Request::DropStaging { id }),
            Answer::Error(libc::EINVAL)
        );
    }

    #[test]
    fn a_connection_holds_staging_buffers_within_its_limits() {
        let fs = memory_fs();
        let common = Common::default();
        let mut c = Conn::new(&fs, Cred::root(), &common, None);
        let ask = |c: &mut Conn<'_>, len| {
            c.answer_bytes(&wire::frame(&Request::Staging { len }).unwrap()[4..])
                .0
        };
        assert_eq!(ask(&mut c, 0), Answer::Error(libc::EINVAL));
        assert_eq!(
            ask(&mut c, staging::MAX_BYTES + 1),
            Answer::Error(libc::EINVAL)
        );
        for _ in 0..staging::MAX_TOTAL / staging::MAX_BYTES {
            assert!(matches!(
                ask(&mut c, staging::MAX_BYTES),
                Answer::Staging { .. }
            ));
        }
        assert_eq!(ask(&mut c, 1), Answer::Error(libc::ENOMEM));
        // And the server's limits over all connections: buffers of other connections
        // count against this one's.
        assert_eq!(common.counts.staging_buffers.load(Ordering::SeqCst), 4);
        let mut others: Vec<Conn<'_>> = Vec::new();
        let mut made = 4;
        while made < staging::SERVER_COUNT {
            if others
                .last()
                .is_none_or(|o| o.staging.len() == staging::MAX_COUNT)
            {
                others.push(Conn::new(&fs, Cred::root(), &common, None));
            }
            let o = others.last_mut().unwrap();
            assert!(
                matches!(ask(o, 4096), Answer::Staging { .. }),
                "buffer {made}"
            );
            made += 1;
        }
        let mut last = Conn::new(&fs, Cred::root(), &common, None);
        assert_eq!(ask(&mut last, 4096), Answer::Error(libc::ENOMEM));
        // A connection that ends gives its buffers back.
        others.pop();
        assert!(matches!(ask(&mut last, 4096), Answer::Staging { .. }));
        drop((others, last));
        // Giving one back makes room again.
        let id = *c.staging.keys().next().unwrap();
        assert_eq!(c.answer(Request::DropStaging { id }), Answer::Done);
        assert!(matches!(ask(&mut c, 4096), Answer::Staging { .. }));
    }
}
