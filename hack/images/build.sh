#!/usr/bin/env bash
# Container images of the sidecars and the example driver, built offline
# with podman (vfs storage) FROM scratch: each holds its stripped binary and
# exactly the shared libraries it loads (ldd), in one base layer the images
# share, a non-root user (65532) and ENTRYPOINT the binary.
#
#   hack/images/build.sh [build-dir]             podman builds every image (make images)
#   hack/images/build.sh --context [build-dir]   only fills the build context
#   hack/images/build.sh --rootfs DIR IMAGE [build-dir]
#                                                assembles IMAGE's root filesystem in DIR
#                                                without podman, from the COPY lines of
#                                                its Containerfile (and its base's)
#
# IMAGE is one of: csi-provisioner csi-attacher csi-resizer csi-snapshotter csi-node-driver-registrar
# livenessprobe example-csi-driver. Environment: IMAGES (a subset, space-separated), IMAGE_TAG (default: git describe, and
# "latest" as well), PODMAN_OPTS (extra global podman options, e.g.
# "--root DIR --runroot DIR" for a private store). The context is
# <build-dir>/images/context.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
ALL_IMAGES=(csi-provisioner csi-attacher csi-resizer csi-snapshotter csi-node-driver-registrar livenessprobe example-csi-driver)
read -r -a IMAGES <<<"${IMAGES:-${ALL_IMAGES[*]}}"

mode=build
rootfs_dir="" rootfs_image=""
case ${1:-} in
  --context) mode=context; shift ;;
  --rootfs)
    mode=rootfs
    rootfs_dir=${2:?--rootfs DIR IMAGE}
    rootfs_image=${3:?--rootfs DIR IMAGE}
    shift 3
    ;;
esac
B=${1:-$ROOT/build}
[ -d "$B" ] || B="$ROOT/$B"
B=$(cd "$B" && pwd)
CTX="$B/images/context"

die() { echo "images: $*" >&2; exit 1; }

# ---- the build context: base/ (libraries, loader, passwd) and bin/ ------------------------------

# libs BINARY: the absolute paths of the shared objects BINARY loads, the
# dynamic loader included (ldd resolves the whole dependency tree)
libs() {
  local out
  out=$(ldd "$1") || die "ldd $1 failed"
  printf '%s\n' "$out" | awk '
    $2 == "=>" && $3 ~ /^\// { print $3; next }
    $1 ~ /^\// { print $1 }'
}

fill_context() {
  local img f found bins=()
  rm -rf "$CTX"
  mkdir -p "$CTX/base/etc" "$CTX/bin"
  for img in "${IMAGES[@]}"; do
    found="$B/bin/$img"
    [ -x "$found" ] || die "no $found: build first (make)"
    if [ "$mode" = build ] && ldd "$found" 2>/dev/null | grep -q 'libasan\|libubsan'; then
      die "$found is a sanitizer build: use the plain build"
    fi
    # Debug information is not needed at run time (it is most of the file).
    strip --strip-unneeded -o "$CTX/bin/$img" "$found"
    bins+=("$found")
  done
  # One layer with the union of every image's libraries (they are the same
  # set today: the binaries link the same library), at the paths ldd names,
  # as files (the symlinks in the host's paths are resolved).
  local lib
  for f in "${bins[@]}"; do libs "$f"; done | sort -u >"$CTX/base.files"
  while read -r lib; do
    mkdir -p "$CTX/base$(dirname "$lib")"
    cp -L "$lib" "$CTX/base$lib"
  done <"$CTX/base.files"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n' \
    >"$CTX/base/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$CTX/base/etc/group"
  # Reproducible layers: fixed times and modes.
  find "$CTX" -exec touch -h -d @0 {} +
  chmod -R u=rwX,go=rX "$CTX"
}

# ---- a root filesystem from the Containerfiles, without podman -----------------------------------

# apply_copies CONTAINERFILE DIR: follows FROM to the base's Containerfile,
# then applies each "COPY src dest" (relative to the context) into DIR
apply_copies() {
  local cf=$1 dir=$2 line src dest
  if grep -q '^FROM \${BASE}' "$cf"; then apply_copies "$HERE/Containerfile.base" "$dir"; fi
  while read -r line; do
    set -- $line
    [ "${1:-}" = COPY ] || continue
    src=$2 dest=$3
    if [ -d "$CTX/$src" ]; then
      mkdir -p "$dir$dest"
      cp -a "$CTX/${src%/}/." "$dir$dest"
    else
      mkdir -p "$(dirname "$dir$dest")"
      cp -a "$CTX/$src" "$dir$dest"
    fi
  done <"$cf"
}

fill_context
if [ "$mode" = context ]; then
  echo "$CTX"
  exit 0
fi
if [ "$mode" = rootfs ]; then
  [ -e "$HERE/Containerfile.$rootfs_image" ] || die "no image $rootfs_image (one of ${ALL_IMAGES[*]})"
  mkdir -p "$rootfs_dir"
  apply_copies "$HERE/Containerfile.$rootfs_image" "$rootfs_dir"
  echo "$rootfs_dir"
  exit 0
fi

command -v podman >/dev/null || die "podman is not installed (apt-get install podman)"
tag=${IMAGE_TAG:-$(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo dev)}
# shellcheck disable=SC2086 # PODMAN_OPTS is a list of options
P() { podman --storage-driver vfs ${PODMAN_OPTS:-} "$@"; }
build() {
  local name=$1 cf=$2
  P build --quiet --pull=never --format oci --build-arg "BASE=localhost/csi-sidecars/base:$tag" \
    -f "$cf" -t "localhost/csi-sidecars/$name:$tag" -t "localhost/csi-sidecars/$name:latest" "$CTX" >/dev/null ||
    die "podman build of $name failed"
}
build base "$HERE/Containerfile.base"
for img in "${IMAGES[@]}"; do build "$img" "$HERE/Containerfile.$img"; done

base_bytes=$(du -sb "$CTX/base" | cut -f1)
printf '%-58s %10s  %s\n' IMAGE SIZE "OWN LAYER (the rest is the shared base)"
printf '%-58s %7.1f MB  %s\n' "localhost/csi-sidecars/base:$tag" "$(echo "$base_bytes" | awk '{print $1 / 1e6}')" \
  "$(wc -l <"$CTX/base.files") shared objects"
for img in "${IMAGES[@]}"; do
  size=$(P image inspect --format '{{.Size}}' "localhost/csi-sidecars/$img:$tag")
  own=$(stat -c %s "$CTX/bin/$img")
  printf '%-58s %7.1f MB  %.1f MB binary\n' "localhost/csi-sidecars/$img:$tag" \
    "$(echo "$size" | awk '{print $1 / 1e6}')" "$(echo "$own" | awk '{print $1 / 1e6}')"
done
