#!/bin/bash
# needs: bash wc tail
# A bash loop appending 1000 lines with >>.
. "${0%/*}/lib/posix_append.sh"
