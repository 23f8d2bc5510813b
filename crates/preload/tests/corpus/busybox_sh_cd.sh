#!/bin/busybox sh
# needs: busybox pwd ls cp touch stat mkfifo readlink realpath find mv
# `cd "$M"` in busybox, then children using relative paths.
. "${0%/*}/lib/posix_cd.sh"
