#!/bin/bash
# needs: bash ln readlink stat cat ls tr wc
# ln and ln -s: hard link counts, relative and absolute targets (an absolute target
# in the mount), -f, -r, -n, -T, a dangling link, a link to a directory, errors.
cd "$M" || exit 1
echo target > t
mkdir dir
echo in-dir > dir/file
ln t hard
ln t dir/hard2
stat -c '%n %h' t hard dir/hard2
ln -s t sym
ln -s "$M/t" abs
ln -s dir dirlink
ln -s nowhere dangling
ln -sr dir/file rel
readlink sym abs dirlink dangling rel
readlink -f abs dirlink/file
cat sym abs rel dirlink/file
ls dirlink/
cat dangling
ln -s other sym
echo "status $?"
ln -sf dir/file sym
readlink sym
ln -sfn t dirlink
readlink dirlink
ln -T t dir
echo "status $?"
ln dir dirhard
echo "status $?"
test -L sym && test ! -L t && echo "test -L agrees"
stat -c '%n %F %s' sym dangling
# The size of a link is its target's length (that of abs differs with $M's).
[ "$(stat -c %s abs)" -eq "$(readlink abs | tr -d '\n' | wc -c)" ] && echo "abs: size is the target's length"
rm t
cat hard
stat -c '%h' hard
ls
