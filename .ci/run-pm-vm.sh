#!/usr/bin/env bash
# run-pm-vm.sh: the persistent-memory paths for real, in a virtual machine with two
# emulated NVDIMMs (QEMU's nvdimm device on a memory-backend-file with a label area):
# a device DAX namespace and an fsdax one with ext4 mounted -o dax. Three boots of
# .ci/run-in-vm.sh, each running .ci/pm-vm-guest.sh:
#   1. suite: pmem's DAX tests, the file commands on the devdax device and on a file
#      on the DAX ext4 (`easyio info` must say CpuFlush, devdax / MAP_SYNC), fs test
#      programs with their regions on the DAX ext4, a short crash sweep;
#   2. write: writers put files into the images and print each acknowledged put;
#      QEMU is killed (SIGKILL) in the middle: the power cut;
#   3. check: on the same backing files, ext4's journal replay, easyio's recovery,
#      fsck clean, every acknowledged put present.
# The backing files live on the host, so what the guest stored before the kill is
# in them: the cut loses no cache line (the crash sweep tests those states), it
# stops every write at an arbitrary instruction.
#
# Environment: PM_VM_ACCEL (default tcg), PM_VM_FS_TESTS (names of fs test programs),
# PM_VM_CRASH_POINTS (default 10), PM_VM_ACKS (acknowledged puts per writer before the
# cut, default 15).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v qemu-system-x86_64 >/dev/null || need_apt+=(qemu-system-x86)
ls /boot/vmlinuz-* >/dev/null 2>&1 || need_apt+=(linux-image-amd64)
[ -x /bin/busybox ] && { ldd /bin/busybox 2>&1 || true; } | grep -q 'not a dynamic' || need_apt+=(busybox-static)
command -v cpio >/dev/null || need_apt+=(cpio)
command -v ndctl >/dev/null || need_apt+=(ndctl)
command -v mke2fs >/dev/null || need_apt+=(e2fsprogs)
if [ ${#need_apt[@]} -gt 0 ]; then
    apt-get update -q
    apt-get install -y -q "${need_apt[@]}"
fi

step_start=$SECONDS
step() {
    echo "pm-vm: $1 took $((SECONDS - step_start)) s" >&2
    step_start=$SECONDS
}

# The programs: the CLI (release, as users run it), pmem's DAX tests, fs test programs.
FS_TESTS=${PM_VM_FS_TESTS:-basic modes read_only repair space crash_process}
cargo build --release --locked -p easyio-cli
easyio=$PWD/target/release/easyio
test_args=(-p pmem --test dax)
for t in $FS_TESTS; do test_args+=(-p fs --test "$t"); done
declare -A exe_of=()
while read -r name exe; do
    exe_of[$name]=$exe
done < <(cargo test --locked "${test_args[@]}" --no-run --message-format=json 2>/dev/null \
    | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["target"]["name"], m["executable"])')
[ -n "${exe_of[dax]:-}" ] || { echo "pm-vm: pmem's dax test was not built" >&2; exit 1; }
fs_tests=""
suite_files="${exe_of[dax]} $PWD/crates/fs/tests/data"
for t in $FS_TESTS; do
    [ -n "${exe_of[$t]:-}" ] || { echo "pm-vm: fs test $t was not built" >&2; exit 1; }
    fs_tests+=" $t=${exe_of[$t]}"
    suite_files+=" ${exe_of[$t]}"
done
step "build"

# Two NVDIMMs: 512 MiB (devdax) and 1 GiB (fsdax), each with a 128 KiB label area
# after its data (QEMU takes the labels from the end of the backing file; the data
# part stays a multiple of the region alignment, 16 MiB).
work=$PWD/target/pm-vm
rm -rf "$work"
mkdir -p "$work"
label=$((128 << 10))
devdax_img=$work/devdax.nvdimm
fsdax_img=$work/fsdax.nvdimm
truncate -s $(((512 << 20) + label)) "$devdax_img"
truncate -s $(((1024 << 20) + label)) "$fsdax_img"
nvdimm() {  # id backing-file
    echo "-object memory-backend-file,id=mem-$1,share=on,mem-path=$2,size=$(stat -c %s "$2")"
    echo "-device nvdimm,id=$1,memdev=mem-$1,label-size=$label"
}
export VM_ACCEL=${PM_VM_ACCEL:-tcg}
export VM_MEM=3G,slots=2,maxmem=8G
export VM_QEMU_ARGS="-machine nvdimm=on $(nvdimm nv0 "$devdax_img" | tr '\n' ' ') $(nvdimm nv1 "$fsdax_img" | tr '\n' ' ')"
export VM_MODULES="nfit nd_pmem dax_pmem device_dax ext4 crc32c_generic"
export VM_BINS="ndctl mke2fs $easyio"
export EASYIO=$easyio DAX_TEST=${exe_of[dax]} FS_TESTS=$fs_tests
export CRASH_POINTS=${PM_VM_CRASH_POINTS:-10}
export VM_ENV="EASYIO DAX_TEST FS_TESTS CRASH_POINTS ACKS"
guest=$PWD/.ci/pm-vm-guest.sh

# 1. the suite
VM_FILES=$suite_files VM_TIMEOUT=900 .ci/run-in-vm.sh "$guest" suite >"$work/suite.log" 2>&1 \
    || { cat "$work/suite.log"; echo "pm-vm: the suite failed" >&2; exit 1; }
grep -a '^PM' "$work/suite.log" >&2
step "devdax and fsdax suite"

# 2. the power cut: wait for enough acknowledged puts on both writers, then a
# moment more (so that the cut falls inside a put), then SIGKILL.
want=${PM_VM_ACKS:-15}
pidfile=$work/qemu.pid
rm -f "$pidfile"
VM_PIDFILE=$pidfile VM_TIMEOUT=900 .ci/run-in-vm.sh "$guest" write >"$work/write.log" 2>&1 &
runner=$!
acks() { tr -d '\r' <"$work/write.log" | grep -a -c "^PM-ACK $1 " || true; }
deadline=$((SECONDS + 600))
until [ "$(acks /dev/dax0.0)" -ge "$want" ] && [ "$(acks /mnt/pm/acked)" -ge "$want" ]; do
    if ! kill -0 "$runner" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
        cat "$work/write.log"
        echo "pm-vm: the writers did not reach $want acknowledged puts each" >&2
        [ -s "$pidfile" ] && kill -KILL "$(cat "$pidfile")" 2>/dev/null
        exit 1
    fi
    sleep 0.2
done
sleep "0.$((RANDOM % 10))"
kill -KILL "$(cat "$pidfile")"
wait "$runner" && { echo "pm-vm: the writing VM was not cut" >&2; exit 1; } || true
tr -d '\r' <"$work/write.log" | grep -a -E '^PM-ACK /[^ ]+ /f[0-9]+ [0-9a-f]{32}$' \
    | cut -d' ' -f2- >"$work/acks"
echo "pm-vm: power cut after $(wc -l <"$work/acks") acknowledged puts" >&2
grep -a '^PM-FAIL' "$work/write.log" && exit 1
step "writers and power cut"

# 3. after the cut, on the same backing files
ACKS=$work/acks VM_FILES=$work/acks VM_TIMEOUT=600 \
    .ci/run-in-vm.sh "$guest" check >"$work/check.log" 2>&1 \
    || { cat "$work/check.log"; echo "pm-vm: recovery after the power cut failed" >&2; exit 1; }
grep -a '^PM' "$work/check.log" >&2
step "recovery after the power cut"
