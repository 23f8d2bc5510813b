#!/bin/bash
# needs: bash seq cp cmp sha256sum cat dd
# Files of several megabytes: written by a shell pipeline, copied, concatenated,
# compared and checksummed.
cd "$M" || exit 1
seq 1 2000000 > big
stat -c '%s' big
sha256sum big
cp big copy
cmp big copy && echo copy same
cat big copy > twice
stat -c '%s' twice
dd if=twice of=tail bs=1M skip=10 status=none
sha256sum tail
cat big | tr 0-9 a-j > letters
sha256sum letters
rm copy
