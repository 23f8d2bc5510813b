#!/bin/sh
# Installs easyio under PREFIX (default /usr/local), for machines without the Debian
# package (scripts/deb.sh); the package is this same tree with PREFIX=/usr.
#
#   scripts/install.sh                          # release build, then install under /usr/local
#   PREFIX=$HOME/.local scripts/install.sh      # a user's own prefix
#   DESTDIR=/tmp/root PREFIX=/usr scripts/install.sh   # staged, for a package
#   scripts/install.sh --uninstall              # removes what the install put there
#
# It installs:
#   PREFIX/bin/easyio                            the command
#   PREFIX/lib/libeasyio.so, libeasyio.a         the C interface, with
#   PREFIX/include/easyio.h, PREFIX/lib/pkgconfig/easyio.pc
#   PREFIX/lib/libeasyio_preload.so              the LD_PRELOAD shim
#   PREFIX/share/man/man1/easyio*.1.gz           manual pages (from the command's --help)
#   PREFIX/share/bash-completion, zsh, fish      shell completions
#   PREFIX/lib/systemd/system/easyio-serve@.service   `easyio serve` of the image %f
#   MOUNT_HELPER_DIR/mount.fuse.easyio           for `mount -t fuse.easyio` and fstab
#   PREFIX/share/easyio/installed-files          the list --uninstall removes
#
# MOUNT_HELPER_DIR: where mount(8) looks for helpers, /sbin (PREFIX/sbin when PREFIX is
# /usr); not root and no DESTDIR, the helper is left out unless it is writable.
# NO_BUILD=1: use the libraries and command already built (release, CARGO_TARGET_DIR
# honoured). STRIP=0: keep the debug information (stripped by default).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
case $PREFIX in
    /*) ;;
    *) echo "install: PREFIX must be an absolute path (got $PREFIX)" >&2; exit 2 ;;
esac
dest=$DESTDIR$PREFIX
manifest=$dest/share/easyio/installed-files

if [ "${1:-}" = --uninstall ]; then
    if [ ! -f "$manifest" ]; then
        echo "install: nothing to uninstall: no $manifest" >&2
        exit 1
    fi
    # Files first (the list too), then the directories the install made, deepest
    # first (if empty).
    list=$(cat "$manifest")
    echo "$list" | grep -v '/$' | while IFS= read -r f; do rm -f "$DESTDIR$f"; done
    echo "$list" | grep '/$' | LC_ALL=C sort -r | while IFS= read -r d; do
        rmdir "$DESTDIR$d" 2>/dev/null || true
    done
    echo "uninstalled easyio from $dest"
    exit 0
elif [ $# -gt 0 ]; then
    echo "usage: [PREFIX=DIR] [DESTDIR=DIR] $0 [--uninstall]" >&2
    exit 2
fi

if [ "${NO_BUILD:-0}" != 1 ]; then
    cargo build --manifest-path "$root/Cargo.toml" --release --locked \
        -p easyio-cli -p capi -p preload
fi
target=${CARGO_TARGET_DIR:-$root/target}/release
for f in easyio libeasyio.so libeasyio.a libeasyio_preload.so; do
    [ -f "$target/$f" ] || { echo "install: $target/$f is not built" >&2; exit 1; }
done
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)

if [ -z "${MOUNT_HELPER_DIR+set}" ]; then
    if [ "$PREFIX" = /usr ]; then
        MOUNT_HELPER_DIR=/usr/sbin
    else
        MOUNT_HELPER_DIR=/sbin
    fi
    if [ -z "$DESTDIR" ] && [ "$(id -u)" != 0 ] && [ ! -w "$MOUNT_HELPER_DIR" ]; then
        echo "install: not root: no mount helper in $MOUNT_HELPER_DIR (mount -t fuse.easyio needs it; easyio mount does not)" >&2
        MOUNT_HELPER_DIR=
    fi
fi
case $PREFIX in
    /usr) zsh=share/zsh/vendor-completions ;;
    *) zsh=share/zsh/site-functions ;;
esac

[ -z "$DESTDIR" ] || mkdir -p "$DESTDIR"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# What goes where is recorded (without DESTDIR) as it is installed: each file, and
# each directory the install made (ending in /), so that --uninstall removes them.
list=$work/installed-files
if [ -f "$manifest" ]; then
    grep '/$' "$manifest" > "$list" || true
else
    : > "$list"
fi
# mkdirs DIR: makes DESTDIR+DIR and its missing parents, recording each.
mkdirs() {
    [ -d "$DESTDIR$1" ] || [ "$1" = / ] && return 0
    mkdirs "$(dirname "$1")"
    mkdir "$DESTDIR$1"
    echo "$1/" >> "$list"
}
# put MODE SRC DEST: installs SRC as DESTDIR+DEST (a full path).
put() {
    mkdirs "$(dirname "$3")"
    cp "$2" "$DESTDIR$3.new"
    chmod "$1" "$DESTDIR$3.new"
    mv -f "$DESTDIR$3.new" "$DESTDIR$3"
    echo "$3" >> "$list"
}
# subst MODE SRC DEST: put, with @BINDIR@, @PREFIX@ and @VERSION@ filled in.
subst() {
    tmp=$(mktemp)
    sed -e "s|@BINDIR@|$PREFIX/bin|g" -e "s|@PREFIX@|$PREFIX|g" -e "s|@VERSION@|$version|g" \
        "$2" > "$tmp"
    put "$1" "$tmp" "$3"
    rm -f "$tmp"
}
# strip_copy FILE: a copy of FILE without debug information (unless STRIP=0).
strip_copy() {
    out=$work/$(basename "$1")
    if [ "${STRIP:-1}" = 0 ]; then
        cp "$1" "$out"
    else
        strip --strip-debug -o "$out" "$1"
    fi
    echo "$out"
}

put 755 "$(strip_copy "$target/easyio")" "$PREFIX/bin/easyio"
put 644 "$(strip_copy "$target/libeasyio.so")" "$PREFIX/lib/libeasyio.so"
put 644 "$(strip_copy "$target/libeasyio.a")" "$PREFIX/lib/libeasyio.a"
put 644 "$(strip_copy "$target/libeasyio_preload.so")" "$PREFIX/lib/libeasyio_preload.so"
put 644 "$root/crates/capi/include/easyio.h" "$PREFIX/include/easyio.h"
subst 644 "$root/crates/capi/easyio.pc.in" "$PREFIX/lib/pkgconfig/easyio.pc"

# Manual pages and completions, generated by the command itself.
"$target/easyio" generate man "$work/man" >/dev/null
for page in "$work"/man/*.1; do
    gzip -9n "$page"
    put 644 "$page.gz" "$PREFIX/share/man/man1/$(basename "$page").gz"
done
"$target/easyio" generate completions "$work/completions" >/dev/null
put 644 "$work/completions/easyio.bash" "$PREFIX/share/bash-completion/completions/easyio"
put 644 "$work/completions/_easyio" "$PREFIX/$zsh/_easyio"
put 644 "$work/completions/easyio.fish" "$PREFIX/share/fish/vendor_completions.d/easyio.fish"

subst 644 "$root/packaging/easyio-serve@.service" "$PREFIX/lib/systemd/system/easyio-serve@.service"
if [ -n "$MOUNT_HELPER_DIR" ]; then
    subst 755 "$root/packaging/mount.fuse.easyio" "$MOUNT_HELPER_DIR/mount.fuse.easyio"
fi

mkdirs "$PREFIX/share/easyio"
echo "$PREFIX/share/easyio/installed-files" >> "$list"
sort -u "$list" > "$manifest"
# A shared library installed into the loader's path is found by name (LD_PRELOAD=
# libeasyio_preload.so) once the loader's cache knows it.
if [ -z "$DESTDIR" ] && [ "$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then
    ldconfig
fi
echo "installed easyio $version under $dest"
