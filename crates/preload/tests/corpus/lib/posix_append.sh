# A shell loop appending 1000 lines, one open with O_APPEND per line (relative path).
cd "$M" || exit 1
i=0
while [ "$i" -lt 1000 ]; do
    echo "line $i" >> log
    i=$((i + 1))
done
wc -l < log
tail -n 1 log
