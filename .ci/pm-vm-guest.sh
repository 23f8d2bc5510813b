#!/bin/busybox sh
# pm-vm-guest.sh PHASE
#
# The guest side of .ci/run-pm-vm.sh: runs as the program of .ci/run-in-vm.sh (its
# /init) in a virtual machine with two emulated NVDIMMs, the first for a device DAX
# namespace, the second for an fsdax one carrying ext4 mounted -o dax.
#
# PHASE
#   suite   namespaces (made on first boot, kept in the NVDIMMs' labels), then on
#           each kind: the pmem DAX tests, the file commands, the fs test programs
#           (with /dev/shm on the DAX file system), a short crash sweep
#   write   the power cut's writer: puts files into three images (the devdax
#           device, a file on the DAX ext4, and one endless put on another file)
#           and prints "PM-ACK <image> <path> <md5>" once each put has returned;
#           runs until the machine is killed
#   check   after the power cut: mount ext4 (journal replay), mount each image
#           (easyio's recovery), fsck clean, every acknowledged put present
#
# Environment (from the host): EASYIO the easyio executable, DAX_TEST the pmem test
# program of dax.rs, FS_TESTS "name=exe ..." the fs test programs, CRASH_POINTS,
# ACKS the file of acknowledged puts (check).
set -eu
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
phase=$1
E=$EASYIO
DEV=/dev/dax0.0
MNT=/mnt/pm

fail() { echo "PM-FAIL: $*"; exit 1; }
say() { echo "PM: $*"; }

# --- namespaces and the DAX mount -------------------------------------------------
if [ ! -e "$DEV" ]; then
    [ "$phase" = suite ] || fail "no $DEV: the namespaces were not kept"
    say "making the namespaces: region0 devdax, region1 fsdax with ext4"
    ndctl disable-region all >/dev/null
    ndctl init-labels -f all >/dev/null
    ndctl enable-region all >/dev/null
    ndctl create-namespace -r region0 -m devdax -a 2M >/dev/null
    ndctl create-namespace -r region1 -m fsdax >/dev/null
    [ -e "$DEV" ] || fail "no $DEV after create-namespace"
    set -- /dev/pmem*
    # by its path: busybox's shell would run its own mke2fs applet (no ext4)
    /usr/sbin/mke2fs -q -t ext4 -F "$1"
fi
set -- /dev/pmem*
[ $# = 1 ] && [ -b "$1" ] || fail "expected one fsdax block device, found: $*"
PMEM=$1
mkdir -p $MNT
mount -t ext4 -o dax "$PMEM" $MNT || fail "mount -o dax $PMEM"
grep -q "^$PMEM $MNT ext4 .*dax" /proc/mounts || fail "$MNT is not mounted with dax: $(grep $MNT /proc/mounts)"
say "$(ndctl list -N | tr -d ' \n')"

# --- helpers ----------------------------------------------------------------------
# info_is IMAGE MAPPING [--read-only]: easyio info reports CpuFlush and MAPPING
info_is() {
    img=$1 want=$2
    shift 2
    out=$($E info --json --image "$img" "$@") || fail "info $img"
    echo "$out" | grep -q '"durability_kind": "CpuFlush"' \
        || fail "info $img $*: not CpuFlush: $(echo "$out" | grep durability)"
    echo "$out" | grep -q "\"mapping\": \"$want\"" \
        || fail "info $img $*: mapping is not $want: $(echo "$out" | grep mapping)"
    $E info --image "$img" "$@" | head -n 1
}

# file_commands IMAGE: the CLI's file commands, each result checked
file_commands() {
    img=$1
    head -c 5000000 /dev/urandom > /tmp/big
    echo "small file on $img" > /tmp/small
    $E mkdir --image "$img" /d
    $E put --image "$img" /tmp/small /d/small
    $E put --image "$img" /tmp/big /d/big
    [ "$($E cat --image "$img" /d/small)" = "small file on $img" ] || fail "cat $img"
    $E ls --image "$img" /d | grep -q big || fail "ls $img"
    $E stat --image "$img" /d/big | grep -q 5000000 || fail "stat $img"
    $E mv --image "$img" /d/big /big
    $E get --image "$img" /big /tmp/big.back
    cmp /tmp/big /tmp/big.back || fail "get $img: contents differ"
    $E rm --image "$img" /big
    $E rm --image "$img" -r /d
    [ -z "$($E ls --image "$img" /)" ] || fail "rm $img: not empty"
    $E fsck --image "$img" >/tmp/fsck.log 2>&1 || { cat /tmp/fsck.log; fail "fsck $img"; }
    rm -f /tmp/big /tmp/big.back /tmp/small
    say "file commands on $img: ok"
}

case $phase in
suite)
    # pmem's own tests of the two kinds (they reformat the device)
    EASYIO_TEST_DEVDAX=$DEV EASYIO_TEST_DAX_DIR=$MNT "$DAX_TEST" --ignored -q \
        || fail "pmem dax tests"
    say "pmem dax tests: ok"

    # device DAX
    $E mkfs --force --image $DEV
    info_is $DEV devdax
    info_is $DEV devdax --read-only
    file_commands $DEV

    # a file on the DAX file system
    $E mkfs --size 256M --image $MNT/image
    info_is $MNT/image MAP_SYNC
    info_is $MNT/image MAP_SYNC --read-only
    file_commands $MNT/image
    rm $MNT/image

    # The fs test programs make their regions in /dev/shm: here it is the DAX
    # file system, so each region is mapped with MAP_SYNC (checked first).
    mkdir -p $MNT/shm
    umount /dev/shm
    mount --bind $MNT/shm /dev/shm
    $E mkfs --size 16M --image /dev/shm/probe >/dev/null
    info_is /dev/shm/probe MAP_SYNC >/dev/null
    rm /dev/shm/probe
    for t in $FS_TESTS; do
        name=${t%%=*} exe=${t#*=}
        start=$(date +%s)
        "$exe" -q >/tmp/test.log 2>&1 || { cat /tmp/test.log; fail "fs test $name"; }
        say "fs test $name on DAX: $(grep -a -o '[0-9]* passed' /tmp/test.log | head -n 1), $(($(date +%s) - start)) s"
    done

    # The crash sweep, short: traced regions in memory, the VM's CPU flushing.
    $E crashtest --mode all --points "$CRASH_POINTS" >/tmp/crash.log 2>&1 \
        || { cat /tmp/crash.log; fail "crashtest"; }
    say "crashtest --mode all --points $CRASH_POINTS: ok"
    umount $MNT
    say "suite passed"
    ;;
write)
    $E mkfs --force --image $DEV >/dev/null
    $E mkfs --size 128M --image $MNT/acked >/dev/null
    $E mkfs --size 128M --image $MNT/endless >/dev/null
    sync
    # A put that never ends: the image is mid-write whenever the power goes.
    # (4 KiB every 20 ms: the image never fills up)
    (while :; do head -c 4096 /dev/urandom; usleep 20000; done \
        | $E put --image $MNT/endless - /stream 2>/dev/null) &
    writer() {
        img=$1 i=0
        while :; do
            i=$((i + 1))
            head -c $(((i * 7919) % 300000 + 1)) /dev/urandom > /tmp/w.$2
            sum=$(md5sum < /tmp/w.$2 | cut -d' ' -f1)
            $E put --image "$img" /tmp/w.$2 /f$i 2>/dev/null || fail "put $img /f$i"
            echo "PM-ACK $img /f$i $sum"
        done
    }
    writer $DEV dev &
    writer $MNT/acked file &
    say "writers started"
    wait
    ;;
check)
    [ -r "$ACKS" ] || fail "no list of acknowledged puts"
    for img in $DEV $MNT/acked $MNT/endless; do
        out=$($E info --image "$img" 2>&1) || { echo "$out"; fail "mount $img after the power cut"; }
        say "$img: $(echo "$out" | grep '^mount:')"
        # The endless put was writing when the power went: its mount must recover.
        if [ "$img" = $MNT/endless ]; then
            echo "$out" | grep -q '^mount: .*recovered' || fail "$img: no recovery after the power cut"
        fi
        $E fsck --image "$img" >/tmp/fsck.log 2>&1 || { cat /tmp/fsck.log; fail "fsck $img"; }
        grep -q 'no problems' /tmp/fsck.log || { cat /tmp/fsck.log; fail "fsck $img"; }
    done
    n=0
    while read -r img path sum; do
        got=$($E cat --image "$img" "$path" | md5sum | cut -d' ' -f1)
        [ "$got" = "$sum" ] || fail "acknowledged put $img $path lost or changed (md5 $got, want $sum)"
        n=$((n + 1))
    done < "$ACKS"
    [ "$n" -gt 0 ] || fail "no acknowledged put to check"
    say "all $n acknowledged puts present, every image clean"
    umount $MNT
    ;;
*) fail "unknown phase $phase" ;;
esac
