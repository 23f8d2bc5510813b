#!/bin/sh
# Installs the C interface of easyio under PREFIX: lib/libeasyio.so, lib/libeasyio.a,
# include/easyio.h and lib/pkgconfig/easyio.pc (with PREFIX substituted).
#
#   crates/capi/install.sh /usr/local            # release build, then install
#   PROFILE=debug crates/capi/install.sh /tmp/p  # the debug build instead
#   EASYIO_LIB_DIR=DIR crates/capi/install.sh P  # libraries already built in DIR
#
# Then: cc prog.c $(pkg-config --cflags --libs easyio)
# (PKG_CONFIG_PATH=PREFIX/lib/pkgconfig when PREFIX is not searched by default).
set -eu
if [ $# -ne 1 ]; then
    echo "usage: $0 PREFIX" >&2
    exit 2
fi
prefix=$1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if [ -n "${EASYIO_LIB_DIR:-}" ]; then
    target=$EASYIO_LIB_DIR
else
    profile=${PROFILE:-release}
    case $profile in
        release) flags=--release dir=release ;;
        debug | dev) flags= dir=debug ;;
        *) flags="--profile $profile" dir=$profile ;;
    esac
    # shellcheck disable=SC2086 # $flags is empty or words meant to split
    cargo build --manifest-path "$root/Cargo.toml" -p capi $flags
    target=${CARGO_TARGET_DIR:-$root/target}/$dir
fi
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)
mkdir -p "$prefix/lib/pkgconfig" "$prefix/include"
cp "$target/libeasyio.so" "$target/libeasyio.a" "$prefix/lib/"
cp "$here/include/easyio.h" "$prefix/include/"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" "$here/easyio.pc.in" \
    > "$prefix/lib/pkgconfig/easyio.pc"
echo "installed easyio $version under $prefix"
