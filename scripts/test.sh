#!/usr/bin/env bash
# The tests, on a fresh Debian machine too: installs what they run
# (scripts/test-deps.sh), then runs the workspace's tests. Arguments go to cargo test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/test-deps.sh
exec cargo test --workspace --locked "$@"
