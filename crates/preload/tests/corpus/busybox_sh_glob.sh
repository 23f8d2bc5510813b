#!/bin/busybox sh
# needs: busybox
# Pathname expansion by busybox in the mount.
. "${0%/*}/lib/posix_glob.sh"
