#!/bin/dash
# needs: dash wc tail
# A dash loop appending 1000 lines with >>.
. "${0%/*}/lib/posix_append.sh"
