#!/bin/bash
# needs: bash pwd ls cp touch stat mkfifo readlink realpath find mv
# `cd "$M"` in bash, then children using relative paths.
. "${0%/*}/lib/posix_cd.sh"
