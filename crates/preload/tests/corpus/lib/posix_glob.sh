# Pathname expansion by the shell itself (it reads the directories of the mount).
cd "$M" || exit 1
mkdir d e
for n in a.txt b.txt c.log d/x.txt d/y.c e/z.txt .hidden; do echo "$n" > "$n"; done
echo *
echo *.txt
echo */*.txt
echo d/*
echo no*match
set -- *.txt d/*
echo "$# args"
for f in */*; do echo "entry $f"; done
echo "$M"/*.log
echo .h*
echo [ab].txt ?.log
cd d || exit 1
echo ../*.txt
