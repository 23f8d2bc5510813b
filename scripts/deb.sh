#!/bin/sh
# Builds the Debian package of easyio from the workspace: the release build, the tree
# scripts/install.sh stages with PREFIX=/usr, the maintainer scripts and the ldconfig
# trigger of packaging/deb/, the dependencies dpkg-shlibdeps finds for the binaries
# (plus fuse3, for fusermount3), then dpkg-deb. Prints the package's path last.
#
#   scripts/deb.sh              # target/debian/easyio_VERSION-1_ARCH.deb
#   scripts/deb.sh --install    # and installs it (as root; apt-get pulls in fuse3)
set -eu
cd "$(dirname "$0")/.."
install=0
case ${1:-} in
    --install) install=1 ;;
    '') ;;
    *) echo "usage: $0 [--install]" >&2; exit 2 ;;
esac
if ! command -v dpkg-shlibdeps >/dev/null; then
    echo "deb: installing dpkg-dev (dpkg-shlibdeps)" >&2
    apt-get update -q >&2 && apt-get install -y -q dpkg-dev >&2
fi
target=${CARGO_TARGET_DIR:-target}
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)-1
arch=$(dpkg --print-architecture)
cargo build --release --locked -p easyio-cli -p capi -p preload
stage=$target/release/easyio-deb-root
rm -rf "$stage"
DESTDIR=$stage PREFIX=/usr NO_BUILD=1 scripts/install.sh >/dev/null
# dpkg keeps its own list of the package's files: install.sh's is not shipped.
rm -r "$stage/usr/share/easyio"
install -D -m 644 README.md "$stage/usr/share/doc/easyio/README.md"
mkdir -p "$stage/DEBIAN"
install -m 755 packaging/deb/postinst packaging/deb/postrm "$stage/DEBIAN/"
install -m 644 packaging/deb/triggers "$stage/DEBIAN/"
(cd "$stage" && find usr -type f -exec md5sum {} + | sort -k 2 > DEBIAN/md5sums)
# dpkg-shlibdeps reads the package's name from a debian/control of its working directory.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/debian"
printf 'Source: easyio\n\nPackage: easyio\nArchitecture: any\n' > "$work/debian/control"
stage_abs=$(cd "$stage" && pwd)
shlibs=$(cd "$work" && dpkg-shlibdeps -O "$stage_abs/usr/bin/easyio" \
    "$stage_abs/usr/lib/libeasyio.so" "$stage_abs/usr/lib/libeasyio_preload.so" \
    | sed -n 's/^shlibs:Depends=//p')
cat > "$stage/DEBIAN/control" <<CONTROL
Package: easyio
Version: $version
Architecture: $arch
Maintainer: easyio developers
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Depends: $shlibs, fuse3
Section: admin
Priority: optional
Description: file system for slow memory with asynchronous file I/O
 easyio is a file system for slow memory (persistent memory, CXL memory) that makes
 file I/O asynchronous, so applications compute while their data is being copied.
 This package holds the easyio command (mount, serve, file commands, benchmarks),
 the C interface (libeasyio.so, libeasyio.a, easyio.h, easyio.pc), the LD_PRELOAD
 shim libeasyio_preload.so, the mount helper for mount -t fuse.easyio and fstab,
 the unit easyio-serve@.service, manual pages and shell completions.
CONTROL
mkdir -p "$target/debian"
deb=$target/debian/easyio_${version}_$arch.deb
dpkg-deb --root-owner-group -Zxz -z1 --build "$stage" "$deb" >/dev/null
if [ $install = 1 ]; then
    apt-get install -y -q "$(realpath "$deb")" >&2
fi
echo "$deb"
