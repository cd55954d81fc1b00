#!/usr/bin/env bash
# The cpu backend's matmul precisions side by side, in one run: `gecd eval` in-process on JFLEG
# dev's 754 sources with engine.cpu_matmul f32 (OpenBLAS, the oracle), bf16 (oneDNN, where the
# CPU has AVX512-BF16 or AMX-BF16) and engine.quantization int8 (oneDNN, where it has VNNI),
# ROUNDS rounds, each round's runs back to back and in the opposite order to the last, so that a
# shared box's load moves every precision alike; prints sentences/s per run, each round's ratios
# to f32 (and bf16's to int8), the load average at each round, and each precision's outputs
# against f32's.
#
#   bash bench/cpu_matmul_precisions.sh   (env: THREADS=2 ROUNDS=3 OUT=dir SETS="--set K=V ...")
#
# GOMP_SPINCOUNT=10000, as `gecd serve` starts its engine (docs/OPERATIONS.md): how long
# OpenMP's threads (oneDNN's) spin between matmuls before they sleep (OMP_WAIT_POLICY=passive
# before 2026-12-06). The default config otherwise (copy bias 2, spelling
# stage on); SETS adds overrides, e.g. SETS="--set model.copy_bias=0" for plain greedy.
# Builds nothing: first `cmake --build build --target gecd`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
JFLEG="${JFLEG:-$ROOT/../shared/data/jfleg}"
THREADS="${THREADS:-2}"
ROUNDS="${ROUNDS:-3}"
OUT="${OUT:-$BUILD/cpu-matmul/run-$(date -u +%Y%m%dT%H%M%SZ)}"
read -r -a EXTRA <<<"${SETS:-}"
[[ -x "$BUILD/gecd" ]] || { echo "no $BUILD/gecd: cmake --build $BUILD --target gecd" >&2; exit 1; }
[[ -r "$JFLEG/dev.src" ]] || { echo "no $JFLEG/dev.src (set JFLEG=DIR)" >&2; exit 1; }

paths=(f32)
# The development boxes' environment sets OPENBLAS_CORETYPE=Haswell (AVX2 sgemm on an AVX-512
# CPU): where it is set, f32 also runs with OpenBLAS's own choice (f32-own), unset.
[[ -n "${OPENBLAS_CORETYPE:-}" ]] && paths+=(f32-own)
grep -qm1 -wE 'avx512_bf16|amx_bf16' /proc/cpuinfo && paths+=(bf16)
grep -qm1 -wE 'avx512_vnni|avx_vnni' /proc/cpuinfo && paths+=(int8)
mkdir -p "$OUT"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ); threads $THREADS; paths: ${paths[*]}; out: $OUT"

run() {  # run PATH ROUND
  local sets
  case $1 in
    f32 | f32-own) sets=(--set engine.quantization=none --set engine.cpu_matmul=f32) ;;
    bf16) sets=(--set engine.quantization=none --set engine.cpu_matmul=bf16) ;;
    int8) sets=(--set engine.quantization=int8) ;;
  esac
  local unset=()
  [[ $1 == f32-own ]] && unset=(-u OPENBLAS_CORETYPE)
  env "${unset[@]}" GOMP_SPINCOUNT=10000 "$BUILD/gecd" eval --config "$ROOT/configs/gecd.yaml" \
    --set "engine.threads=$THREADS" "${sets[@]}" "${EXTRA[@]}" --jfleg "$JFLEG" \
    --report-outputs --report "$OUT/$1-r$2.json" >"$OUT/$1-r$2.txt" 2>"$OUT/$1-r$2.log" ||
    { echo "gecd eval ($1) failed: $OUT/$1-r$2.log" >&2; exit 1; }
}

for r in $(seq "$ROUNDS"); do
  order=("${paths[@]}")
  if ((r % 2 == 0)); then
    order=()
    for ((i = ${#paths[@]} - 1; i >= 0; i--)); do order+=("${paths[i]}"); done
  fi
  echo "round $r: load average $(cut -d' ' -f1-3 /proc/loadavg) (before), order ${order[*]}" |
    tee -a "$OUT/loadavg.txt"
  for p in "${order[@]}"; do run "$p" "$r"; done
  echo "round $r: load average $(cut -d' ' -f1-3 /proc/loadavg) (after)" | tee -a "$OUT/loadavg.txt"
done

for p in "${paths[@]}"; do
  echo "$p: $(grep -m1 -o 'engine backend: .*' "$OUT/$p-r1.log")"
done
python3 - "$OUT" "$ROUNDS" "${paths[@]}" <<'PY'
import json, statistics, sys
out, rounds, paths = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rep = {(p, r): json.load(open(f"{out}/{p}-r{r}.json")) for p in paths for r in range(1, rounds + 1)}
def rate(p, r):
    return rep[(p, r)]["throughput"]["model"]["sentences_per_s"]
print("sentences/s per round (" + ", ".join(paths) + "), and the ratio to f32 in that round:")
ratios = {p: [] for p in paths}
for r in range(1, rounds + 1):
    row = [f"{rate(p, r):7.1f}" for p in paths]
    for p in paths:
        ratios[p].append(rate(p, r) / rate("f32", r))
    print(f"  round {r}: " + " ".join(row) + "   ratios " +
          " ".join(f"{p} {rate(p, r) / rate('f32', r):.2f}" for p in paths))
print("median ratio to f32: " + ", ".join(f"{p} {statistics.median(ratios[p]):.2f}" for p in paths))
if "bf16" in paths and "int8" in paths:
    r8 = [rate("bf16", r) / rate("int8", r) for r in range(1, rounds + 1)]
    print("bf16 / int8 per round: " + " ".join(f"{x:.2f}" for x in r8) +
          f"; median {statistics.median(r8):.2f}")
f32 = rep[("f32", 1)]
for p in paths[1:]:
    o = rep[(p, 1)]
    a, b = f32["outputs"]["jfleg"], o["outputs"]["jfleg"]
    same = sum(x["model"] == y["model"] for x, y in zip(a, b))
    print(f"{p}: GLEU {o['jfleg']['model']['gleu']:.2f} vs f32 {f32['jfleg']['model']['gleu']:.2f} "
          f"({o['jfleg']['model']['gleu'] - f32['jfleg']['model']['gleu']:+.2f}); outputs identical "
          f"to f32's {same} / {len(a)} ({100 * same / len(a):.1f}%)")
PY
