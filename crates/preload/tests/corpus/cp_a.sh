#!/bin/bash
# needs: bash cp find stat ln mkfifo touch
# cp -a (hard links, symlinks, a fifo, modes, times kept), cp -al (a tree of hard
# links), cp -r --preserve, cp -u, cp -s, cp from the host into the mount.
cd "$M" || exit 1
mkdir -p src/d/e
seq 1 1000 > src/d/data
echo small > src/small
ln src/small src/small-hard
ln -s d/data src/sym
mkfifo src/fifo
chmod 640 src/d/data
chmod 711 src/d/e
find src -exec touch -h -d @1000000000 {} +
cp -a src a
cp -al src hl
cp -r --preserve=mode,timestamps src pr
cp -r src plain
find a hl pr -printf '%p %y %m %n %T@ %l\n' | grep -v ' d ' | sort
find plain -printf '%p %y %m %n %l\n' | grep -v ' d ' | sort
find a pr -type d -printf '%p %m %T@\n' | sort
cp -u src/small a/small && echo "cp -u copied nothing new"
cp -s "$M/src/small" abs-sym
readlink abs-sym
cp "$H/victim" from-host
cp -a "$H/sub" sub-from-host
cat from-host sub-from-host/inner
cp src/d/data src/d/data 2>&1
cp -r src src/inside 2>&1
echo "status $?"
