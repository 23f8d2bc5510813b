#!/bin/bash
# needs: bash truncate stat od wc tail cmp
# truncate: grow (a hole reads zeros), shrink, relative sizes, rounding, a reference,
# -c, a missing directory.
cd "$M" || exit 1
printf 'abcdefghij' > f
truncate -s 1M f
stat -c '%s' f
od -An -c -N 12 f
tail -c 4 f | od -An -tx1
truncate -s +100 f
truncate -s -50 f
stat -c '%s' f
truncate -s %4096 f
stat -c '%s' f
truncate -s /1000 f
stat -c '%s' f
truncate -s 3 f
cat f; echo
truncate -s 0 f
wc -c < f
truncate -c -s 10 nothing
ls
truncate -r f -s +7 g
stat -c '%s' g
cmp g <(head -c 7 /dev/zero) && echo zeros
truncate -s 10 missing/dir
echo "status $?"
