#!/usr/bin/env bash
# The default model's quality gate (docs: models/README.md): on JFLEG dev, GLEU against the
# copy-the-source baseline (gate: at least +3 points), the held-out synthetic set (gate: at most
# 5% of correct sentences changed), and FP8 against bf16 with attention FP8 on and off (GLEU
# delta and exact-match agreement), the two comparisons in parallel, one core each.
# Needs a build (scripts/build.sh makes build/gecd and the FP8 copies in build/models/) and
# JFLEG at ../shared/data/jfleg (GECD_JFLEG overrides). JSON reports go to build/eval/.
set -euo pipefail
cd "$(dirname "$0")/.."
jfleg=${GECD_JFLEG:-../shared/data/jfleg}
out=${GECD_EVAL_OUT:-build/eval}
mkdir -p "$out"
common=(--config configs/gecd.yaml --set engine.threads=1 --jfleg "$jfleg")

build/gecd eval "${common[@]}" --synthetic models/heldout_synthetic.tsv \
  --compare build/models/gecd-gec-small-fp8 --report "$out/bf16_vs_fp8.json" \
  --min-gleu-delta 3 --max-false-change-rate 0.05 > "$out/bf16_vs_fp8.txt" 2>&1 &
fp8=$!
build/gecd eval "${common[@]}" --compare build/models/gecd-gec-small-fp8-mlp \
  --report "$out/bf16_vs_fp8_mlp.json" > "$out/bf16_vs_fp8_mlp.txt" 2>&1 &
mlp=$!
status=0
wait $fp8 || status=$?
wait $mlp || status=$((status > 0 ? status : $?))
for f in "$out/bf16_vs_fp8.txt" "$out/bf16_vs_fp8_mlp.txt"; do
  echo "== $f"
  grep -Ev '^eval [^:]*: [0-9]+/[0-9]+ \(' "$f" || true
done
exit $status
