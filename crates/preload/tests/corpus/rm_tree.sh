#!/bin/bash
# needs: bash rm rmdir mkdir find seq wc
# Removing trees: rm -r of 300 files (readdir while unlinking), rm -d, rmdir -p,
# rm -f of a missing file, errors.
cd "$M" || exit 1
for d in $(seq 1 10); do
    mkdir -p "tree/d$d/sub"
    for f in $(seq 1 15); do echo "$d $f" > "tree/d$d/f$f"; echo x > "tree/d$d/sub/s$f"; done
done
find tree -type f | wc -l
rm -r tree/d1
find tree -type f | wc -l
mkdir -p a/b/c
rmdir -p a/b/c
ls
mkdir e
rm -d e
rm -f missing
echo "rm -f: $?"
rm missing
echo "status $?"
mkdir keep
rm keep
echo "status $?"
rmdir tree
echo "status $?"
rm -rf tree
ls
