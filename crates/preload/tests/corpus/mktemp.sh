#!/bin/bash
# needs: bash mktemp stat mv rmdir ls wc
# mktemp (mkstemp, mkdtemp) in the mount, absolute and relative, through TMPDIR; the
# random names are renamed or counted.
f=$(mktemp -p "$M" tmp.XXXXXX) || exit 1
stat -c '%a %s' "$f"
echo data > "$f"
mv "$f" "$M/file"
d=$(mktemp -d -p "$M") || exit 1
stat -c '%a %F' "$d"
touch "$d/inside"
mv "$d" "$M/dir"
cd "$M" || exit 1
g=$(mktemp rel.XXXXXXXX) || exit 1
case $g in rel.????????) echo "relative name";; *) echo "bad name";; esac
mv "$g" rel
h=$(TMPDIR=$M mktemp) || exit 1
case $h in "$M"/tmp.*) echo "in TMPDIR";; *) echo "not in TMPDIR: $h";; esac
rm "$h"
for i in 1 2 3 4 5; do mktemp -p "$M/dir" >/dev/null; done
ls dir | wc -l
rm dir/tmp.*
mktemp -p "$M/missing" 2>&1 | sed 's/tmp\.[A-Za-z0-9]*/tmp.X/'
ls
