#!/bin/bash
# needs: bash chmod stat mkdir touch find
# chmod: octal, symbolic, -R, setuid, setgid on a directory (inherited by what is
# made in it), sticky, umask for new files and directories.
cd "$M" || exit 1
touch f g
mkdir -p d/sub
touch d/sub/x
chmod 600 f
chmod u+x,g=r,o-rwx g
chmod -R go-rwx d
chmod u+s f
chmod g+s d
chmod +t d/sub
mkdir d/new
touch d/new-file
chmod -v 640 g
chmod 0 f
chmod a+r f
chmod =rx,u+w g
stat -c '%n %a %A' f g d d/sub d/sub/x d/new d/new-file
umask 027
touch u
mkdir ud
umask 077
mkdir -p p/q
stat -c '%n %a' u ud p p/q
chmod 7777 u
stat -c '%n %a' u
chmod 644 nope
echo "status $?"
find . -perm -4000 | sort
