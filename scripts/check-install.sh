#!/usr/bin/env bash
# Checks the install (as root, on Debian; called by .ci/run): builds the Debian package
# (scripts/deb.sh), installs it with dpkg -i, then checks that each door works from the
# installed files alone: `man easyio`, `mount -t fuse.easyio` and an fstab line,
# easyio-serve@.service (its file where systemd looks, `systemd-analyze verify`, and its
# ExecStart run as systemd would), `pkg-config easyio` and a C program built against
# the installed header and library (shared and static) that reads what the mount
# wrote, the installed LD_PRELOAD shim. Then `dpkg -r` and `dpkg --purge` must leave
# no file behind. Last, scripts/install.sh into a temporary PREFIX: the same doors from
# there, then --uninstall leaves the prefix empty.
#
# Installs what it runs if missing (man-db, systemd's tools, dpkg-dev, fuse3, gcc,
# pkg-config). The package must not be installed already: the check removes it at the
# end, and would remove the user's.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

fail() {
    echo "check-install: FAILED: $*" >&2
    exit 1
}
say() { echo "check-install: $*" >&2; }

[ "$(id -u)" = 0 ] || fail "run as root: it installs and removes the Debian package"
command -v dpkg >/dev/null || fail "not a Debian system (no dpkg)"
if dpkg-query -W -f='${Status}' easyio 2>/dev/null | grep -q installed; then
    fail "the package easyio is installed already; remove it first (dpkg -r easyio)"
fi
need=()
command -v man >/dev/null || need+=(man-db)
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v dpkg-shlibdeps >/dev/null || need+=(dpkg-dev)
command -v fusermount3 >/dev/null || need+=(fuse3)
command -v cc >/dev/null || need+=(gcc)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v findmnt >/dev/null || need+=(util-linux)
if [ ${#need[@]} -gt 0 ]; then
    say "installing ${need[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
fi
[ -e /dev/fuse ] || fail "no /dev/fuse: the mount checks cannot run (modprobe fuse)"

tmp=$(mktemp -d /dev/shm/easyio-check-install.XXXXXX)
mounted=()
server=
cleanup() {
    set +e
    [ -z "$server" ] || kill -TERM "$server" 2>/dev/null
    for m in "${mounted[@]}"; do umount -l "$m" 2>/dev/null; done
    if dpkg-query -W -f='${Status}' easyio 2>/dev/null | grep -q installed; then
        dpkg --purge easyio >/dev/null
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

# What is on the machine outside the volatile places, before the package.
snapshot() {
    find /usr /etc /opt /srv /var/lib /var/spool -xdev \
        \( -path /var/lib/dpkg -o -path /var/lib/apt -o -path /var/lib/systemd/deb-systemd-helper-enabled \) -prune \
        -o -print 2>/dev/null | LC_ALL=C sort
}

# wait_free IMAGE: waits until no server holds IMAGE (a mount's server saves the image
# after the kernel's unmount returns).
wait_free() {
    local i
    for i in $(seq 300); do
        if out=$(/usr/bin/easyio ls --image "$1" / 2>&1); then return 0; fi
        case $out in *busy* | *"in use"*) sleep 0.1 ;; *) fail "easyio ls --image $1: $out" ;; esac
    done
    fail "$1 is still held 30 s after its unmount"
}

# --- the package ---
deb=$(scripts/deb.sh | tail -n 1)
[ -f "$deb" ] || fail "scripts/deb.sh made no package ($deb)"
say "package $deb ($(du -h "$deb" | cut -f1))"
snapshot > "$tmp/before"
dpkg -i "$deb" >/dev/null
dpkg-query -L easyio | LC_ALL=C sort > "$tmp/owned"
expect=(/usr/bin/easyio /usr/lib/libeasyio.so /usr/lib/libeasyio.a /usr/lib/libeasyio_preload.so
    /usr/include/easyio.h /usr/lib/pkgconfig/easyio.pc /usr/share/man/man1/easyio.1.gz
    /usr/share/man/man1/easyio-mount.1.gz /usr/share/man/man1/easyio-serve.1.gz
    /usr/share/bash-completion/completions/easyio /usr/share/zsh/vendor-completions/_easyio
    /usr/share/fish/vendor_completions.d/easyio.fish
    /usr/lib/systemd/system/easyio-serve@.service /usr/sbin/mount.fuse.easyio)
for f in "${expect[@]}"; do
    grep -qx "$f" "$tmp/owned" || fail "the package has no $f"
    [ -e "$f" ] || fail "$f is in the package but not on disk (a dpkg path-exclude in /etc/dpkg/dpkg.cfg.d?)"
done
[ "$(command -v easyio)" = /usr/bin/easyio ] || fail "easyio on PATH is $(command -v easyio), not /usr/bin/easyio"

# man: the pages render, the command's and a subcommand's.
MANWIDTH=80 man easyio 2>&1 | grep -q 'easyio mount' || fail "man easyio does not render (or lists no mount)"
MANWIDTH=80 man easyio-mount 2>&1 | grep -q -- '--foreground' || fail "man easyio-mount does not render"
# Completions: bash loads them and completes a subcommand.
bash -c 'source /usr/share/bash-completion/completions/easyio && complete -p easyio' >/dev/null \
    || fail "the bash completions do not load"
say "man pages and completions: ok"

# --- mount -t fuse.easyio, and an fstab line ---
img=$tmp/easyio.img
/usr/bin/easyio mkfs --image "$img" --size 256M >/dev/null
mkdir "$tmp/mnt"
mount -t fuse.easyio "$img" "$tmp/mnt" || fail "mount -t fuse.easyio $img $tmp/mnt"
mounted+=("$tmp/mnt")
# The type is fuse.easyio through fusermount3; a mount by root shows plain fuse.
case $(findmnt -n -o FSTYPE,SOURCE "$tmp/mnt" | tr -s ' ') in
    "fuse.easyio $img" | "fuse $img") ;;
    *) fail "findmnt shows $(findmnt -n -o FSTYPE,SOURCE "$tmp/mnt")" ;;
esac
echo "through the mount" > "$tmp/mnt/hello"
mkdir "$tmp/mnt/dir" && cp /usr/include/easyio.h "$tmp/mnt/dir/"
cmp /usr/include/easyio.h "$tmp/mnt/dir/easyio.h" || fail "a file copied onto the mount reads back different"
umount "$tmp/mnt"
wait_free "$img"
[ "$(/usr/bin/easyio cat --image "$img" /hello)" = "through the mount" ] || fail "what the mount wrote is not in the image"
# Read-only: the option reaches the server.
mount -t fuse.easyio -o ro,noatime "$img" "$tmp/mnt"
if (echo x > "$tmp/mnt/nope") 2>/dev/null; then fail "a write went through a mount with -o ro"; fi
umount "$tmp/mnt"
wait_free "$img"
# An fstab line (mount -T reads it instead of /etc/fstab): mount by its directory.
echo "$img $tmp/mnt fuse.easyio noauto,nofail,mode=async,threads=1,x-checked 0 0" > "$tmp/fstab"
mount -T "$tmp/fstab" "$tmp/mnt" || fail "mount of the fstab line $(cat "$tmp/fstab")"
echo "through fstab" > "$tmp/mnt/fstab-file"
/usr/bin/easyio umount "$tmp/mnt"
mounted=()
[ "$(/usr/bin/easyio cat --image "$img" /fstab-file)" = "through fstab" ] || fail "what the fstab mount wrote is not in the image"
say "mount -t fuse.easyio, -o ro and an fstab line: ok"

# --- C: pkg-config, the header, the shared and the static library ---
pkg-config --libs easyio | grep -q -- '-leasyio' || fail "pkg-config --libs easyio: $(pkg-config --libs easyio 2>&1)"
cat > "$tmp/prog.c" <<'EOF'
/* Reads /hello (written through the mount), writes /from-c, unmounts. */
#include <easyio.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    char buf[64] = {0};
    easyio_fs *fs = easyio_mount(argv[1], NULL);
    if (!fs) { fprintf(stderr, "mount: %s\n", easyio_last_error()); return 1; }
    int fd = easyio_open(fs, "/hello", O_RDONLY, 0);
    if (fd < 0 || easyio_read(fs, fd, buf, sizeof buf - 1) <= 0) return 2;
    easyio_close(fs, fd);
    fd = easyio_open(fs, "/from-c", O_CREAT | O_WRONLY, 0644);
    if (fd < 0 || easyio_write(fs, fd, buf, strlen(buf)) != (ssize_t)strlen(buf)) return 3;
    easyio_close(fs, fd);
    if (easyio_unmount(fs) != 0) return 4;
    printf("%s", buf);
    return argc == 2 ? 0 : 5;
}
EOF
# shellcheck disable=SC2046 # pkg-config's output is words meant to split
cc "$tmp/prog.c" $(pkg-config --cflags --libs easyio) -o "$tmp/prog-shared"
# shellcheck disable=SC2046
cc "$tmp/prog.c" $(pkg-config --cflags easyio) -l:libeasyio.a $(pkg-config --static --libs-only-l easyio | sed 's/-leasyio//') \
    -o "$tmp/prog-static"
ldd "$tmp/prog-shared" | grep -q '/usr/lib/libeasyio.so' || fail "prog-shared is not linked to /usr/lib/libeasyio.so"
ldd "$tmp/prog-static" | grep -q 'libeasyio' && fail "prog-static needs libeasyio.so"
[ "$("$tmp/prog-shared" "$img")" = "through the mount" ] || fail "the C program (shared library)"
[ "$("$tmp/prog-static" "$img")" = "through the mount" ] || fail "the C program (static library)"
[ "$(/usr/bin/easyio cat --image "$img" /from-c)" = "through the mount" ] || fail "what the C program wrote"
say "pkg-config, easyio.h, libeasyio.so and libeasyio.a: ok"

# --- the LD_PRELOAD shim, found by name ---
out=$(LD_PRELOAD=libeasyio_preload.so EASYIO_IMAGE="$img" EASYIO_MOUNT=/easyio \
    sh -c 'cp /usr/include/easyio.h /easyio/h && cmp /usr/include/easyio.h /easyio/h && cat /easyio/hello')
[ "$out" = "through the mount" ] || fail "the shim: $out"
# The shim's processes share the image through a server of their own, which ends
# once they have.
wait_free "$img"
/usr/bin/easyio cat --image "$img" /h | cmp - /usr/include/easyio.h || fail "what the shim wrote"
say "LD_PRELOAD=libeasyio_preload.so: ok"

# --- easyio-serve@.service ---
# `systemctl cat` asks the running systemd, which a container may not have:
# `systemd-analyze cat-config` shows the same file from the same search path.
if [ -d /run/systemd/system ]; then
    systemctl cat easyio-serve@.service >/dev/null || fail "systemctl cat easyio-serve@.service"
fi
systemd-analyze cat-config systemd/system/easyio-serve@.service > "$tmp/unit"
grep -q '^# /usr/lib/systemd/system/easyio-serve@.service' "$tmp/unit" || fail "systemd does not find easyio-serve@.service"
inst=$(systemd-escape --path "$img")
cp /usr/lib/systemd/system/easyio-serve@.service "$tmp/easyio-serve@$inst.service"
systemd-analyze verify "$tmp/easyio-serve@$inst.service" || fail "systemd-analyze verify easyio-serve@$inst.service"
# Its ExecStart, run as systemd would run it (%i, %f and the empty options filled in).
exec_start=$(sed -n 's/^ExecStart=//p' "$tmp/unit")
cmd=${exec_start//%i/$inst}
cmd=${cmd//%f/$img}
cmd=${cmd//\$EASYIO_SERVE_OPTIONS/}
made_run=0
[ -d /run/easyio ] || { mkdir /run/easyio; made_run=1; }
sock=/run/easyio/$inst.sock
# shellcheck disable=SC2086 # the command line is words, as systemd splits it
$cmd > "$tmp/serve.log" 2>&1 &
server=$!
for _ in $(seq 300); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { cat "$tmp/serve.log" >&2; fail "the unit's server made no socket $sock"; }
out=$(LD_PRELOAD=libeasyio_preload.so EASYIO_SERVER="$sock" sh -c 'echo served > /easyio/served && cat /easyio/hello')
[ "$out" = "through the mount" ] || fail "a client of the unit's server: $out"
kill -TERM "$server"
status=0
wait "$server" || status=$?
server=
[ "$status" = 0 ] || [ "$status" = 143 ] || { cat "$tmp/serve.log" >&2; fail "the server ended with status $status"; }
wait_free "$img"
[ "$(/usr/bin/easyio cat --image "$img" /served)" = served ] || fail "what the server's client wrote"
[ $made_run = 0 ] || rm -rf /run/easyio
say "easyio-serve@.service: found, verified, its ExecStart serves and stops cleanly: ok"

# --- removal leaves nothing ---
dpkg -r easyio >/dev/null
while read -r f; do
    [ -d "$f" ] || [ ! -e "$f" ] || fail "dpkg -r left $f"
done < "$tmp/owned"
dpkg --purge easyio >/dev/null
snapshot > "$tmp/after"
left=()
while read -r f; do
    # A file another package installed meanwhile is not the package's.
    dpkg-query -S "$f" >/dev/null 2>&1 || left+=("$f")
done < <(LC_ALL=C comm -13 "$tmp/before" "$tmp/after")
[ ${#left[@]} = 0 ] || fail "dpkg --purge left: ${left[*]}"
gone=$(LC_ALL=C comm -23 "$tmp/before" "$tmp/after" | head -n 5)
[ -z "$gone" ] || fail "installing and purging the package removed: $gone"
say "dpkg -r and --purge: nothing left: ok"

# --- scripts/install.sh into a temporary prefix, then --uninstall ---
prefix=$tmp/prefix
PREFIX=$prefix NO_BUILD=1 MOUNT_HELPER_DIR=$prefix/sbin scripts/install.sh >/dev/null
[ "$(find "$prefix" -type f | wc -l)" -ge 40 ] || fail "install.sh installed only $(find "$prefix" -type f | wc -l) files"
grep -q "^EASYIO=$prefix/bin/easyio\$" "$prefix/sbin/mount.fuse.easyio" || fail "the mount helper does not run $prefix/bin/easyio"
grep -q "^ExecStart=$prefix/bin/easyio serve" "$prefix/lib/systemd/system/easyio-serve@.service" || fail "the unit does not run $prefix/bin/easyio"
MANWIDTH=80 man -M "$prefix/share/man" easyio-umount 2>&1 | grep -q 'easyio umount' || fail "man -M $prefix/share/man easyio-umount"
img2=$tmp/prefix.img
"$prefix/bin/easyio" mkfs --image "$img2" --size 64M >/dev/null
"$prefix/sbin/mount.fuse.easyio" "$img2" "$tmp/mnt" -o rw,mode=async || fail "the prefix's mount helper"
mounted+=("$tmp/mnt")
echo "through the mount" > "$tmp/mnt/hello"
"$prefix/bin/easyio" umount "$tmp/mnt"
mounted=()
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# shellcheck disable=SC2046
cc "$tmp/prog.c" $(pkg-config --cflags --libs easyio) -o "$tmp/prog-prefix"
[ "$("$tmp/prog-prefix" "$img2")" = "through the mount" ] || fail "the C program against the prefix"
out=$(LD_PRELOAD=$prefix/lib/libeasyio_preload.so EASYIO_IMAGE="$img2" sh -c 'cat /easyio/from-c')
[ "$out" = "through the mount" ] || fail "the prefix's shim: $out"
PREFIX=$prefix scripts/install.sh --uninstall >/dev/null
[ -z "$(ls -A "$prefix" 2>/dev/null)" ] || fail "install.sh --uninstall left: $(find "$prefix" | head -n 5)"
say "scripts/install.sh PREFIX=... and --uninstall: ok"
say "all checks passed"
