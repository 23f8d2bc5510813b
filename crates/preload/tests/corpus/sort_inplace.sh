#!/bin/bash
# needs: bash sort uniq comm join seq awk
# sort -o onto its own input, -m, -u, keys, a large sort with its temporary files in
# the mount (-T), uniq, comm, join.
cd "$M" || exit 1
printf 'pear 3\napple 1\nfig 2\napple 1\n' > f
sort -o f f
cat f
sort -u -o u f
cat u
printf 'b,2\na,10\nc,1\n' > g
sort -t, -k2,2n -o g g
cat g
sort -m f u > merged
cat merged
uniq -c merged
comm -3 f u
join -j1 <(cut -d' ' -f1 u) <(sort g | tr , ' ')
mkdir tmp
seq 1 60000 | awk '{ print ($1 * 7919) % 60000 }' > big
sort -n -S 100k -T tmp --parallel=2 -o big big
head -n 3 big
tail -n 1 big
ls tmp | wc -l
sort -c big && echo sorted
