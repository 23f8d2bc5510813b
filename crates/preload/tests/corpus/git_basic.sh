#!/bin/bash
# needs: bash git
# volatile: repo/.git/index
# git init, add, commit, status, diff, log, branches, merge, tag in the mount.
# (.git/index holds st_dev, st_ino and ctimes of the work tree files: never alike.)
cd "$M" || exit 1
git init -q -b main repo
cd repo || exit 1
printf 'hello\n' > a.txt
mkdir -p src
printf 'int x;\n' > src/x.c
ln -s a.txt link
git add -A
git commit -q -m first
git status --porcelain
git log --format='%H %an %ae %ad %s' --date=iso-strict
echo more >> a.txt
git status --short
git diff --stat
git commit -qam second
git rm -q src/x.c
git mv a.txt b.txt
git commit -qm third
git log --oneline --stat
git ls-files -s
git cat-file -p 'HEAD^{tree}'
git branch topic
git checkout -q topic
echo t > t.txt
git add t.txt
git commit -qm topic
git checkout -q main
git merge -q --no-ff -m merge topic
git log --graph --oneline --all
git tag -a v1 -m v1
git describe
git status
git show --stat HEAD~1
