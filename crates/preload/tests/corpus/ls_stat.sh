#!/bin/bash
# needs: bash ls stat du touch mkfifo
# ls and stat on the mount: names, -a, -R, -F, -d, -l of files (times fixed; the
# sizes of directories differ by nature, so none is listed long), stat formats,
# du --inodes.
cd "$M" || exit 1
mkdir -p a/b c
echo one > a/one
seq 1 1000 > a/b/two
ln -s a/one link
mkfifo fifo
touch .hidden
chmod 751 c
find . -exec touch -h -d @1000000000 {} +
ls
ls -a
ls -R
ls -F
ls -d */
ls -ln --time-style=+%s a/one a/b/two link fifo
stat -c '%n %F %a %h %s %Y' a/one a/b/two link fifo .hidden
stat -c '%n %F %a %h %Y' a a/b c
stat -L -c '%n %F' link
du --inodes -a . | sort -k2
ls -A a
ls nope
echo "status $?"
