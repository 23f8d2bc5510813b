#!/bin/busybox sh
# needs: busybox wc tail
# A busybox loop appending 1000 lines with >>.
. "${0%/*}/lib/posix_append.sh"
