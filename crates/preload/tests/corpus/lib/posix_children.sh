# Redirections of the shell onto files of $M handed to child programs (the shell
# opens, the child inherits), pipelines, and a descriptor read by two processes.
printf 'banana\napple\ncherry\n' > "$M/in"
sort < "$M/in" > "$M/sorted"
sort -r < "$M/in" >> "$M/sorted"
cat "$M/sorted"
cat < "$M/in" | tr a-z A-Z > "$M/upper"
cat "$M/upper"
wc -l < "$M/in"
ls "$M/nope" > "$M/ls-out" 2>&1
echo "ls status $?"
cat "$M/ls-out"
ls "$M/nope" 2> "$M/ls-err"
cat "$M/ls-err"
exec 3> "$M/fd3"
echo builtin >&3
env echo child-of-exec3 >&3
sh -c 'echo inherited fd 3 >&3'
exec 3>&-
cat "$M/fd3"
exec 4< "$M/in"
head -n 1 <&4
read -r l <&4
echo "after head: $l"
exec 4<&-
cat > "$M/heredoc" <<EOF
child here-doc $((2 + 3))
EOF
cat "$M/heredoc"
{ echo a; env echo b; sh -c 'echo c'; } > "$M/group"
( echo sub; env echo shell ) >> "$M/group"
cat "$M/group"
grep -c . "$M/group"
tee "$M/tee1" < "$M/in" > "$M/tee2"
cmp "$M/tee1" "$M/tee2" && echo same
sh -c 'cat; echo end' < "$M/in" > "$M/via-sh"
cat "$M/via-sh"
env printf '%s\n' x y z | sort -r > "$M/printf-sort"
cat "$M/printf-sort"
