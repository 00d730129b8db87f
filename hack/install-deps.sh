#!/usr/bin/env bash
# Installs every Debian package the build, tests, demo and benchmarks need.
# Non-interactive and idempotent: it runs apt-get only for what is missing,
# and `apt-get update` at most once per run.
set -euo pipefail

PKGS=(
  build-essential pkg-config make gcc clang
  clang-format clang-tidy cppcheck valgrind
  libgrpc-dev libabsl-dev libc-ares-dev zlib1g-dev protobuf-compiler protobuf-c-compiler libprotobuf-c-dev libprotobuf-dev
  libjson-c-dev libcurl4-openssl-dev libyaml-dev libmicrohttpd-dev libcmocka-dev
  libssl-dev uuid-dev
  curl python3 procps openssl util-linux jq coreutils podman libclang-rt-14-dev
  # the real control plane (hack/kubernetes/): Go to build Debian's kubernetes
  # source package, dpkg-dev to unpack it, reflect2 1.0.2 for its vendor tree,
  # and etcd
  golang-go dpkg-dev golang-github-modern-go-reflect2-dev etcd-server
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

# kubectl: use whatever is on PATH (1.32 on these machines); Debian's 1.20 only when none is.
if ! command -v kubectl >/dev/null 2>&1; then
  missing+=(kubernetes-client)
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi

# hack/kubernetes/build.sh fetches Debian's kubernetes source package with
# `apt-get source`, which needs a deb-src entry: one of our own, with the URI
# and keyring of the machine's Debian entry, suite bookworm, component main.
SRC_LIST=/etc/apt/sources.list.d/csi-sidecars-deb-src.sources
need_update=0
if ! grep -qs '^Types:.*deb-src' /etc/apt/sources.list.d/*.sources &&
  ! grep -qs '^deb-src ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list; then
  uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null)
  key=$(awk '/^Signed-By:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null)
  if [ -z "$uri" ]; then
    uri=$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' \
      /etc/apt/sources.list 2>/dev/null)
  fi
  uri=${uri:-http://deb.debian.org/debian}
  key=${key:-/usr/share/keyrings/debian-archive-keyring.gpg}
  echo "install-deps: adding $SRC_LIST (deb-src $uri bookworm main)" >&2
  printf 'Types: deb-src\nURIs: %s\nSuites: bookworm\nComponents: main\nSigned-By: %s\n' "$uri" "$key" |
    $SUDO tee "$SRC_LIST.tmp" >/dev/null
  $SUDO mv "$SRC_LIST.tmp" "$SRC_LIST"
  need_update=1
fi

if [ ${#missing[@]} -eq 0 ]; then
  if [ "$need_update" = 1 ]; then
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get update -q </dev/null
  fi
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q </dev/null
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
