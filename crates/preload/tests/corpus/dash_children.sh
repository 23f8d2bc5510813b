#!/bin/dash
# needs: dash sort tr wc ls tee cmp grep
# Redirections of dash onto files of the mount, handed to child programs.
. "${0%/*}/lib/posix_children.sh"
