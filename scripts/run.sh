#!/usr/bin/env bash
# The main job: installs what is missing, builds, and corrects sentences with the default model
# and config (configs/gecd.yaml). Sentences come from the arguments, or a built-in example.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >&2
if (($# == 0)); then
  set -- "She go to school every days." "I has two cat and one dogs."
fi
exec build/gecd generate --config configs/gecd.yaml "$@"
