#!/bin/busybox sh
# needs: busybox sort tr wc ls tee cmp grep
# Redirections of busybox onto files of the mount, handed to child programs.
. "${0%/*}/lib/posix_children.sh"
