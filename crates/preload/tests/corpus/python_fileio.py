#!/usr/bin/python3
# needs: python3
# Python's file calls in the mount: open modes (r+, a, x, w+b), seek/tell, truncate,
# readline, pread/pwrite, O_EXCL, fsync, link/symlink, utime, flock, read-only and
# private mmap, os.sendfile between files of the mount.
import fcntl
import mmap
import os

M = os.environ["M"]
os.chdir(M)
with open("text", "w") as f:
    f.write("line one\nline two\nline three\n")
with open("text", "r+") as f:
    print(repr(f.readline()))
    f.seek(0, 2)
    f.write("line four\n")
    print(f.tell())
with open("text", "a") as f:
    f.write("appended\n")
try:
    open("text", "x")
except FileExistsError as e:
    print("x:", e.strerror)
with open("bin", "w+b") as f:
    f.write(bytes(range(256)) * 40)
    f.seek(1000)
    print(f.read(4).hex())
    f.truncate(5000)
    f.seek(0, 2)
    print(f.tell())
fd = os.open("raw", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o640)
os.pwrite(fd, b"world", 6)
os.pwrite(fd, b"hello ", 0)
print(os.pread(fd, 11, 0))
os.fsync(fd)
os.ftruncate(fd, 8)
print(os.fstat(fd).st_size, oct(os.fstat(fd).st_mode & 0o777))
os.close(fd)
try:
    os.open("raw", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
except FileExistsError as e:
    print("O_EXCL:", e.strerror)
os.link("raw", "raw-link")
os.symlink("raw", "raw-sym")
print(os.stat("raw").st_nlink, os.readlink("raw-sym"), os.lstat("raw-sym").st_size)
os.utime("raw", ns=(1000000000123456789, 1000000000987654321))
st = os.stat("raw")
print(st.st_atime_ns, st.st_mtime_ns)
with open("raw", "rb") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    fcntl.flock(f, fcntl.LOCK_UN)
    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    print(m[:8])
    m.close()
    c = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    c[0:5] = b"HELLO"
    print(c[:8])
    c.close()
with open("raw", "rb") as f:
    print(f.read())
src = os.open("bin", os.O_RDONLY)
dst = os.open("sent", os.O_WRONLY | os.O_CREAT, 0o644)
print(os.sendfile(dst, src, 100, 1000))
os.close(src)
os.close(dst)
with open("text") as f:
    for n, line in enumerate(f):
        print(n, line.rstrip())
os.rename("text", "renamed")
os.unlink("raw-link")
print(sorted(os.listdir(".")))
