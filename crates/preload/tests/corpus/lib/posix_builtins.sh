# Builtins only (POSIX sh: bash, dash and busybox sh source this): every open of a
# file of $M is the shell's own, for >, >>, <, 2>&1, <>, >|, here-documents, exec N>.
cat_file() { while IFS= read -r l; do echo "$l"; done < "$1"; }
echo one > "$M/f"
echo two >> "$M/f"
printf '%s=%d\n' a 1 b 2 >> "$M/f"
while IFS= read -r line; do echo "read: $line"; done < "$M/f"
{ echo grouped; printf 'x%s' 1 2 3; echo; } > "$M/g"
cat_file "$M/g"
{ echo to-err >&2; echo to-out; } > "$M/both" 2>&1
read -r first < "$M/both"
echo "first of both: $first"
cat_file "$M/both"
while IFS= read -r l; do echo "here: $l"; done <<EOF
expanded $((6 * 7)) ${M##*/}
EOF
while IFS= read -r l; do echo "quoted: $l"; done <<'EOF'
literal $M
EOF
exec 3> "$M/fd3"
echo via-fd3 >&3
printf 'more\n' >&3
exec 3>&-
exec 4>> "$M/fd3"
echo appended >&4
exec 4>&-
exec 5< "$M/fd3"
read -r a <&5
read -r b <&5
echo "fd5: $a / $b"
exec 5<&-
cat_file "$M/fd3"
set -C
echo clobbered > "$M/f" || echo "noclobber kept f"
echo forced >| "$M/f"
set +C
cat_file "$M/f"
exec 6<> "$M/rw"
echo rw-line >&6
exec 6>&-
: > "$M/empty"
read -r x < "$M/nope" || echo "reading a missing file fails"
if [ -f "$M/f" ] && [ -d "$M" ] && [ ! -s "$M/empty" ] && [ -s "$M/g" ] && [ -r "$M/f" ] && [ -w "$M/g" ] && [ ! -e "$M/nope" ]; then
    echo "file tests agree"
fi
[ -h "$M/f" ] || echo "f is no link"
echo "$M" > "$M/path"
i=0
while [ "$i" -lt 5 ]; do printf '%d\n' "$i"; i=$((i + 1)); done > "$M/loop"
for w in a b c; do echo "$w"; done >> "$M/loop"
cat_file "$M/loop"
umask 077
echo secret > "$M/private"
umask 022
echo done > "$M/done" 2> "$M/err"
