#!/usr/bin/env bash
# The default model's quality gate (docs: models/README.md): on JFLEG dev, GLEU against the
# copy-the-source baseline (gate: at least +3 points), the held-out synthetic set (gate: at most
# 5% of correct sentences changed), and FP8 against bf16 with attention FP8 on and off (GLEU
# delta and exact-match agreement), the two comparisons in parallel, one core each; then the cpu
# backend's int8 (engine.quantization int8, where the CPU has VNNI) and bf16 (engine.cpu_matmul
# bf16, where it has AVX512-BF16 or AMX-BF16), both src/cpu_matmul/, against its f32
# (engine.cpu_matmul f32) on the same model (gate: GLEU within 0.3, at least 97% of outputs
# identical).
# Needs a build (scripts/build.sh makes build/gecd and the FP8 copies in build/models/) and
# JFLEG at ../shared/data/jfleg (GECD_JFLEG overrides). JSON reports go to build/eval/.
set -euo pipefail
cd "$(dirname "$0")/.."
jfleg=${GECD_JFLEG:-../shared/data/jfleg}
out=${GECD_EVAL_OUT:-build/eval}
mkdir -p "$out"
# f32 matmuls unless a run sets otherwise (a later --set wins): the FP8 comparisons measure the
# checkpoints' precision against the oracle, not the CPU's bf16 (engine.cpu_matmul auto).
common=(--config configs/gecd.yaml --set engine.threads=1 --set engine.cpu_matmul=f32 --jfleg "$jfleg")

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
# The cpu backend's faster paths against its f32 (engine.cpu_matmul f32, the oracle) on the same
# model, each where the CPU has what it needs: int8 (VNNI) and bf16 (AVX512-BF16 or AMX-BF16).
# Gate: GLEU within 0.3, at least 97% of outputs identical.
cpu_paths=()
grep -qm1 -wE 'avx512_vnni|avx_vnni' /proc/cpuinfo && cpu_paths+=(int8)
grep -qm1 -wE 'avx512_bf16|amx_bf16' /proc/cpuinfo && cpu_paths+=(bf16)
if ((${#cpu_paths[@]} > 0)); then
  for p in f32 "${cpu_paths[@]}"; do
    case $p in
      f32) sets=(--set engine.quantization=none --set engine.cpu_matmul=f32) ;;
      int8) sets=(--set engine.quantization=int8) ;;
      bf16) sets=(--set engine.quantization=none --set engine.cpu_matmul=bf16) ;;
    esac
    build/gecd eval "${common[@]}" "${sets[@]}" \
      --report-outputs --report "$out/cpu_$p.json" >"$out/cpu_$p.txt" 2>&1 || status=1
  done
  for p in "${cpu_paths[@]}"; do
    echo "== $p against f32 on the cpu backend"
    python3 - "$out/cpu_f32.json" "$out/cpu_$p.json" "$p" <<'PY' || status=$((status > 0 ? status : 3))
import json, sys
f32, other = (json.load(open(p)) for p in sys.argv[1:3])
name = sys.argv[3]
delta = other["jfleg"]["model"]["gleu"] - f32["jfleg"]["model"]["gleu"]
a, b = (r["outputs"]["jfleg"] for r in (f32, other))
same = sum(x["model"] == y["model"] for x, y in zip(a, b))
print(f"GLEU f32 {f32['jfleg']['model']['gleu']:.2f}, {name} delta {delta:+.2f} (gate: within 0.3); "
      f"identical outputs {same} / {len(a)} ({100 * same / len(a):.1f}%, gate: >= 97%)")
sys.exit(0 if abs(delta) <= 0.3 and same >= 0.97 * len(a) else 3)
PY
  done
fi
exit $status
