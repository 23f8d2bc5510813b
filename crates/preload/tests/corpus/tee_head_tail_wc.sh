#!/bin/bash
# needs: bash tee head tail wc seq ls
# tee (-a, several files), head and tail (lines, bytes, from the end), wc.
cd "$M" || exit 1
echo first | tee f
echo second | tee -a f g > /dev/null
seq 1 100 | tee -a f | tail -n 1
cat g
wc -l f
ls f g | tee listing
echo x | tee missing/dir 2>&1
echo "status ${PIPESTATUS[1]}"
seq 1 10000 > n
head -n 5 n
head -c 20 n; echo
head -n -9995 n
tail -n 3 n
tail -n +9998 n
tail -c 12 n
wc n
wc -l -w -c n f g
wc < n
cat n | wc -l
tail -n 2 n > t
head -n 1 t > h
cat t h
head -n 2 f g
