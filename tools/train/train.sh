#!/usr/bin/env bash
# Trains gecd's default model into models/gecd-gec-small (and the held-out synthetic test set
# models/heldout_synthetic.tsv) from the Brown corpus at ../shared/data/brown, on the CPU:
# about 1 h 45 min on 2 cores. Extra arguments go to train.py (--help lists them).
# The venv is made on first use; GECD_TRAIN_VENV points at another one.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=${GECD_TRAIN_VENV:-.venv-train}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r tools/train/requirements.txt
fi
mkdir -p models/gecd-gec-small
"$venv/bin/python" -u tools/train/train.py "$@" 2>&1 | tee models/gecd-gec-small/training.log
