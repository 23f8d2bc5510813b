#!/bin/bash
# needs: bash rsync find touch
# rsync -a between directories of the mount (sender, generator and receiver are
# three processes; files arrive as temporaries renamed into place): hard links,
# symlinks, modes, times, --delete, --checksum, --inplace, --link-dest, --backup.
cd "$M" || exit 1
mkdir -p src/d/e
for i in 1 2 3; do seq 1 $((i * 1000)) > "src/d/f$i"; done
echo top > src/top
ln src/top src/top-hard
ln -s d/f1 src/sym
chmod 700 src/d/e
find src -exec touch -h -d @1000000000 {} +
rsync -aHi src/ dst/
find dst -printf '%P %y %m %n %s %T@ %l\n' | grep -v ' d ' | sort
echo changed > src/top
touch -d @1000000000 src/top
rsync -aHi src/ dst/
rsync -aHic src/ dst/
cat dst/top
rm src/d/f2
rsync -aHi --delete src/ dst/
echo grown >> src/d/f3
rsync -ai --inplace src/ dst/
rsync -aHi --link-dest="$M/dst" src/ linked/
stat -c '%h %n' dst/d/f1 linked/d/f1
echo again > src/d/f1
rsync -ai --backup --suffix=.bak src/d/ dst/d/
ls dst/d
rsync -a --stats src/ stats/ | grep -E '^Number of (files|created|regular)'
