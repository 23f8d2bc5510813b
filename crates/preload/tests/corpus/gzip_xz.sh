#!/bin/bash
# needs: bash gzip xz seq stat cmp
# gzip and xz compressing in place (a new file, the original's mode and times copied,
# the original removed) and back, and to stdout.
cd "$M" || exit 1
seq 1 20000 > f
cp f g
chmod 640 f
touch -d @1000000000 f
gzip -n f
stat -c '%n %a %Y' f.gz
gzip -l f.gz | tail -n 1
gzip -d f.gz
stat -c '%n %a %Y' f
cmp f g && echo gzip round trip
gzip -n -c g > g.gz
zcat g.gz | tail -n 1
xz -k g
xz -l g.xz | tail -n 1
xz -d -c g.xz | cmp - g && echo xz round trip
gzip -n -k g
gzip g
echo "status $?"
ls
