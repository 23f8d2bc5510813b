#!/usr/bin/env bash
# run-in-vm.sh EXE [ARGS...]
#
# Runs an x86-64 Linux executable inside a throw-away QEMU TCG virtual machine
# (-cpu max, which emulates PKU/OSPKE, CLWB, CLFLUSHOPT, ...; no AVX-512) on the
# host's Debian kernel, and exits with the executable's exit status. CI runs the
# tests of protection keys this way on machines whose CPUs have none.
# Needs: qemu-system-x86 linux-image-amd64 busybox-static cpio (Debian packages).
#
# Exit codes of this script:
#   0..255  the program's own exit status (128+N if it was killed by signal N)
#   124     the VM timed out (VM_TIMEOUT)
#   125     the VM ended without printing the VM-EXIT-STATUS marker
#           (kernel panic, init failure, ...)
#   126     usage / setup error in this script
#
# Optional environment:
#   VM_KERNEL   kernel image (default: newest /boot/vmlinuz-*)
#   VM_CPU      QEMU -cpu value         (default: max)
#   VM_MEM      QEMU -m value           (default: 4G)
#   VM_SMP      QEMU -smp value         (default: 2)
#   VM_TIMEOUT  seconds for the whole VM run (default: 600)
#   VM_CWD      working directory inside the VM (default: /tmp)
#   VM_ENV      space-separated names of host env vars to pass into the VM
#               (e.g. "RUST_BACKTRACE RUST_TEST_THREADS"); RUST_BACKTRACE is
#               always passed if set.
#   VM_FILES    space-separated extra host files/dirs to copy into the
#               initramfs at the same absolute path (e.g. test fixtures)
#   VM_APPEND   extra kernel command line arguments
#   VM_KEEP     if 1, keep the work directory (initramfs, console log)
#   VM_ACCEL    QEMU accelerator (default: tcg; kvm needs a writable /dev/kvm and
#               gives the host CPU's features, not -cpu max's)
#   VM_QEMU_ARGS extra QEMU arguments, split on white space (devices, -machine
#               properties, ...)
#   VM_MODULES  space-separated kernel module names, loaded in this order (each
#               after the modules it depends on, from the kernel's modules.dep)
#               before the program runs
#   VM_BINS     space-separated extra executables copied, with their shared
#               libraries, to the same absolute paths
#   VM_PIDFILE  file QEMU writes its process id to (to kill it from outside)
set -euo pipefail

die() { echo "run-in-vm: $*" >&2; exit 126; }

[ $# -ge 1 ] || die "usage: $0 EXE [ARGS...]"
exe_in=$1; shift
[ -f "$exe_in" ] && [ -x "$exe_in" ] || die "not an executable file: $exe_in"
exe=$(readlink -f -- "$exe_in")

kernel=${VM_KERNEL:-$(ls -1v /boot/vmlinuz-* 2>/dev/null | tail -n 1 || true)}
[ -n "$kernel" ] && [ -r "$kernel" ] || die "no readable kernel (apt-get install linux-image-amd64, or set VM_KERNEL)"
busybox=$(command -v busybox || true)
[ -n "$busybox" ] || die "busybox not found (apt-get install busybox-static)"
{ ldd "$busybox" 2>&1 || true; } | grep -q 'not a dynamic executable' || die "$busybox is not static (apt-get install busybox-static)"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found (apt-get install qemu-system-x86)"
command -v cpio >/dev/null || die "cpio not found (apt-get install cpio)"

work=$(mktemp -d /tmp/run-in-vm.XXXXXX)
cleanup() { if [ "${VM_KEEP:-0}" = 1 ]; then echo "run-in-vm: kept $work" >&2; else rm -rf "$work"; fi; }
trap cleanup EXIT
root=$work/root
mkdir -p "$root"/{bin,dev,proc,sys,tmp,root,etc}

# copy SRC to the same absolute path under $root (following symlinks)
copy_abs() {
    local src=$1
    mkdir -p "$root$(dirname -- "$src")"
    cp -L --preserve=mode -- "$src" "$root$src"
}

# --- the program and its shared libraries -----------------------------------
# copy an executable and the shared libraries it loads
copy_with_libs() {
    local exe=$1 ldd_out lib
    copy_abs "$exe"
    if ldd_out=$(ldd "$exe" 2>&1); then
        # "libfoo.so => /path/libfoo.so (0x...)"  and  "/lib64/ld-linux-x86-64.so.2 (0x...)"
        while read -r lib; do
            [ -n "$lib" ] && copy_abs "$lib"
        done < <(printf '%s\n' "$ldd_out" | awk '
            $2 == "=>" && $3 ~ /^\// { print $3; next }
            $1 ~ /^\// { print $1 }')
        if printf '%s\n' "$ldd_out" | grep -q 'not found'; then
            die "missing shared libraries: $(printf '%s\n' "$ldd_out" | grep 'not found' | tr '\n' ' ')"
        fi
    fi  # else: static executable ("not a dynamic executable"), nothing to copy
}
copy_with_libs "$exe"

for b in ${VM_BINS:-}; do
    bin=$(command -v -- "$b" || true)
    [ -n "$bin" ] || die "VM_BINS: not found: $b"
    copy_with_libs "$(readlink -f -- "$bin")"
done

# --- kernel modules -------------------------------------------------------------
# Each named module after its dependencies (modules.dep lists them), flat under
# /lib/modules of the initramfs, decompressed; /etc/vm-modules is the load order.
if [ -n "${VM_MODULES:-}" ]; then
    kver=${VM_KVER:-$(basename -- "$kernel" | sed 's/^vmlinuz-//')}
    moddir=/lib/modules/$kver
    [ -r "$moddir/modules.dep" ] || die "no $moddir/modules.dep (set VM_KVER to the kernel's release)"
    mkdir -p "$root/lib/modules"
    : > "$root/etc/vm-modules"
    declare -A mod_done=()
    add_module() {
        local want=${1//-/_} line path deps d base
        [ -n "${mod_done[$want]:-}" ] && return 0
        mod_done[$want]=1
        line=$(awk -v w="$want" -F: '{ n = $1; sub(".*/", "", n); sub("[.]ko.*", "", n);
            gsub("-", "_", n); if (n == w) { print; exit } }' "$moddir/modules.dep")
        [ -n "$line" ] || die "VM_MODULES: no module $1 in $moddir/modules.dep"
        path=${line%%:*}
        deps=${line#*:}
        for d in $deps; do
            base=$(basename -- "$d"); base=${base%%.ko*}
            add_module "$base"
        done
        case $path in
            *.ko) cp -- "$moddir/$path" "$root/lib/modules/$want.ko" ;;
            *.ko.xz) xz -dc -- "$moddir/$path" > "$root/lib/modules/$want.ko" ;;
            *.ko.zst) zstd -qdc -- "$moddir/$path" > "$root/lib/modules/$want.ko" ;;
            *.ko.gz) gzip -dc -- "$moddir/$path" > "$root/lib/modules/$want.ko" ;;
            *) die "VM_MODULES: unknown module file $path" ;;
        esac
        echo "$want" >> "$root/etc/vm-modules"
    }
    for m in $VM_MODULES; do add_module "$m"; done
fi

for f in ${VM_FILES:-}; do
    f=$(readlink -f -- "$f")
    mkdir -p "$root$(dirname -- "$f")"
    cp -a -L -- "$f" "$root$f"
done

# --- busybox + /init ----------------------------------------------------------
cp "$busybox" "$root/bin/busybox"
for a in $("$busybox" --list); do [ -e "$root/bin/$a" ] || ln -s busybox "$root/bin/$a"; done

# POSIX single-quote an argument
q() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }

{
    echo '#!/bin/busybox sh'
    echo 'export PATH=/bin HOME=/root TMPDIR=/tmp'
    for v in RUST_BACKTRACE ${VM_ENV:-}; do
        if [ -n "${!v+x}" ]; then echo "export $v=$(q "${!v}")"; fi
    done
    cat <<'EOF'
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/shm /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
# /tmp becomes a tmpfs; carry over what the initramfs put under /tmp (the
# program itself may live there, e.g. /tmp/.../target/debug/deps/foo-HASH)
mkdir -p /.newtmp
mount -t tmpfs -o mode=1777 tmpfs /.newtmp
cp -a /tmp/. /.newtmp/ && rm -rf /tmp/* /tmp/.[!.]* 2>/dev/null
mount -o move /.newtmp /tmp && rmdir /.newtmp
mount -t devpts devpts /dev/pts 2>/dev/null
if [ -f /etc/vm-modules ]; then
    for m in $(cat /etc/vm-modules); do
        insmod "/lib/modules/$m.ko" || echo "VM-INIT: insmod $m failed"
    done
fi
# program output reaches the host byte-for-byte (no LF -> CRLF); TERM is left
# unset so libtest & co. print no colour codes
busybox stty -onlcr 2>/dev/null
echo "VM-INIT: kernel $(cat /proc/sys/kernel/osrelease), $(grep -c ^processor /proc/cpuinfo) cpus, cpuinfo flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -o -w -E 'pku|ospke' | tr '\n' ' ')"
EOF
    printf 'cd %s || exit 1\n' "$(q "${VM_CWD:-/tmp}")"
    printf 'echo "VM-INIT: running %s"\n' "$(q "$exe")"
    printf '%s' "$(q "$exe")"
    for a in "$@"; do printf ' %s' "$(q "$a")"; done
    echo ' </dev/null'
    cat <<'EOF'
rc=$?
sync
echo "VM-EXIT-STATUS=$rc"
poweroff -f
EOF
} > "$root/init"
chmod 755 "$root/init"

( cd "$root" && find . -print0 | cpio --null -o -H newc --quiet ) | gzip -1 > "$work/initramfs.cpio.gz"

# --- boot -----------------------------------------------------------------------
log=$work/console.log
append="console=ttyS0 rdinit=/init quiet loglevel=3 panic=-1 oops=panic ${VM_APPEND:-}"
set +e
timeout -k 10 "${VM_TIMEOUT:-600}" \
    qemu-system-x86_64 \
        -accel "${VM_ACCEL:-tcg}" \
        -cpu "${VM_CPU:-max}" \
        -m "${VM_MEM:-4G}" \
        -smp "${VM_SMP:-2}" \
        -display none -vga none -monitor none -serial stdio \
        -no-reboot \
        -kernel "$kernel" \
        -initrd "$work/initramfs.cpio.gz" \
        -append "$append" \
        -nic none \
        ${VM_PIDFILE:+-pidfile "$VM_PIDFILE"} \
        ${VM_QEMU_ARGS:-} \
        </dev/null 2>&1 | tee "$log"
qrc=${PIPESTATUS[0]}
set -e

if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
    echo "run-in-vm: TIMEOUT after ${VM_TIMEOUT:-600}s" >&2
    exit 124
fi
status=$(tr -d '\r' < "$log" | grep -a -o '^VM-EXIT-STATUS=[0-9]*$' | tail -n 1 | cut -d= -f2 || true)
if [ -z "$status" ]; then
    echo "run-in-vm: VM ended (qemu rc=$qrc) without VM-EXIT-STATUS marker" >&2
    exit 125
fi
exit "$status"
