#!/bin/bash
# needs: bash dash sort uniq grep wc
# Two processes appending to one file of the mount at the same time, each line with
# its own open(O_APPEND): every line arrives whole. The order is the scheduler's, so
# the file is sorted at the end.
cd "$M" || exit 1
( i=0; while [ $i -lt 500 ]; do echo "a $i" >> log; i=$((i + 1)); done ) &
dash -c 'i=0; while [ $i -lt 500 ]; do echo "b $i" >> log; i=$((i + 1)); done' &
wait
wc -l < log
grep -c '^a ' log
grep -c '^b ' log
grep -cvE '^[ab] [0-9]+$' log
sort log | uniq -d | wc -l
sort -o log log
