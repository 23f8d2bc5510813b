#!/bin/bash
# needs: bash busybox
# busybox applets (another libc caller than coreutils) on the mount: mkdir, cp -a,
# ls, find, sed -i, tar, mv, rm, wc, stat, ln.
cd "$M" || exit 1
bb=$BUSYBOX
$bb mkdir -p a/b/c
$bb sh -c 'echo hello > a/b/f; echo world > a/g'
$bb cp -a a copy
$bb ls -1 copy copy/b
$bb find . -type f | sort
$bb sed -i 's/hello/HELLO/' a/b/f
$bb cat a/b/f
$bb find a -exec $bb touch -h -d @1000000000 {} +
$bb tar -cf a.tar a
$bb mkdir x
$bb tar -C x -xf a.tar
$bb find x | sort
$bb mv copy/g copy/b/
$bb ln -s b/f copy/link
$bb readlink copy/link
$bb cat copy/link
$bb wc -l a/b/f copy/b/g
$bb stat -c '%n %a %s %F' a/b/f copy/link
$bb rm -r copy/b
$bb find copy | sort
$bb pwd
$bb realpath a/b/f
