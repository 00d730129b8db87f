#!/usr/bin/env bash
# Builds the real Kubernetes control plane (kube-apiserver,
# kube-controller-manager, kube-scheduler) from Debian bookworm's
# `kubernetes` source package, offline, with Debian's Go, into a cache outside
# the clone keyed by the package version:
#
#   hack/kubernetes/build.sh          prints the cache's bin directory
#
# A second run finds the binaries and costs nothing. Environment:
#   K8S_CACHE   the cache (default ${XDG_CACHE_HOME:-$HOME/.cache}/csi-sidecars/kubernetes)
#
# What it does, and why (Go 1.19 meets a tree made for Go 1.15):
#   - `apt-get source --download-only` the exact version (hack/install-deps.sh
#     adds the deb-src entry), `dpkg-source -x` it (Debian's patches applied);
#   - builds in GOPATH mode (module mode with Go 1.19 refuses the vendor tree);
#   - replaces vendor/github.com/modern-go/reflect2 1.0.1 by Debian's 1.0.2:
#     with Go 1.19 the old one makes kube-apiserver fault on the first custom
#     resource it stores;
#   - generates pkg/generated/openapi (not in the tarball) with the vendored
#     openapi-gen over every package tagged +k8s:openapi-gen, as the tree's
#     build/root/Makefile.generated_files does;
#   - stamps the version (`/version` answers v1.20.2) with -X ldflags.
set -euo pipefail

DEB_VERSION=1.20.5+really1.20.2-1.1+deb12u1
KUBE_VERSION=v1.20.2
BINS=(kube-apiserver kube-controller-manager kube-scheduler)
CACHE=${K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/csi-sidecars/kubernetes}
C=$CACHE/$DEB_VERSION
OUT=$C/bin

die() {
  echo "hack/kubernetes/build.sh: $*" >&2
  exit 1
}

have_all() {
  local b
  for b in "${BINS[@]}"; do [ -x "$OUT/$b" ] || return 1; done
}
if have_all; then
  echo "$OUT"
  exit 0
fi

for c in go apt-get dpkg-source; do
  command -v "$c" >/dev/null 2>&1 || die "'$c' is missing: run hack/install-deps.sh"
done
REFLECT2=/usr/share/gocode/src/github.com/modern-go/reflect2
[ -f "$REFLECT2/reflect2.go" ] || die "$REFLECT2 is missing: run hack/install-deps.sh (golang-github-modern-go-reflect2-dev)"

mkdir -p "$C"
exec 9>"$C/.lock"
flock 9 # two builds at once (parallel suites) wait for one another
if have_all; then
  echo "$OUT"
  exit 0
fi

T0=$SECONDS
log() { echo "hack/kubernetes/build.sh: [$((SECONDS - T0))s] $*" >&2; }

# ---- the source tree, in a GOPATH ---------------------------------------------------------------
GOPATH_DIR=$C/gopath
TREE=$GOPATH_DIR/src/k8s.io/kubernetes
if [ ! -f "$TREE/.prepared" ]; then
  rm -rf "$C/src" "$GOPATH_DIR"
  mkdir -p "$C/src" "$GOPATH_DIR/src/k8s.io"
  log "fetching Debian's kubernetes $DEB_VERSION source package"
  (cd "$C/src" && apt-get source --download-only "kubernetes=$DEB_VERSION" </dev/null >"$C/fetch.log" 2>&1) ||
    die "apt-get source kubernetes=$DEB_VERSION failed (see $C/fetch.log); it needs the deb-src entry hack/install-deps.sh adds and the Debian archive"
  (cd "$C/src" && dpkg-source -x ./kubernetes_*.dsc "$TREE" >>"$C/fetch.log" 2>&1) ||
    die "dpkg-source -x failed (see $C/fetch.log)"
  rm -f "$C"/src/kubernetes_*.orig.tar.gz
  rm -rf "$TREE/vendor/github.com/modern-go/reflect2"
  cp -r "$REFLECT2" "$TREE/vendor/github.com/modern-go/reflect2"
  touch "$TREE/.prepared"
fi

export GOPATH=$GOPATH_DIR GO111MODULE=off CGO_ENABLED=0 GOFLAGS=
export GOCACHE=$C/gocache
export PATH=$GOPATH_DIR/bin:$PATH
cd "$TREE"

# ---- generated OpenAPI definitions --------------------------------------------------------------
if [ ! -f pkg/generated/openapi/zz_generated.openapi.go ]; then
  log "building openapi-gen and generating pkg/generated/openapi"
  go build -o "$C/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
  # vendor/k8s.io/* are symbolic links into staging/: -L follows them
  dirs=$(find -L pkg cmd plugin vendor/k8s.io -name '*.go' -not -path 'vendor/k8s.io/code-generator/*' \
    -not -path 'vendor/k8s.io/sample-apiserver/*' -print0 |
    xargs -0 grep -l '+k8s:openapi-gen=' | xargs -n1 dirname | LC_ALL=C sort -u |
    sed 's|^|k8s.io/kubernetes/|' | paste -sd, -)
  "$C/openapi-gen" --logtostderr -i "$dirs" -p k8s.io/kubernetes/pkg/generated/openapi \
    -O zz_generated.openapi -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
    -r "$C/openapi-violations.report" >"$C/openapi-gen.log" 2>&1 ||
    die "openapi-gen failed (see $C/openapi-gen.log)"
fi

# ---- the three binaries -------------------------------------------------------------------------
ldflags="-s -w"
for key in gitVersion:$KUBE_VERSION gitMajor:1 gitMinor:20 gitTreeState:clean \
  buildDate:$(date -u +%Y-%m-%dT%H:%M:%SZ) gitCommit:debian-$DEB_VERSION; do
  for pkg in client-go/pkg/version component-base/version; do
    ldflags+=" -X k8s.io/kubernetes/vendor/k8s.io/$pkg.${key%%:*}=${key#*:}"
  done
done
mkdir -p "$C/tmpbin"
for b in "${BINS[@]}"; do
  log "building $b (a cold build of all three takes about 3 minutes on 2 cores)"
  go build -ldflags "$ldflags" -o "$C/tmpbin/$b" "./cmd/$b" >"$C/build-$b.log" 2>&1 ||
    die "go build ./cmd/$b failed (see $C/build-$b.log)"
done
"$C/tmpbin/kube-apiserver" --version | grep -q "$KUBE_VERSION" || die "kube-apiserver --version does not say $KUBE_VERSION"
mkdir -p "$OUT"
for b in "${BINS[@]}"; do mv "$C/tmpbin/$b" "$OUT/$b"; done
log "done: $OUT"
echo "$OUT"
