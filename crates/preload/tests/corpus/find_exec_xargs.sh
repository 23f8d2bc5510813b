#!/bin/bash
# needs: bash find xargs sha256sum wc sort mkdir touch
# find -exec (+ and \;), -execdir, -delete, -newer, -perm, -size, and xargs
# (-0, -n, -P2) on the mount.
cd "$M" || exit 1
mkdir -p t/a/b t/c t/empty1 t/empty2/inner
for i in $(seq 1 20); do
    printf '%*s\n' "$((i * 100))" x > "t/a/f$i.txt"
done
for i in 1 2 3; do echo "$i" > "t/c/g$i.log"; done
chmod 600 t/a/f1.txt t/c/g1.log
touch -d @1000000000 t/c/g2.log
find t -type f -name '*.txt' -exec sha256sum {} + | sort -k2
find t -type f -print0 | sort -z | xargs -0 wc -c | tail -n 1
find t -name '*.log' -exec mv {} {}.old \;
find t -perm 600 | sort
find t -type f -size +1k | sort | head -n 5
find t -type f -newer t/c/g2.log.old -name 'g*' | sort
find t -name 'f1*.txt' -execdir sh -c 'echo "$PWD" "$1"' _ {} \; | sort
find t -empty | sort
find t -empty -type d -delete
find t -type d | sort
find t -name 'f2*' -print0 | xargs -0 -n 2 -P 2 rm -v | sort
find t -name 'f1?.txt' | xargs -I{} cp {} {}.copy
find t | sort
find t -maxdepth 1 -printf '%p %y %m\n' | sort
