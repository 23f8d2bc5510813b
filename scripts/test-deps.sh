#!/usr/bin/env bash
# Installs the programs the tests run, on Debian (as root; a no-op when all are
# there): the doors are tested with real programs (a FUSE mount with fusermount3,
# sqlite3, python3, setpriv; the C ABI with cc and pkg-config; the LD_PRELOAD shim
# with shells, git, perl, rsync, make and gcc, compressors, fio). Also unpacks a
# dynamically linked busybox into target/busybox-dynamic, which the shim's corpus
# preloads (Debian's busybox-static cannot be). Called by scripts/test.sh and by
# .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
have() { command -v "$1" >/dev/null; }
have cc || need+=(gcc)
# libfuzzer-sys (CI's fuzz step) compiles libFuzzer, which is C++.
have c++ || need+=(g++)
have git || need+=(git)
have fusermount3 || need+=(fuse3)
have sqlite3 || need+=(sqlite3)
have python3 || need+=(python3)
have setpriv || need+=(util-linux)
have flock || need+=(util-linux)
have unshare || need+=(util-linux)
have script || need+=(bsdutils)
have chattr || need+=(e2fsprogs)
have pkg-config || need+=(pkg-config)
have tar || need+=(tar)
have find || need+=(findutils)
have diff || need+=(diffutils)
have fio || need+=(fio)
have make || need+=(make)
have bash || need+=(bash)
have dash || need+=(dash)
have ar || need+=(binutils)
perl -MFile::Temp -e 1 2>/dev/null || need+=(perl)
have rsync || need+=(rsync)
have patch || need+=(patch)
have xz || need+=(xz-utils)
have gzip || need+=(gzip)
have awk || need+=(mawk)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "test-deps: missing Debian packages: ${need[*]} (run this as root, or install them)" >&2
        exit 1
    fi
    echo "test-deps: installing ${need[*]}" >&2
    apt-get update -q
    apt-get install -y -q "${need[@]}"
fi

busybox=target/busybox-dynamic/bin/busybox
if [ ! -x "$busybox" ]; then
    echo "test-deps: unpacking Debian's busybox into target/busybox-dynamic" >&2
    rm -rf target/busybox-dynamic target/busybox-deb
    mkdir -p target/busybox-deb
    (cd target/busybox-deb && { apt-get download -q busybox || { apt-get update -q && apt-get download -q busybox; }; })
    dpkg-deb -x target/busybox-deb/busybox_*.deb target/busybox-dynamic
    rm -rf target/busybox-deb
fi
# The FUSE tests mount for real: the kernel's fuse device must be there.
[ -e /dev/fuse ] || modprobe fuse 2>/dev/null || echo "test-deps: no /dev/fuse; the FUSE tests cannot run" >&2
