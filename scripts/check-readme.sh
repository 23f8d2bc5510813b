#!/usr/bin/env bash
# Checks that the README's install command and its four door examples work when pasted
# as written (as root, on Debian; called by .ci/run): in a clean `git clone` of HEAD,
# the `sh` blocks of the README's "Install" and "The four doors" sections run in order
# in one bash with -e, from the clone's top directory. The build reuses this checkout's
# target directory (CARGO_TARGET_DIR, and the clone seen at this checkout's path) so
# that it is not made again. It runs in a mount namespace of its own with a fresh tmpfs
# on /dev/shm, so the README's fixed paths there (/dev/shm/easyio.img, ...) are its own; the package it installed is purged at
# the end. Of the README's first two commands the demo runs first; the tests are not
# run here: they are CI's step before this one, on the same tree.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

fail() {
    echo "check-readme: FAILED: $*" >&2
    exit 1
}
[ "$(id -u)" = 0 ] || fail "run as root: the README's install command installs the Debian package"
if [ -z "${EASYIO_CHECK_README_NS:-}" ]; then
    if dpkg-query -W -f='${Status}' easyio 2>/dev/null | grep -q installed; then
        fail "the package easyio is installed already; remove it first (dpkg -r easyio)"
    fi
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/target}
    exec env EASYIO_CHECK_README_NS=1 unshare --mount --propagation private "$repo/scripts/check-readme.sh" "$@"
fi
mount -t tmpfs -o size=4g,mode=1777 tmpfs /dev/shm

work=$(mktemp -d)
bound=0
target_bound=0
cleanup() {
    set +e
    # Anything the examples left running or mounted goes with the namespace's end;
    # the package does not.
    for mp in $(awk '$3 ~ /^fuse/ && $2 ~ "^/dev/shm/" { print $2 }' /proc/mounts); do
        umount -l "$mp"
    done
    if dpkg-query -W -f='${Status}' easyio 2>/dev/null | grep -q installed; then
        dpkg --purge easyio >/dev/null
    fi
    # The clone's view of this checkout and its target directory are unmounted before
    # the clone is removed: removing through a bind mount would remove the real files.
    cd /
    [ $bound = 0 ] || umount -R "$repo"
    [ $target_bound = 0 ] || umount "$work/easyio/target"
    if awk -v w="$work" 'index($5, w) == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo; then
        echo "check-readme: something is still mounted under $work; left in place" >&2
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT

git clone -q "$repo" "$work/easyio"
# The clone is seen at this checkout's path (a bind mount, in this namespace only),
# with its target directory, and a file whose content is this checkout's keeps its
# modification time: cargo then reuses what this checkout built (same paths, same
# times) and rebuilds only what differs.
(cd "$work/easyio" && git ls-files -z) | while IFS= read -r -d '' f; do
    if cmp -s "$work/easyio/$f" "$repo/$f"; then touch -h -r "$repo/$f" "$work/easyio/$f"; fi
done
if [ -d "$repo/target" ]; then
    mkdir -p "$work/easyio/target"
    mount --bind "$repo/target" "$work/easyio/target"
    target_bound=1
fi
mount --rbind "$work/easyio" "$repo"
bound=1
cd "$repo"
git log -1 --format='check-readme: the README of %h, %s' >&2
python3 - README.md > "$work/readme.sh" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
sections = re.split(r"^## ", text, flags=re.M)
blocks = []
# The two commands at the top: the demo runs here; the tests (scripts/test.sh) are CI's
# own step on the same tree, just before this one, so they are not run twice.
top = re.findall(r"^```sh\n(.*?)^```", sections[0], flags=re.M | re.S)
if not top or "scripts/test.sh" not in top[0]:
    sys.exit("check-readme: the README does not start with the demo and the test command")
demo = [l for l in top[0].splitlines() if l.strip() and not l.startswith("scripts/test.sh")]
blocks.append("# --- the first command ---\n" + "\n".join(demo) + "\n")
for name in ("Install", "The four doors"):
    body = next((s for s in sections if s.startswith(name + "\n")), None)
    if body is None:
        sys.exit(f"check-readme: the README has no section '## {name}'")
    found = re.findall(r"^```sh\n(.*?)^```", body, flags=re.M | re.S)
    if not found:
        sys.exit(f"check-readme: the section '## {name}' has no sh block")
    blocks += [f"# --- {name} ---\n{b}" for b in found]
print("set -euo pipefail")
print("\n".join(blocks))
EOF
echo "check-readme: running, from the clone's top directory:" >&2
sed 's/^/    /' "$work/readme.sh" >&2
start=$SECONDS
timeout 900 bash "$work/readme.sh" > "$work/out" 2>&1 || { cat "$work/out" >&2; fail "a README command failed (output above)"; }
# What the examples promise: the mount's listing has the copied directory, the shim's
# count of README lines, the C demo's success, a listing written through the server.
grep -q '^took: ' "$work/out" || { cat "$work/out" >&2; fail "the demo did not finish"; }
grep -q ' capi$' "$work/out" || { cat "$work/out" >&2; fail "the mount's listing has no capi"; }
grep -q "^$(wc -l < README.md) /easyio/README.md\$" "$work/out" \
    || { cat "$work/out" >&2; fail "the shim did not count the README's lines"; }
grep -q ' /easyio/listing$' "$work/out" || { cat "$work/out" >&2; fail "no listing through the server"; }
# Whether the build was reused: cargo's summary and how many crates it compiled.
echo "check-readme: the install's build compiled $(grep -c '^ *Compiling ' "$work/out" || true) crates: $(grep -m1 '^ *Finished ' "$work/out" | sed 's/^ *//')" >&2
echo "check-readme: the install command and the four doors ran as written ($((SECONDS - start)) s)" >&2
