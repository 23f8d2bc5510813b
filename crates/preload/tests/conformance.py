#!/usr/bin/python3
"""Seeded random sequences of file-system calls, made with Python's os module (libc's
calls, so the shim sees them), printed one line per call: run once in a tmpfs
directory without the shim and once in the mount under it, the outputs must be the
same. Calls are made by root and by two other users (a forked child that changes
its ids first, inheriting the parent's descriptors), by absolute paths and by
relative ones after a chdir into a directory of the tree.

    conformance.py ROOT SEED STEPS
"""
import errno
import os
import random
import stat
import sys

ROOT, SEED, STEPS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
USERS = {"root": (0, 0), "u1": (1000, 1000), "u2": (1001, 1001)}
PATHS = ["f0", "f1", "d0", "d0/f2", "d0/d1", "d0/d1/f3", "sh", "sh/f4", "sh/f5",
         "sh/d2", "l0", "d0/l1"]
DIRS = ["d0", "d0/d1", "sh", "sh/d2"]
SLOTS = 4
rng = random.Random(SEED)
slots = [None] * SLOTS


def err(e):
    return errno.errorcode.get(e.errno, str(e.errno))


def show(st):
    kind = stat.S_IFMT(st.st_mode)
    names = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "link"}
    size = st.st_size if kind == stat.S_IFREG else "-"
    return (f"{names.get(kind, kind)} {oct(stat.S_IMODE(st.st_mode))} "
            f"nlink={st.st_nlink if kind != stat.S_IFDIR else '-'} size={size} "
            f"uid={st.st_uid} gid={st.st_gid}")


def pick_path():
    return rng.choice(PATHS)


def place(p, cwd):
    """Path `p` (relative to ROOT) as the call names it from `cwd` (None: ROOT's
    absolute path)."""
    if cwd is None:
        return os.path.join(ROOT, p)
    return os.path.relpath(os.path.join(ROOT, p), os.path.join(ROOT, cwd))


def random_call():
    """One call: (text, function of (cwd) that makes it and returns what to print)."""
    k = rng.randrange(22)
    p, q = pick_path(), pick_path()
    if k in (0, 1):
        flags = rng.choice([os.O_RDONLY, os.O_WRONLY, os.O_RDWR])
        for bit, odds in [(os.O_CREAT, 2), (os.O_EXCL, 4), (os.O_TRUNC, 4),
                          (os.O_APPEND, 4), (os.O_DIRECTORY, 8), (os.O_NOFOLLOW, 8)]:
            if rng.randrange(odds) == 0:
                flags |= bit
        mode = rng.choice([0o644, 0o600, 0o666, 0o400])
        s = rng.randrange(SLOTS)

        def do(c):
            if slots[s] is not None:
                os.close(slots[s])
                slots[s] = None
            slots[s] = os.open(place(p, c), flags, mode)
            return "ok"
        return f"open {p} {flags:#o} {mode:#o} -> slot {s}", do
    if k == 2:
        s = rng.randrange(SLOTS)

        def do(c):
            if slots[s] is None:
                return "empty"
            fd, slots[s] = slots[s], None
            os.close(fd)
            return "ok"
        return f"close slot {s}", do
    if k in (3, 4):
        s, off, n = rng.randrange(SLOTS), rng.choice([0, 1, 7, 4096, 5000]), rng.randrange(1, 64)
        b = bytes([97 + rng.randrange(26)]) * n

        def do(c):
            if slots[s] is None:
                return "empty"
            return os.pwrite(slots[s], b, off)
        return f"pwrite slot {s} {n}@{off}", do
    if k == 5:
        s, off = rng.randrange(SLOTS), rng.choice([0, 3, 4096])

        def do(c):
            if slots[s] is None:
                return "empty"
            return os.pread(slots[s], 80, off)
        return f"pread slot {s} @{off}", do
    if k == 6:
        n = rng.choice([0, 5, 9000])
        return f"truncate {p} {n}", lambda c: os.truncate(place(p, c), n)
    if k == 7:
        s, n = rng.randrange(SLOTS), rng.choice([0, 2, 100])

        def do(c):
            if slots[s] is None:
                return "empty"
            return os.ftruncate(slots[s], n)
        return f"ftruncate slot {s} {n}", do
    if k == 8:
        return f"rename {p} {q}", lambda c: os.rename(place(p, c), place(q, c))
    if k == 9:
        return f"link {p} {q}", lambda c: os.link(place(p, c), place(q, c), follow_symlinks=False)
    if k == 10:
        # (No target climbs above the tree: the kernel would leave it, the mount not.)
        t = rng.choice(["f0", "d0", "nowhere", "d0/../f1", "sh/d2/.."])
        return f"symlink {t} {p}", lambda c: os.symlink(t, place(p, c))
    if k == 11:
        return f"unlink {p}", lambda c: os.unlink(place(p, c))
    if k == 12:
        mode = rng.choice([0o755, 0o700, 0o1777])
        return f"mkdir {p} {mode:#o}", lambda c: os.mkdir(place(p, c), mode)
    if k == 13:
        return f"rmdir {p}", lambda c: os.rmdir(place(p, c))
    if k == 14:
        return f"stat {p}", lambda c: show(os.stat(place(p, c)))
    if k == 15:
        return f"lstat {p}", lambda c: show(os.lstat(place(p, c)))
    if k == 16:
        mode = rng.choice([0o644, 0o600, 0o755, 0o700, 0o1777, 0o4755, 0o000])
        return f"chmod {p} {mode:#o}", lambda c: os.chmod(place(p, c), mode)
    if k == 17:
        u, g = rng.choice([-1, 0, 1000, 1001]), rng.choice([-1, 0, 1000, 1001])
        return f"lchown {p} {u} {g}", lambda c: os.lchown(place(p, c), u, g)
    if k == 18:
        m = rng.choice([os.R_OK, os.W_OK, os.X_OK, os.R_OK | os.W_OK, os.F_OK])
        return f"access {p} {m}", lambda c: os.access(place(p, c), m)
    if k == 19:
        return f"listdir {p}", lambda c: sorted(os.listdir(place(p, c)))
    if k == 20:
        return f"readlink {p}", lambda c: os.readlink(place(p, c))
    s = rng.randrange(SLOTS)

    def do(c):
        if slots[s] is None:
            return "empty"
        return show(os.fstat(slots[s]))
    return f"fstat slot {s}", do


def attempt(line, call, cwd):
    """Makes `call` from `cwd` (None: ROOT) and prints its result after `line`."""
    try:
        if cwd:
            os.chdir(os.path.join(ROOT, cwd))
        print(line + str(call(cwd)))
    except OSError as e:
        print(line + err(e))


def run(text, call, who, cwd):
    """Makes `call` as `who` from `cwd` and prints its result."""
    line = f"{who:4} {('cd ' + cwd) if cwd else 'abs':10} {text}: "
    if who == "root":
        attempt(line, call, cwd)
        os.chdir(ROOT)
        return
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        try:
            uid, gid = USERS[who]
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            os.umask(0o022)
            attempt(line, call, cwd)
        finally:
            sys.stdout.flush()
            os._exit(0)
    os.waitpid(pid, 0)


def main():
    os.umask(0o022)
    os.chdir(ROOT)
    os.mkdir("sh", 0o777)
    os.chmod("sh", 0o1777)
    stop = int(os.environ.get("CONFORMANCE_STOP", STEPS))
    for i in range(min(STEPS, stop)):
        text, call = random_call()
        who = rng.choice(["root", "root", "u1", "u2"])
        cwd = rng.choice([None, None, None] + DIRS)
        run(text, call, who, cwd)
    for s in range(SLOTS):
        if slots[s] is not None:
            os.close(slots[s])
    # The tree at the end, walked from ROOT.
    for top, dirs, files in os.walk(".", followlinks=False):
        dirs.sort()
        for name in sorted(dirs + files):
            p = os.path.join(top, name)
            st = os.lstat(p)
            link = " -> " + os.readlink(p) if stat.S_ISLNK(st.st_mode) else ""
            print("tree", p, show(st) + link)


main()
