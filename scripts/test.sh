#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every ctest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh "$@"
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j2 --timeout 600
