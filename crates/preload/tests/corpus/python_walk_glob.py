#!/usr/bin/python3
# needs: python3
# Reading the tree of the mount from Python: os.walk (top-down, bottom-up), os.fwalk
# (descriptors and openat), glob (recursive, relative and absolute), pathlib,
# os.scandir with the entries' types and sizes, realpath.
import glob
import os
import pathlib

M = os.environ["M"]
os.chdir(M)
for d in ["a/b/c", "a/d", "e"]:
    os.makedirs(d)
for i, n in enumerate(["a/x.py", "a/b/y.py", "a/b/c/z.txt", "a/d/w.py", "e/v.txt", "top.py"]):
    with open(n, "w") as f:
        f.write("#" * (i + 1) + "\n")
os.symlink("a/b", "lb")
for root, dirs, files in os.walk("."):
    dirs.sort()
    print("walk", root, sorted(dirs), sorted(files))
for root, dirs, files in os.walk(".", topdown=False):
    print("bottom-up", root, len(dirs), len(files))
for root, dirs, files, fd in os.fwalk("a"):
    dirs.sort()
    print("fwalk", root, sorted(files), [os.stat(n, dir_fd=fd).st_size for n in sorted(files)])
print(sorted(glob.glob("**/*.py", recursive=True)))
print(sorted(glob.glob("*/*")))
print(sorted(glob.glob(os.path.join(M, "a", "*.py"))))
print(sorted(glob.glob("lb/*")))
print(sorted(str(p) for p in pathlib.Path(".").rglob("*.txt")))
print(sorted(p.name for p in pathlib.Path(M).iterdir()))
with os.scandir("a") as it:
    for e in sorted(it, key=lambda e: e.name):
        print("scandir", e.name, e.is_dir(), e.is_file(), e.is_symlink(), e.stat().st_size if e.is_file() else "-")
print(os.path.realpath("lb/c/z.txt"))
print(os.path.getsize("top.py"), os.path.isdir("lb"), os.path.islink("lb"), os.path.exists("nope"))
print(os.getcwd())
os.chdir("a/b")
print(os.getcwd(), sorted(os.listdir("..")))
