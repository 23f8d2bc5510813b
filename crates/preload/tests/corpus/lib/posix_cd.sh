# `cd "$M"`, then children that get the current directory inside the mount and use
# relative paths (the kernel's current directory is $H, full of victims of the same
# names).
cd "$M" || exit 1
pwd
env pwd
env pwd -P
echo data > f
cat f
mkdir sub
cd sub || exit 1
pwd
env pwd
echo inner > x
cat ../f
cp ../f copy
ls
cd .. || exit 1
ls
ls sub
cat sub/x
touch t
touch -d @1000000000 t2
stat -c '%n %Y' t2
mkfifo p
[ -p p ] && echo "p is a fifo"
stat -c '%n %F %a %h' p f t sub
rm f
ls
ln -s t tl
readlink tl
mv t2 moved
realpath moved
find . | sort
env ls -a
cd sub || exit 1
env ls ..
rm copy
cd .. || exit 1
rm -r sub
ls -F
