#!/usr/bin/env bash
# The default model's quality gate (docs: models/README.md): on JFLEG dev, GLEU against the
# copy-the-source baseline (gate: at least +3 points), the held-out synthetic set (gate: at most
# 5% of correct sentences changed), and FP8 against bf16 with attention FP8 on and off (GLEU
# delta and exact-match agreement), the two comparisons in parallel, one core each; then, where
# the CPU has VNNI, the cpu backend's int8 (engine.quantization int8, src/cpu_matmul/) against
# its f32 on the same model (gate: GLEU within 0.3, at least 97% of outputs identical).
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
if grep -qm1 -wE 'avx512_vnni|avx_vnni' /proc/cpuinfo; then
  for q in none int8; do
    # OpenMP's idle threads spin unless told not to (docs/OPERATIONS.md).
    OMP_WAIT_POLICY=passive build/gecd eval "${common[@]}" --set engine.quantization=$q \
      --report-outputs --report "$out/cpu_$q.json" >"$out/cpu_$q.txt" 2>&1 || status=1
  done
  echo "== int8 against f32 on the cpu backend"
  python3 - "$out/cpu_none.json" "$out/cpu_int8.json" <<'PY' || status=$((status > 0 ? status : 3))
import json, sys
f32, int8 = (json.load(open(p)) for p in sys.argv[1:3])
delta = int8["jfleg"]["model"]["gleu"] - f32["jfleg"]["model"]["gleu"]
a, b = (r["outputs"]["jfleg"] for r in (f32, int8))
same = sum(x["model"] == y["model"] for x, y in zip(a, b))
print(f"GLEU f32 {f32['jfleg']['model']['gleu']:.2f}, int8 delta {delta:+.2f} (gate: within 0.3); "
      f"identical outputs {same} / {len(a)} ({100 * same / len(a):.1f}%, gate: >= 97%)")
sys.exit(0 if abs(delta) <= 0.3 and same >= 0.97 * len(a) else 3)
PY
fi
exit $status
