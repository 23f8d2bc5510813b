#!/usr/bin/python3
# needs: python3
# shutil in the mount: copytree with and without symlinks, copy2, copyfile, move of a
# directory across directories, rmtree, make_archive (fixed times).
import os
import shutil

M = os.environ["M"]
os.chdir(M)
os.makedirs("src/a/b")
os.makedirs("src/empty")
for n, body in [("src/top", "top\n"), ("src/a/one", "one\n" * 100), ("src/a/b/two", "two\n")]:
    with open(n, "w") as f:
        f.write(body)
os.chmod("src/a/one", 0o600)
os.symlink("one", "src/a/rel-link")
os.symlink(os.path.join(M, "src/top"), "src/abs-link")
for root, dirs, files in os.walk("src"):
    for n in dirs + files:
        os.utime(os.path.join(root, n), (1000000000, 1000000000), follow_symlinks=False)
shutil.copytree("src", "dst", symlinks=True)
shutil.copytree("src", "followed")
shutil.copy2("src/a/one", "one-copy2")
shutil.copyfile("src/top", "top-copy")
shutil.copy("src/a/b/two", "dst/")
print(os.readlink("dst/a/rel-link"), os.readlink("dst/abs-link"))
print(os.path.islink("followed/abs-link"), open("followed/abs-link").read().strip())
os.mkdir("elsewhere")
shutil.move("followed/a", "elsewhere/")
shutil.move("top-copy", "elsewhere/renamed")
shutil.rmtree("followed")
print(sorted(os.listdir(".")))
st = os.stat("one-copy2")
print(oct(st.st_mode & 0o777), st.st_mtime_ns)
print(shutil.disk_usage(".").total > 0)
for root, dirs, files in os.walk("dst"):
    for n in dirs + files:
        os.utime(os.path.join(root, n), (1000000000, 1000000000), follow_symlinks=False)
os.unlink("dst/abs-link")  # its target is the path of $M, in the tar header's checksum
os.utime("dst", (1000000000, 1000000000))
archive = shutil.make_archive("arch", "tar", root_dir=".", base_dir="dst")
print(os.path.basename(archive), os.path.getsize(archive) > 0)
shutil.unpack_archive(archive, "unpacked")
print(sorted(os.listdir("unpacked/dst")))
