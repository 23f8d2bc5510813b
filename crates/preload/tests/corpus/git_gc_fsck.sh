#!/bin/bash
# needs: bash git seq
# timeout: 60
# volatile: repo/.git/index
# Thirty commits, then git gc (pack, prune, commit-graph), fsck, repack, count-objects.
cd "$M" || exit 1
git init -q -b main repo
cd repo || exit 1
for i in $(seq 1 30); do
    seq 1 "$i" > "file$((i % 7))"
    printf 'commit %d\n' "$i" >> log
    git add -A
    GIT_COMMITTER_DATE="$((1000000000 + i)) +0000" GIT_AUTHOR_DATE="$((1000000000 + i)) +0000" \
        git commit -q -m "commit $i"
done
git count-objects | sed 's/, [0-9]* kilobytes//'
git gc -q
git count-objects -v | grep -v -e '^size' -e '^prune-packable'
ls .git/objects/pack | sort
git fsck --full --strict --no-progress && echo fsck ok
git repack -adq
git prune
git fsck --no-progress && echo fsck ok again
git verify-pack -v .git/objects/pack/*.idx | tail -n 3
git log --oneline | head -n 3
git rev-list --count HEAD
