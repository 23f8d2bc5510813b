#!/bin/bash
# needs: bash touch stat find ls date
# Times set and read: touch -d, -r, -m, -a, -h (lutimes), -c, stat, find -newer,
# ls -t, date -r.
cd "$M" || exit 1
touch -d '2001-02-03 04:05:06' f
touch -r f g
touch -m -d @1234567890 h
touch -a -d @1000000000 h
touch -d @1500000000 old
ln -s f link
touch -h -d @1111111111 link
touch -c nothing
stat -c '%n %X %Y' f g h old
stat -c '%n %Y' link
stat -L -c '%n %Y' link
find . -newer f -type f | sort
ls -t f g h old
ls -lt --time-style=+%s f h old | awk '{ print $6, $7 }'
date -u -r f '+%F %T'
touch -d @1000000000.5 frac
stat -c '%y' frac
ls
