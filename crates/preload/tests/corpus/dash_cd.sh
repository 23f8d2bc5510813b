#!/bin/dash
# needs: dash pwd ls cp touch stat mkfifo readlink realpath find mv
# `cd "$M"` in dash, then children using relative paths.
. "${0%/*}/lib/posix_cd.sh"
