#!/usr/bin/env bash
# Builds the images (docker/Dockerfile, docker/Dockerfile.cuda) with Debian's buildah and checks
# them with podman; then scripts/estargz_check.sh converts the CPU image to eStargz. Slow (the
# builds), so not part of .ci/run; needs root, the Debian mirror, and for the CUDA image the
# toolkit in /usr/local/cuda (skipped without it, or with GECD_IMAGE_CUDA=0).
#
#   bash scripts/image_check.sh            prints a summary at the end (docs/DEPLOY.md)
#
# The base, debian:12 (and debian:12-slim, the same image), is made here with debootstrap from
# the Debian mirror apt uses when no registry has one; trimmed as Debian's slim images are
# (no docs, man pages, locales or apt lists). Compiles go through this machine's ccache (mounted
# into the build stage) when ccache is installed. What the CPU image must do:
#   - answer the README's request through its published gRPC port, with the README's correction;
#   - run the daemon as uid 10001, not root; report ready on /readyz and to its HEALTHCHECK;
#   - exit 2 naming the path when the model directory is missing or unreadable;
#   - with a mounted certificate: gRPC over TLS only and HTTPS /readyz; a missing one exits 2;
#   - weigh at most 190 MB (uncompressed) without the model layer (150 MB until the image gained
#     oneDNN's 40 MB library, the int8/bf16 matmuls: docs/DEPLOY.md).
# The CUDA image (no GPU needed): it builds, `gecd version` runs in it, ldd finds every library.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
WORK="${GECD_IMAGE_WORK:-/var/tmp/gecd-image-check}"
CPU_IMAGE=localhost/gecd:cpu
CUDA_IMAGE=localhost/gecd:cuda
MAX_RUNTIME_MB=190
README_TEXT="She go to school yesterday and they was happy."
README_CORRECTION="She went to school yesterday and they were happy."
mkdir -p "$WORK"
SUMMARY="$WORK/summary.txt"
: >"$SUMMARY"
say() { echo "image_check: $*"; }
fail() { echo "image_check: FAIL: $*" >&2; exit 1; }
summary() { echo "$*" | tee -a "$SUMMARY"; }

# --- Tools: Debian's packages, installed when missing (not in install_deps.sh: CI builds no
# images). The client below uses the build's python3-grpcio, protoc and grpc_python_plugin.
# iptables: netavark (podman's network backend) runs it to set up the bridge and the published
# ports, but Debian 12's netavark does not depend on it and podman only suggests it, so without
# it the first `podman run` fails ("netavark: No such file or directory").
packages=(buildah podman runc debootstrap netavark aardvark-dns iptables curl stargz-snapshotter
          containerd docker-registry python3-grpcio python3-protobuf protobuf-compiler
          protobuf-compiler-grpc)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# runc, and limits no higher than this machine's own: podman's defaults for root (nofile and
# nproc 1048576) are above what a sandboxed host may grant, and runc then refuses to start.
PODMAN=(podman --runtime runc)
LIMITS=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit nproc=4096:4096)
# The short runs without the HEALTHCHECK: podman would schedule it with systemd, absent here.
ONCE=(--rm --no-healthcheck "${LIMITS[@]}")

# --- The base image.
if ! podman image exists localhost/debian:12; then
  mirror="$(awk '$1 == "URIs:" { print $2; exit }' /etc/apt/sources.list.d/debian.sources \
            2>/dev/null || true)"
  mirror="${mirror:-http://deb.debian.org/debian}"
  say "making debian:12 with debootstrap from $mirror"
  rootfs="$WORK/rootfs"
  rm -rf "$rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$WORK/debootstrap.log"
  cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb ${mirror%/debian}/debian-security bookworm-security main
EOF
  chroot "$rootfs" apt-get clean
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/log/* \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
    "$rootfs"/usr/share/locale/* "$rootfs"/var/cache/debconf/*-old
  : >"$rootfs/etc/machine-id"
  tar -C "$rootfs" --numeric-owner -c . |
    podman import --change 'CMD ["bash"]' - localhost/debian:12 >/dev/null
  podman tag localhost/debian:12 localhost/debian:12-slim
  rm -rf "$rootfs"
fi

# --- Builds. One at a time (the machine's cores are shared); --layers keeps each step cached.
version="$(sed -n 's/.*define GECD_VERSION_STRING "\(.*\)".*/\1/p' include/gecd/version.h)"
revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
git diff --quiet HEAD 2>/dev/null || revision="$revision-dirty"
source_url="$(git config --get remote.origin.url 2>/dev/null || echo unknown)"
build_args=(--build-arg DEBIAN=localhost/debian:12-slim --build-arg "GECD_VERSION=$version"
            --build-arg "GECD_REVISION=$revision" --build-arg "GECD_SOURCE=$source_url")
# The labels again as flags: buildah 1.28's layer cache keys the LABEL step by its text, not by
# the ARG values in it, and would keep the previous build's revision.
build_args+=(--label "org.opencontainers.image.version=$version"
             --label "org.opencontainers.image.revision=$revision"
             --label "org.opencontainers.image.source=$source_url")
mounts=()
if command -v ccache >/dev/null; then
  mounts+=(-v "$(ccache -k cache_dir):/ccache")
  build_args+=(--build-arg GECD_CCACHE=/ccache)
fi
build() {  # build DOCKERFILE IMAGE [extra buildah flags...]
  local file="$1" image="$2" start=$SECONDS; shift 2
  say "building $image from $file"
  buildah bud --layers --pull=never --format docker --network host "${build_args[@]}" \
    "${mounts[@]}" "$@" -f "$file" -t "$image" . >"$WORK/build-$(basename "$file").log" 2>&1 ||
    { tail -40 "$WORK/build-$(basename "$file").log" >&2; fail "build of $file"; }
  say "built $image in $((SECONDS - start)) s"
}
build docker/Dockerfile "$CPU_IMAGE"

# layer_table IMAGE: per layer, uncompressed MB and the instruction; then the totals. The last
# layer is the model's (the Dockerfiles' order): checked against the model directory's size.
model_bytes="$(du -sb models/gecd-gec-small | cut -f1)"
layer_table() {
  podman history --format json "$1" | /usr/bin/python3 -c '
import json, sys
model_bytes = int(sys.argv[1])
rows = [r for r in json.load(sys.stdin) if r["size"] > 0][::-1]
total = sum(r["size"] for r in rows)
for r in rows:
    step = " ".join(r["CreatedBy"].replace("/bin/sh -c #(nop) ", "").split())
    if step.startswith(("COPY ", "ADD ")):
        step = step.split()[0] + " -> " + step.rsplit(" in ", 1)[-1]
    elif step.startswith("/bin/sh -c "):
        step = "RUN " + step[len("/bin/sh -c "):]
    mb = r["size"] / 1e6
    print(f"  {mb:8.1f} MB  {step[:80]}")
model = rows[-1]["size"]
if abs(model - model_bytes) > 0.05 * model_bytes:
    sys.exit(f"image_check: FAIL: the last layer ({model} B) is not the model ({model_bytes} B)")
print(f"  {total / 1e6:8.1f} MB  total")
print(f"  {(total - model) / 1e6:8.1f} MB  without the model layer")
' "$model_bytes"
}

# --- The CPU image: labels, user, size.
summary "CPU image $CPU_IMAGE ($(podman image inspect --format '{{.Id}}' "$CPU_IMAGE" | cut -c1-12)):"
layers="$(layer_table "$CPU_IMAGE")"
summary "$layers"
runtime_mb="$(awk '/without the model layer/ { print $1 }' <<<"$layers")"
/usr/bin/python3 -c "import sys; sys.exit(0 if float('$runtime_mb') <= $MAX_RUNTIME_MB else 1)" ||
  fail "the runtime image without the model is $runtime_mb MB (> $MAX_RUNTIME_MB MB)"
labels="$(podman image inspect --format \
  '{{index .Labels "org.opencontainers.image.version"}} {{index .Labels "org.opencontainers.image.revision"}}' \
  "$CPU_IMAGE")"
[[ "$labels" == "$version $revision" ]] || fail "OCI labels: '$labels'"
user="$(podman image inspect --format '{{.Config.User}}' "$CPU_IMAGE")"
[[ "$user" == "10001:10001" ]] || fail "image user '$user'"
summary "  labels: version $version, revision $revision; user $user"
# No build tools in the runtime image.
tools="$("${PODMAN[@]}" run "${ONCE[@]}" --entrypoint bash "$CPU_IMAGE" -c \
  'for t in gcc g++ cc c++ cmake ninja make ld as; do command -v "$t"; done; true')"
[[ -z "$tools" ]] || fail "build tools in the runtime image: $tools"
not_found="$("${PODMAN[@]}" run "${ONCE[@]}" --entrypoint bash "$CPU_IMAGE" -c \
  'ldd /usr/local/bin/gecd /usr/local/bin/gecd-load /usr/local/bin/*.so /usr/local/lib/gecd/* |
   grep "not found" || true')"
[[ -z "$not_found" ]] || fail "the CPU image lacks libraries: $not_found"

# --- Run it: the README's request through the published port.
free_port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
grpc_port="$(free_port)"
metrics_port="$(free_port)"
name="gecd-image-check-$$"
config_in_image=/opt/gecd/configs/gecd.yaml
cleanup() { "${PODMAN[@]}" rm -f "$name" >/dev/null 2>&1 || true; }
trap cleanup EXIT
"${PODMAN[@]}" run -d "${LIMITS[@]}" --health-interval disable --name "$name" -p "127.0.0.1:$grpc_port:50051" \
  -p "127.0.0.1:$metrics_port:9100" --shm-size 64m "$CPU_IMAGE" >/dev/null
start=$SECONDS
until curl -fsS "http://127.0.0.1:$metrics_port/readyz" >/dev/null 2>&1; do
  if ((SECONDS - start > 120)) || [[ "$("${PODMAN[@]}" inspect -f '{{.State.Running}}' "$name")" != true ]]; then
    "${PODMAN[@]}" logs "$name" 2>&1 | tail -20 >&2
    fail "the container did not become ready"
  fi
  sleep 1
done
ready_s=$((SECONDS - start))
reply="$(/usr/bin/python3 - "127.0.0.1:$grpc_port" "$README_TEXT" <<'PY'
import os, sys, tempfile
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "e2e"))
from client_test import generate_stubs
with tempfile.TemporaryDirectory() as out:
    generate_stubs(out)
    import grpc
    from gecd.v1 import grammar_pb2, grammar_pb2_grpc
    stub = grammar_pb2_grpc.GrammarCorrectionStub(grpc.insecure_channel(sys.argv[1]))
    print(stub.Correct(grammar_pb2.CorrectRequest(text=sys.argv[2]), timeout=60), end="")
PY
)" || fail "the README's request failed"
grep -qF "corrected_text: \"$README_CORRECTION\"" <<<"$reply" ||
  fail "unexpected reply to the README's request: $reply"
uid="$("${PODMAN[@]}" exec "$name" awk '/^Uid:/ { print $2 }' /proc/1/status)"
[[ "$uid" == 10001 ]] || fail "the daemon runs as uid $uid"
health="$("${PODMAN[@]}" healthcheck run "$name" >/dev/null 2>&1 && echo healthy || echo unhealthy)"
[[ "$health" == healthy ]] || fail "HEALTHCHECK: $health"
summary "  run: ready on /readyz after ${ready_s} s; HEALTHCHECK $health; daemon uid $uid"
summary "  README request: $(grep corrected_text <<<"$reply")"
cleanup

# --- TLS in the image: gRPC over TLS only (tls.*) and HTTPS on the metrics port (metrics_tls.*),
# from a certificate mounted read-only as a Kubernetes secret is. The README's request answers over
# TLS and not in plaintext; /readyz answers over HTTPS with the CA and not over plain HTTP.
tls_dir="$WORK/tls"
rm -rf "$tls_dir"
mkdir -p "$tls_dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=image check CA" \
  -keyout "$tls_dir/ca.key" -out "$tls_dir/ca.crt" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
  -keyout "$tls_dir/tls.key" -out "$tls_dir/tls.csr" 2>/dev/null
openssl x509 -req -in "$tls_dir/tls.csr" -CA "$tls_dir/ca.crt" -CAkey "$tls_dir/ca.key" \
  -CAcreateserial -days 2 -out "$tls_dir/tls.crt" \
  -extfile <(printf 'subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n') 2>/dev/null
chmod 644 "$tls_dir/tls.key"  # read by uid 10001 in the container (a throwaway test key)
grpc_port="$(free_port)"
metrics_port="$(free_port)"
"${PODMAN[@]}" run -d "${LIMITS[@]}" --no-healthcheck --name "$name" \
  -p "127.0.0.1:$grpc_port:50051" -p "127.0.0.1:$metrics_port:9100" --shm-size 64m \
  -v "$tls_dir:/tls:ro" "$CPU_IMAGE" serve --config "$config_in_image" \
  --set server.metrics_listen=0.0.0.0:9100 --set tls.cert_file=/tls/tls.crt \
  --set tls.key_file=/tls/tls.key --set metrics_tls.cert_file=/tls/tls.crt \
  --set metrics_tls.key_file=/tls/tls.key >/dev/null
start=$SECONDS
until curl -fsS --cacert "$tls_dir/ca.crt" --resolve "localhost:$metrics_port:127.0.0.1" \
        "https://localhost:$metrics_port/readyz" >/dev/null 2>&1; do
  if ((SECONDS - start > 120)) || [[ "$("${PODMAN[@]}" inspect -f '{{.State.Running}}' "$name")" != true ]]; then
    "${PODMAN[@]}" logs "$name" 2>&1 | tail -20 >&2
    fail "the TLS container did not become ready on https://.../readyz"
  fi
  sleep 1
done
! curl -fsS --max-time 5 "http://127.0.0.1:$metrics_port/readyz" >/dev/null 2>&1 ||
  fail "plain HTTP /readyz answered on the HTTPS metrics port"
tls_reply="$(/usr/bin/python3 - "127.0.0.1:$grpc_port" "$README_TEXT" "$tls_dir/ca.crt" <<'PY'
import os, sys, tempfile
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "e2e"))
from client_test import generate_stubs
with tempfile.TemporaryDirectory() as out:
    generate_stubs(out)
    import grpc
    from gecd.v1 import grammar_pb2, grammar_pb2_grpc
    request = grammar_pb2.CorrectRequest(text=sys.argv[2])
    plain = grammar_pb2_grpc.GrammarCorrectionStub(grpc.insecure_channel(sys.argv[1]))
    try:
        plain.Correct(request, timeout=10)
        sys.exit("a plaintext call was answered by the TLS-only daemon")
    except grpc.RpcError as e:
        print("plaintext call:", e.code().name)
    with open(sys.argv[3], "rb") as f:
        credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
    channel = grpc.secure_channel(sys.argv[1], credentials,
                                  options=[("grpc.ssl_target_name_override", "localhost")])
    stub = grammar_pb2_grpc.GrammarCorrectionStub(channel)
    print(stub.Correct(request, timeout=60), end="")
PY
)" || { "${PODMAN[@]}" logs "$name" 2>&1 | tail -20 >&2; fail "the TLS check failed: $tls_reply"; }
grep -qF "corrected_text: \"$README_CORRECTION\"" <<<"$tls_reply" ||
  fail "unexpected reply over TLS: $tls_reply"
summary "  TLS: ready on https /readyz after $((SECONDS - start)) s (plain HTTP refused);" \
  "$(grep '^plaintext call' <<<"$tls_reply") ; over TLS: $(grep corrected_text <<<"$tls_reply")"
cleanup

# --- A missing or unreadable model: exit 2, naming the path.
expect_exit_2() {  # expect_exit_2 WHAT TEXT podman-run-args...
  local what="$1" text="$2" out rc; shift 2
  set +e
  out="$(timeout 120 "${PODMAN[@]}" run "${ONCE[@]}" "$@" 2>&1)"
  rc=$?
  set -e
  [[ $rc -eq 2 ]] || { echo "$out" | tail -5 >&2; fail "$what: exit $rc, not 2"; }
  grep -qF "$text" <<<"$out" || { echo "$out" | tail -5 >&2; fail "$what: no '$text'"; }
  summary "  $what: exit 2: $(grep -F "$text" <<<"$out" | tail -1 | sed 's/^.*\] //')"
}
expect_exit_2 "missing model" "/nonexistent: no such model directory" \
  "$CPU_IMAGE" serve --config "$config_in_image" --set model.dir=/nonexistent
unreadable="$WORK/unreadable-model"
rm -rf "$unreadable"
cp -r models/gecd-gec-small "$unreadable"
chmod 000 "$unreadable"
expect_exit_2 "unreadable model" "/models/m: cannot read this model directory: Permission denied" \
  -v "$unreadable:/models/m:ro" "$CPU_IMAGE" serve --config "$config_in_image" --set model.dir=/models/m
chmod 755 "$unreadable"
rm -rf "$unreadable"
expect_exit_2 "missing certificate" "tls.cert_file: cannot open /tls/nope.crt" \
  -v "$tls_dir:/tls:ro" "$CPU_IMAGE" serve --config "$config_in_image" \
  --set tls.cert_file=/tls/nope.crt --set tls.key_file=/tls/tls.key

# --- The CUDA image.
if [[ "${GECD_IMAGE_CUDA:-1}" != 0 && -x /usr/local/cuda/bin/nvcc ]]; then
  build docker/Dockerfile.cuda "$CUDA_IMAGE" -v /usr/local/cuda:/usr/local/cuda:ro
  summary "CUDA image $CUDA_IMAGE ($(podman image inspect --format '{{.Id}}' "$CUDA_IMAGE" | cut -c1-12)):"
  summary "$(layer_table "$CUDA_IMAGE")"
  summary "  CUDA libraries: $("${PODMAN[@]}" run "${ONCE[@]}" --entrypoint ls "$CUDA_IMAGE" /usr/local/lib/gecd | tr '\n' ' ')"
  not_found="$("${PODMAN[@]}" run "${ONCE[@]}" --entrypoint bash "$CUDA_IMAGE" -c \
    'ldd /usr/local/bin/gecd /usr/local/bin/gecd-load /usr/local/lib/gecd/*.so* | grep "not found" || true')"
  [[ -z "$not_found" ]] || fail "the CUDA image lacks libraries: $not_found"
  version_out="$("${PODMAN[@]}" run "${ONCE[@]}" "$CUDA_IMAGE" version 2>&1)" ||
    fail "gecd version in the CUDA image: $version_out"
  summary "  ldd: every library found; gecd version: $(tr '\n' ' ' <<<"$version_out")"
else
  say "CUDA image skipped (no /usr/local/cuda/bin/nvcc, or GECD_IMAGE_CUDA=0)"
fi

# --- eStargz.
if [[ "${GECD_IMAGE_ESTARGZ:-1}" != 0 ]]; then
  bash scripts/estargz_check.sh "$CPU_IMAGE" | tee -a "$SUMMARY"
fi

echo
echo "image_check: passed. Summary ($SUMMARY):"
cat "$SUMMARY"
