#!/bin/bash
# needs: bash sed chmod stat ln
# sed -i (a temporary file in the same directory, renamed over the original): mode
# kept, backups, symlinks followed, several files, a missing file.
cd "$M" || exit 1
printf 'alpha\nbeta\ngamma\n' > f
chmod 640 f
sed -i 's/beta/BETA/' f
cat f
stat -c '%a %h %s' f
sed -i.bak -e '1d' f
cat f f.bak
ln -s f lnk
sed -i --follow-symlinks 's/gamma/G/' lnk
readlink lnk
cat f
printf 'one\ntwo\n' > g
sed -i 's/^/> /' f g
cat f g
sed -i 's/x/y/' nonexistent
echo "status $?"
sed -n '2p' "$M/g"
sed -i -e '$a\' -e 'appended' "$M/g"
cat g
ls
