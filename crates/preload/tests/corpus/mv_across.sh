#!/bin/bash
# needs: bash mv mkdir ls find cat
# mv across directories of the mount: files, directories, onto existing names,
# -t, -T, -n, -b, into itself, a non-empty target.
cd "$M" || exit 1
mkdir -p a/d/e b c
echo f > a/f
echo g > a/g
echo e > a/d/e/x
echo old > b/f
mv a/f b/
cat b/f
mv a/d b/
mv -t c a/g
mv b/d/e/x .
mkdir -p full/d
echo y > full/d/y
mkdir -p b/empty
mv b/empty full/d 2>&1 | sed 's/ (.*//'
mv full/d b/d 2>&1
echo "status $?"
mv -n x c/g
cat c/g
mv -b x c/g
ls c
mv -T b/d moved-d
mv c c/inside 2>&1
echo "status $?"
mv nope somewhere
echo "status $?"
mv a/* b/ 2>&1
find . | sort
