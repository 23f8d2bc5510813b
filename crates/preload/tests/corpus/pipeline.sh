#!/bin/bash
# needs: bash seq awk sort head tr uniq cat paste
# Pipelines of several programs reading and writing files of the mount at once.
cd "$M" || exit 1
seq 1 2000 | awk '{ print $1 * 2 }' > nums
sort -n -r nums | head -n 5 > top
cat top
tr 0-9 a-j < nums | sort | uniq -c | sort -k1,1nr -k2 | head -n 3 > freq
cat freq
sort nums > sorted &
cat nums > copy &
tr 0-9 9-0 < nums > mirrored &
wait
paste -d, top top | head -n 2
cat sorted copy mirrored | wc -l
