#!/bin/bash
# needs: bash git
# timeout: 60
# volatile: repo/.git/index c1/.git/index c2/.git/index c3/.git/index c4/.git/index
# git clone of a repository of the mount: local (hard links), --no-hardlinks, over
# file:// (upload-pack and fetch-pack talk through pipes), bare; push, pull, fsck.
cd "$M" || exit 1
git init -q -b main repo
cd repo || exit 1
for i in 1 2 3; do
    echo "v$i" > "f$i"
    git add "f$i"
    git commit -q -m "c$i"
done
cd .. || exit 1
git clone -q repo c1
git clone -q --no-hardlinks repo c2
git clone -q "file://$M/repo" c3
git clone -q --bare repo bare.git
stat -c '%h %n' repo/.git/objects/*/* | sort -k2 | head -n 3
git -C c1 log --oneline
git -C c3 log --oneline
git -C c2 remote -v
echo c2 > c2/f4
git -C c2 add f4
git -C c2 commit -q -m c4
git -C c2 push -q origin main
git -C c2 push -q ../bare.git main
git -C c3 pull -q --ff-only
git -C c3 log --oneline
git -C repo log --oneline
git clone -q bare.git c4
git -C c4 log --oneline
for r in repo c1 c2 c3 c4 bare.git; do git -C "$r" fsck --no-progress && echo "$r fsck ok"; done
