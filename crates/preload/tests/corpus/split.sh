#!/bin/bash
# needs: bash split csplit seq cat cmp ls wc
# split by lines, bytes and chunks, csplit, and the pieces joined again.
cd "$M" || exit 1
seq 1 10000 > big
split -l 1000 -d big part_
split -b 4k -a 3 big bytes_
split -n 4 big chunk_
ls | wc -l
ls part_* | head -n 3
cat part_* | cmp - big && echo lines joined
cat bytes_* | cmp - big && echo bytes joined
cat chunk_* | cmp - big && echo chunks joined
wc -c chunk_*
csplit -s -f cs big '/^5000$/' '/^9000$/'
wc -l cs*
split -l 3000 --additional-suffix=.txt big sfx_
ls sfx_*
