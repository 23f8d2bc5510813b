#!/usr/bin/python3
# needs: python3 cat ls sort echo
# Python starting programs with the current directory in the mount and with files of
# the mount as their standard streams; a fork sharing a descriptor's offset.
import os
import subprocess

M = os.environ["M"]
os.chdir(M)
with open("in", "w") as f:
    f.write("pear\napple\nfig\n")
print(subprocess.run(["cat", "in"], capture_output=True, text=True).stdout, end="")
with open("out", "w") as f:
    subprocess.run(["echo", "to a file of the mount"], stdout=f, check=True)
with open("in") as i, open("sorted", "w") as o:
    subprocess.run(["sort"], stdin=i, stdout=o, check=True)
print(open("sorted").read(), end="")
print(subprocess.run(["ls"], capture_output=True, text=True).stdout, end="")
r = subprocess.run(["ls", "nope"], capture_output=True, text=True)
print(r.returncode, r.stderr.strip())
p = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=open("piped", "w"))
p.communicate(b"through a pipe\n")
print(open("piped").read(), end="")
fd = os.open("shared", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
pid = os.fork()
if pid == 0:
    os.write(fd, b"child\n")
    os._exit(0)
os.waitpid(pid, 0)
os.write(fd, b"parent\n")
os.close(fd)
print(open("shared").read(), end="")
print(subprocess.run("echo $PWD; pwd", shell=True, capture_output=True, text=True).stdout, end="")
print(subprocess.run(["sh", "-c", "cat in | sort -r > rsorted; cat rsorted"], capture_output=True, text=True).stdout, end="")
