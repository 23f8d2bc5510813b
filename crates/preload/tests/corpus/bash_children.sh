#!/bin/bash
# needs: bash sort tr wc ls tee cmp grep
# Redirections of bash onto files of the mount, handed to child programs.
. "${0%/*}/lib/posix_children.sh"
