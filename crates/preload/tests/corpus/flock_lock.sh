#!/bin/bash
# needs: bash flock
# flock(1) on files of the mount between processes: a held lock makes -n fail in
# another process, and is free again when released.
cd "$M" || exit 1
flock lockfile -c 'echo locked and ran'
(
    flock -n 9 || { echo "could not lock"; exit 1; }
    flock -n lockfile -c 'echo "second lock granted: wrong"' || echo "second process: busy"
    flock -n -s lockfile -c 'echo "shared lock granted: wrong"' || echo "shared: busy"
) 9> lockfile
flock -n lockfile -c 'echo free again'
exec 8> other
flock -s 8
flock -n -s other -c 'echo two shared locks'
flock -n other -c 'echo "exclusive over shared: wrong"' || echo "exclusive: busy"
exec 8>&-
ls
