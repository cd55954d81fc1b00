#!/usr/bin/env bash
# Converts a gecd image to eStargz with the files its start-up reads prioritised, pushes it to a
# local registry and checks the result's tables of contents. Called by scripts/image_check.sh
# (which builds the image and installs the packages); needs root.
#
#   bash scripts/estargz_check.sh [IMAGE]        (default localhost/gecd:cpu)
#
# 1. Debian's docker-registry on 127.0.0.1 and containerd (this script's own state directories
#    and socket; both stopped at the end). podman pushes the image, ctr-remote pulls it.
# 2. `ctr-remote image optimize` runs the image's default command (gecd serve) under containerd
#    for GECD_ESTARGZ_PERIOD seconds (30), records with fanotify every file it opens, and writes
#    the eStargz image with those files prioritised (--record-out keeps the list); the daemon
#    must have logged "ready" within the period, so the list covers a whole start-up. The result
#    is pushed back to the registry.
# 3. From the registry: every layer of the eStargz manifest carries a TOC digest annotation; the
#    TOCs (stargz.index.json, each layer's last entry) hold the binary and the model; in each
#    layer the recorded files come first, before .prefetch.landmark, which marks them
#    prioritised (a layer with none of them has .no.prefetch.landmark).
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE="${1:-localhost/gecd:cpu}"
WORK="${GECD_IMAGE_WORK:-/var/tmp/gecd-image-check}/estargz"
fail() { echo "estargz_check: FAIL: $*" >&2; exit 1; }
free_port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
for tool in containerd ctr-remote docker-registry podman curl; do
  command -v "$tool" >/dev/null || fail "$tool missing (scripts/image_check.sh installs it)"
done
rm -rf "$WORK"
mkdir -p "$WORK"

pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

# --- 1. The registry and containerd.
reg_port="$(free_port)"
cat >"$WORK/registry.yml" <<EOF
version: 0.1
log: {level: error}
storage: {filesystem: {rootdirectory: $WORK/registry}, delete: {enabled: true}}
http: {addr: 127.0.0.1:$reg_port}
EOF
docker-registry serve "$WORK/registry.yml" >"$WORK/registry.log" 2>&1 &
pids+=($!)
sock="$WORK/containerd.sock"
cat >"$WORK/containerd.toml" <<EOF
version = 2
root = "$WORK/containerd/root"
state = "$WORK/containerd/state"
[grpc]
  address = "$sock"
[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
EOF
containerd --config "$WORK/containerd.toml" >"$WORK/containerd.log" 2>&1 &
pids+=($!)
for _ in $(seq 60); do
  [[ -S "$sock" ]] && curl -fsS "http://127.0.0.1:$reg_port/v2/" >/dev/null 2>&1 && break
  sleep 0.5
done
[[ -S "$sock" ]] || { tail "$WORK/containerd.log" >&2; fail "containerd did not start"; }
reg="127.0.0.1:$reg_port"
podman push -q --tls-verify=false "$IMAGE" "$reg/gecd:cpu" >/dev/null
ctr=(ctr-remote --address "$sock" --namespace gecd-check)
"${ctr[@]}" images pull --plain-http "$reg/gecd:cpu" >"$WORK/pull.log" 2>&1 ||
  { tail "$WORK/pull.log" >&2; fail "ctr-remote pull"; }
# --- 2. Record a start-up and convert.
record="$WORK/record.json"
period="${GECD_ESTARGZ_PERIOD:-30}"
"${ctr[@]}" images optimize --oci --period "$period" --record-out "$record" \
  "$reg/gecd:cpu" "$reg/gecd:cpu-esgz" >"$WORK/optimize.log" 2>&1 ||
  { tail "$WORK/optimize.log" >&2; fail "ctr-remote optimize"; }
grep -qE '\] ready($|; start-up: )' "$WORK/optimize.log" ||
  { tail "$WORK/optimize.log" >&2; fail "the daemon was not ready within $period s of the recording"; }
"${ctr[@]}" images push --plain-http "$reg/gecd:cpu-esgz" >"$WORK/push.log" 2>&1 ||
  { tail "$WORK/push.log" >&2; fail "ctr-remote push"; }

# --- 3. Check the TOCs, from the registry.
/usr/bin/python3 - "$reg" "$record" "$WORK" <<'PY'
import gzip, io, json, sys, tarfile, urllib.request
reg, record, work = sys.argv[1:]
# The record: each file opened at start-up, with the layer it was read from (the topmost that
# has it), in the order first opened.
traced, by_layer = [], {}
for line in open(record):
    e = json.loads(line)
    if e["path"] not in traced:
        traced.append(e["path"])
        by_layer.setdefault(e["layerIndex"], []).append(e["path"])
def get(path, accept):
    req = urllib.request.Request(f"http://{reg}{path}", headers={"Accept": accept})
    return urllib.request.urlopen(req).read()
docker = "application/vnd.docker.distribution.manifest.v2+json"
oci = "application/vnd.oci.image.manifest.v1+json"
plain = json.loads(get("/v2/gecd/manifests/cpu", f"{docker}, {oci}"))
esgz = json.loads(get("/v2/gecd/manifests/cpu-esgz", oci))
def clean(name):
    """A TOC entry's name as the record writes paths: relative, without "./"."""
    return name[2:] if name.startswith("./") else name.lstrip("/")
def fail(msg):
    sys.exit(f"estargz_check: FAIL: {msg}")
mb = lambda n: f"{n / 1e6:.1f} MB"
print(f"eStargz ({reg}/gecd:cpu-esgz), compressed layer sizes, gzip -> eStargz:")
toc_files, prioritised_total = set(), 0
for i, (a, b) in enumerate(zip(plain["layers"], esgz["layers"])):
    if "containerd.io/snapshot/stargz/toc.digest" not in b.get("annotations", {}):
        fail(f"layer {i} has no TOC digest annotation")
    blob = get(f"/v2/gecd/blobs/{b['digest']}", "*/*")
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        names = tar.getnames()
        if names[-1] != "stargz.index.json":
            fail(f"layer {i}: the last entry is {names[-1]}, not stargz.index.json")
        toc = json.load(tar.extractfile("stargz.index.json"))
    entries = [clean(e["name"]) for e in toc["entries"]]
    toc_files.update(entries)
    regular = [clean(e["name"]) for e in toc["entries"] if e["type"] == "reg"]
    mine = by_layer.get(i, [])
    missing = [p for p in mine if p not in set(entries)]
    if missing:
        fail(f"layer {i}: recorded files not in its TOC: {missing[:5]}")
    if mine:
        if ".prefetch.landmark" not in entries:
            fail(f"layer {i}: {len(mine)} recorded files but no .prefetch.landmark")
        landmark = entries.index(".prefetch.landmark")
        late = [p for p in mine if entries.index(p) > landmark]
        if late:
            fail(f"layer {i}: not prioritised: {late[:5]}")
        kind = f"{len(mine)} prioritised"
        prioritised_total += len(mine)
    else:
        if ".no.prefetch.landmark" not in entries:
            fail(f"layer {i}: no recorded files and no .no.prefetch.landmark")
        kind = "none read at start-up"
    print(f"  layer {i}: {mb(a['size']):>9} -> {mb(b['size']):>9}, {len(regular):5} files, {kind}")
for must in ("usr/local/bin/gecd", "opt/gecd/models/gecd-gec-small/model.safetensors"):
    if must not in toc_files:
        fail(f"{must} is in no TOC")
    if must not in traced:
        fail(f"{must} was not read at start-up (the record)")
print(f"  total: {mb(sum(l['size'] for l in plain['layers']))} -> "
      f"{mb(sum(l['size'] for l in esgz['layers']))}; TOCs hold usr/local/bin/gecd and "
      f"the model; {prioritised_total} of {len(traced)} recorded files prioritised")
with open(f"{work}/prioritised.txt", "w") as f:
    f.write("\n".join(traced) + "\n")
libraries = [p for p in traced if "/lib/" in p or p.startswith("lib")]
print(f"  prioritised ({work}/prioritised.txt): {len(libraries)} shared libraries under */lib/, "
      f"and " + ", ".join(p for p in traced if p not in libraries))
PY
