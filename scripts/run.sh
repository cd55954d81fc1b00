#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs the daemon (`gecd serve`) on the
# default config (configs/gecd.yaml) and its model. Extra arguments go to `gecd serve`, e.g.
#   bash scripts/run.sh --set model.dir=/path/to/model --set server.workers=2
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >&2
exec build/gecd serve --config configs/gecd.yaml "$@"
