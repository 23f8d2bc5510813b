#!/bin/dash
# needs: dash
# dash builtins and redirections onto files of the mount.
. "${0%/*}/lib/posix_builtins.sh"
