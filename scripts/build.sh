#!/usr/bin/env bash
# Installs missing Debian packages, configures and builds gecd into build/ (or $BUILD_DIR).
# Extra arguments go to cmake's configure step, e.g. -DGECD_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
build="${BUILD_DIR:-build}"
cmake -S . -B "$build" -G Ninja -DPython3_EXECUTABLE="$PWD/.venv-test/bin/python3" "$@"
cmake --build "$build"
