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

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi

echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q </dev/null
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
