#!/bin/bash
# needs: bash
# bash builtins and redirections onto files of the mount: the POSIX set, then bash's
# own (&>, &>>, <<<, $(<file), mapfile, exec {fd}>, read -u, printf -v).
. "${0%/*}/lib/posix_builtins.sh"
echo "bash only" &> "$M/amp"
{ echo out; echo err >&2; } &>> "$M/amp"
while IFS= read -r l; do echo "amp: $l"; done < "$M/amp"
read -r w <<< "here string"
echo "$w"
cat_file /dev/stdin <<< "via /dev/stdin of a here-string"
echo "$(< "$M/g")"
mapfile -t lines < "$M/fd3"
echo "${#lines[@]}: ${lines[*]}"
exec {fd}> "$M/named-fd"
echo "named descriptor" >&"$fd"
exec {fd}>&-
read -r -u 0 nd < "$M/named-fd"
echo "$nd"
printf -v v '%05d' 42
echo "$v" > "$M/printf-v"
[[ -e $M/printf-v && ! -L $M/printf-v ]] && echo "[[ ]] agrees"
echo "${#v}" >> "$M/printf-v"
