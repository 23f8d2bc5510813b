#!/bin/dash
# needs: dash
# Pathname expansion by dash in the mount.
. "${0%/*}/lib/posix_glob.sh"
