#!/usr/bin/python3
# needs: python3
# Python's tempfile in the mount: mkstemp, NamedTemporaryFile (kept and deleted),
# TemporaryDirectory, mkdtemp; the random names are renamed or counted, never printed.
import os
import tempfile

M = os.environ["M"]
fd, p = tempfile.mkstemp(dir=M, prefix="mk", suffix=".tmp")
os.write(fd, b"data\n")
os.close(fd)
print("mkstemp mode", oct(os.stat(p).st_mode & 0o777))
os.rename(p, os.path.join(M, "from-mkstemp"))
with tempfile.NamedTemporaryFile(dir=M, delete=False, mode="w") as t:
    t.write("named\n")
    name = t.name
os.replace(name, os.path.join(M, "from-named"))
with tempfile.NamedTemporaryFile(dir=M) as t:
    t.write(b"gone")
    t.flush()
    print("while open:", len(os.listdir(M)))
print("after close:", len(os.listdir(M)))
with tempfile.TemporaryDirectory(dir=M) as d:
    for i in range(5):
        with open(os.path.join(d, f"f{i}"), "w") as f:
            f.write(str(i))
    os.mkdir(os.path.join(d, "sub"))
    print("in the temporary directory:", sorted(os.listdir(d)))
d = tempfile.mkdtemp(dir=M)
print("mkdtemp mode", oct(os.stat(d).st_mode & 0o777))
os.rename(d, os.path.join(M, "from-mkdtemp"))
tempfile.tempdir = M
with tempfile.TemporaryFile() as t:
    t.write(b"x" * 10000)
    t.seek(0)
    print("TemporaryFile read", len(t.read()))
print(sorted(os.listdir(M)))
