#!/bin/bash
# needs: bash tar gzip cmp find
# tar c | tar x between directories of the mount (hard links, symlinks, modes, times),
# a deterministic compressed archive, listing, --diff, extraction over existing files.
cd "$M" || exit 1
mkdir -p src/d/e dst
for i in 1 2 3; do seq 1 $((i * 500)) > "src/d/f$i"; done
echo top > src/top
ln src/top src/top-hard
ln -s d/f1 src/sym
chmod 750 src/d/e
chmod 600 src/d/f2
find src -exec touch -h -d @1000000000 {} +
tar -C src -cf - . | tar -C dst -xpf -
find dst -printf '%P %y %m %n %s %T@ %l\n' | grep -v ' d ' | sort
find dst -type d -printf '%P %m %T@\n' | sort
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - src | gzip -n > a.tgz
gzip -l a.tgz | tail -n 1
tar -tvzf a.tgz
tar -C src --diff -f <(tar -C src -cf - .) && echo no differences
mkdir again
tar -C again -xzf a.tgz
tar -C again -xzf a.tgz --overwrite
cmp src/d/f3 again/src/d/f3 && echo same
tar -czf - dst | tar -tzf - | sort | head -n 4
