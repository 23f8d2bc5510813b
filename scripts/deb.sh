#!/bin/sh
# Builds the Debian package of easyio from the workspace with cargo-deb (installed
# from crates.io at a pinned version if missing): the release build, the tree
# scripts/install.sh stages with PREFIX=/usr, packaged as described in
# crates/cli/Cargo.toml's [package.metadata.deb]. Prints the package's path last.
#
#   scripts/deb.sh              # target/debian/easyio_VERSION-1_ARCH.deb
#   scripts/deb.sh --install    # and installs it (as root; apt-get pulls in fuse3)
set -eu
cd "$(dirname "$0")/.."
CARGO_DEB_VERSION=3.8.0
install=0
case ${1:-} in
    --install) install=1 ;;
    '') ;;
    *) echo "usage: $0 [--install]" >&2; exit 2 ;;
esac
if [ "$(cargo deb --version 2>/dev/null)" != "cargo-deb $CARGO_DEB_VERSION" ]; then
    echo "deb: installing cargo-deb $CARGO_DEB_VERSION from crates.io" >&2
    cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked
fi
cargo build --release --locked -p easyio-cli -p capi -p preload
stage=${CARGO_TARGET_DIR:-target}/release/easyio-deb-root
rm -rf "$stage"
DESTDIR=$stage PREFIX=/usr NO_BUILD=1 scripts/install.sh >/dev/null
# The staged files are stripped already; --fast: xz's quick levels (a 2-core build
# spends half a minute more for a package a fifth smaller).
deb=$(cargo deb -p easyio-cli --no-build --no-strip --locked --fast --quiet)
if [ $install = 1 ]; then
    apt-get install -y -q "$(realpath "$deb")" >&2
fi
echo "$deb"
