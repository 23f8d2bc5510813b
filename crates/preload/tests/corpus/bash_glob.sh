#!/bin/bash
# needs: bash
# Pathname expansion by bash in the mount.
. "${0%/*}/lib/posix_glob.sh"
