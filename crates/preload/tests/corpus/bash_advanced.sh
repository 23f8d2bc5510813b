#!/bin/bash
# needs: bash diff sort cat
# bash features that hand descriptors around: process substitution (/dev/fd/N),
# `cat /dev/stdin` of a file of the mount, coprocesses, `read` from a file loop,
# redirections of a function and of a whole loop.
cd "$M" || exit 1
printf 'c\na\nb\n' > one
printf 'b\nc\nd\n' > two
diff <(sort one) <(sort two)
while read -r l; do echo "found $l"; done < <(sort one)
cat /dev/stdin < one
cat - < two
sort /dev/stdin < one > sorted
cat sorted
out() { echo "from a function"; env echo "and its child"; }
out > fn-out
cat fn-out
for i in 1 2 3; do echo "$i"; done > loop-out
cat loop-out
coproc SORTER { sort -r; }
printf 'x\nz\ny\n' >&"${SORTER[1]}"
exec {SORTER[1]}>&-
cat <&"${SORTER[0]}" > co-out
wait
cat co-out
exec 7< one
cat <&7 > via-7
cat via-7
exec 7<&-
