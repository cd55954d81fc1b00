#!/usr/bin/env bash
# Measures what expensive-to-spell input does to everyone else's latency (issue 12, item 2):
# the daemon on the default config (spelling stage on), normal sentences at --qps $QPS for
# $DURATION, alone and next to a second client sending random non-words at 2.8 requests/s:
#   long:  2,000 characters (over model.max_input_tokens: refused by the cheap checks);
#   short: 300 characters (~210 tokens, under the limit: admitted, its spelling bounded).
# Prints gecd-load's report of the normal traffic for each run, and the spelling metrics.
# Builds nothing: ninja -C build gecd gecd-load. BUILD=dir picks another build (e.g. an older
# one, for a before/after figure) and CONFIG=file another config (an older binary refuses keys
# it does not know). Traffic goes to 127.0.0.1 only; every run is bounded.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
OUT="${OUT:-$(mktemp -d /tmp/gecd-hostile.XXXXXX)}"
QPS="${QPS:-20}"
DURATION="${DURATION:-20s}"
CONFIG="${CONFIG:-$ROOT/configs/gecd.yaml}"
for bin in "$BUILD/gecd" "$BUILD/gecd-load"; do
  [[ -x "$bin" ]] || { echo "missing $bin: ninja -C $BUILD gecd gecd-load" >&2; exit 1; }
done
mkdir -p "$OUT"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
GRPC_PORT="$(free_port)"; METRICS_PORT="$(free_port)"
"$BUILD/gecd" serve --config "$CONFIG" --set server.workers=2 \
  --set "server.listen=127.0.0.1:$GRPC_PORT" --set "server.metrics_listen=127.0.0.1:$METRICS_PORT" \
  --set logging.level=warn 2>"$OUT/daemon.log" &
DAEMON_PID=$!
trap 'kill -TERM $DAEMON_PID 2>/dev/null || true; wait $DAEMON_PID 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  curl -sf "http://127.0.0.1:$METRICS_PORT/readyz" >/dev/null 2>&1 && break
  kill -0 "$DAEMON_PID" 2>/dev/null || { cat "$OUT/daemon.log" >&2; exit 1; }
  sleep 0.1
done

cat >"$OUT/normal.txt" <<'TXT'
She go to school every days and like her teachers.
I has a apple and he have two oranges in his bag.
Their going too the park tomorrow if it dont rain.
The results was better then we expected last week.
He don't know nothing about the new project plans.
We was waiting for the bus since two hours already.
TXT
python3 - "$OUT" <<'PY'
import random, sys
rng = random.Random(7)
def nonwords(chars):
    words = []
    while sum(len(w) + 1 for w in words) < chars - 8:
        words.append("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(7)))
    return " ".join(words)
for name, chars in (("long", 2000), ("short", 300)):
    with open(f"{sys.argv[1]}/{name}.txt", "w") as f:
        for _ in range(200):
            f.write(nonwords(chars) + "\n")
PY

normal() {
  "$BUILD/gecd-load" --target "127.0.0.1:$GRPC_PORT" --input "$OUT/normal.txt" --qps "$QPS" \
    --duration "$DURATION" --warmup 2s --seed 1
}
hostile() {
  "$BUILD/gecd-load" --target "127.0.0.1:$GRPC_PORT" --input "$OUT/$1.txt" --qps 2.8 \
    --duration "$DURATION" --warmup 2s --channels 4 --seed 2 >"$OUT/hostile-$1.txt" 2>&1
}

echo "== normal traffic alone ($QPS req/s, $DURATION)"
normal
for kind in long short; do
  echo "== normal traffic with $kind non-word texts at 2.8 req/s beside it"
  hostile "$kind" &
  HOSTILE_PID=$!
  normal
  wait "$HOSTILE_PID" || true
  echo "-- the non-word client:"
  cat "$OUT/hostile-$kind.txt"
done
echo "== spelling metrics"
curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | grep -E '^gecd_spelling_(lookups|skipped|seconds_(sum|count))' || true
