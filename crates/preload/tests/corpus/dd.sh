#!/bin/bash
# needs: bash dd sha256sum stat od
# dd with block sizes, seek and skip, conv=notrunc,ucase,fsync,sparse, oflag=append,
# iflag=fullblock, between files of the mount and from the host.
cd "$M" || exit 1
dd if=/dev/zero of=zeros bs=4096 count=16 status=none
dd if="$H/victim" of=upper conv=ucase status=none
cat upper
printf 'XYZ' | dd of=zeros bs=1 seek=3 conv=notrunc status=none
od -An -c -N 8 zeros
dd if=zeros of=part bs=1k skip=2 count=3 status=none
stat -c '%s' part
seq 1 10000 > nums
dd if=nums of=copy bs=333 conv=fsync status=none
cmp nums copy && echo copy ok
echo appended | dd of=copy oflag=append conv=notrunc status=none
tail -n 1 copy
dd if=nums bs=1M iflag=fullblock status=none | sha256sum
dd if=zeros of=sparse bs=4k conv=sparse status=none
stat -c '%s' sparse
dd if=nums of=mid bs=10 skip=5 seek=2 count=4 status=none
od -An -c mid
dd if=missing of=x status=none
echo "status $?"
