#!/bin/busybox sh
# needs: busybox
# busybox sh (ash) builtins and redirections onto files of the mount.
. "${0%/*}/lib/posix_builtins.sh"
