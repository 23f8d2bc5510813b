#!/bin/bash
# needs: bash awk seq sort cat
# awk writing files of the mount by name (print >, >>), reading with getline from a
# file, and printing into a command (popen) whose output goes to a file.
cd "$M" || exit 1
seq 1 30 > in
awk '{ print > ("out" $1 % 3) }' in
awk '{ print "again", $1 >> "out0" }' in
awk 'BEGIN { while ((getline l < "in") > 0) n++; print n, l }'
awk '{ print | "sort -rn > sorted" }' in
head -n 3 sorted
cat out1 | head -n 3
wc -l out0 out1 out2
awk 'BEGIN { print "x" > "/nonexistent/dir/f" }'
echo "status $?"
awk 'END { print NR, FILENAME }' out0 out1
