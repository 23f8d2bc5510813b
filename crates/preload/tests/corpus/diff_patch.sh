#!/bin/bash
# needs: bash diff patch cmp
# diff -u and diff -r between files and trees of the mount; patch applying them
# (temporaries renamed into place, backups).
cd "$M" || exit 1
mkdir -p old/d new/d
printf 'a\nb\nc\nd\n' > old/d/f
printf 'a\nB\nc\nd\ne\n' > new/d/f
echo only-old > old/gone
echo only-new > new/added
find old new -exec touch -d @1000000000 {} +
diff -u old/d/f new/d/f > f.patch
echo "diff: $?"
sed 1,2d f.patch
diff -r old new
diff -ruN old new > tree.patch
cp -r old work
cd work || exit 1
patch -p1 < ../tree.patch
cd .. || exit 1
diff -r work new && echo patched tree matches
cp old/d/f backup-test
patch -b backup-test < f.patch
cat backup-test backup-test.orig
patch --dry-run -R backup-test < f.patch
cmp old/d/f new/d/f
echo "cmp: $?"
ls
