#!/bin/bash
# needs: bash install stat cat
# install: modes, -d, -D, -T, -t, -C, -b, and errors.
cd "$M" || exit 1
printf 'payload\n' > src
install -m 644 src dst
install -d -m 750 a/b/c
install -D -m 600 src deep/x/y
install -m 755 -T src exe
install -m 640 -t a/b src
install -C -m 644 src dst && echo "install -C"
echo newer > src
install -b -m 644 src dst
install -m 644 src missing-dir/file
echo "status $?"
install -d a/b/c
stat -c '%n %a %F %s' dst dst~ deep/x/y exe a/b/src
# (no sizes of directories: easyio reports 0 bytes for one, tmpfs a size)
stat -c '%n %a %F' a a/b a/b/c deep deep/x
cat dst dst~
