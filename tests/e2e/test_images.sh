#!/usr/bin/env bash
# The container images (hack/images/): csi-provisioner's root filesystem is
# assembled from the same Containerfiles and context `make images` uses, and
# its binary runs --version from it with chroot, as root and as the image's
# user 65532 (csi-resizer's, csi-snapshotter's and livenessprobe's as well). Where podman works (plain build only: sanitizer binaries are
# not for images), the base and csi-provisioner images are also built with
# podman in a private store, and the image's own filesystem, user and
# entrypoint are checked the same way.
#
#   tests/e2e/test_images.sh <build-dir>
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-${CSI_BUILD_DIR:-build}}
[ -d "$B" ] || B="$ROOT/$B"
B=$(cd "$B" && pwd)
WORK=$(mktemp -d)
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"
IMG=csi-provisioner
PODMAN=(podman --storage-driver vfs --root "$WORK/storage" --runroot "$WORK/runroot")

teardown() {
  if [ -d "$WORK/storage" ]; then
    "${PODMAN[@]}" image unmount -a >/dev/null 2>&1
    "${PODMAN[@]}" rm -a -f >/dev/null 2>&1
    "${PODMAN[@]}" system reset -f >/dev/null 2>&1
  fi
  rm -rf "$WORK" 2>/dev/null || { chmod -R u+w "$WORK" && rm -rf "$WORK"; }
}
trap teardown EXIT

LDD=$(ldd "$B/bin/$IMG")
SANITIZED=0
[[ "$LDD" == *libasan* ]] && SANITIZED=1
# chroot_run DIR USER ARGS...: runs in DIR's root filesystem with nothing
# from the host. A sanitizer build's leak check needs /proc: it gets its own,
# in a mount and pid namespace that end with it (the image has no /proc).
chroot_run() {
  local dir=$1 user=$2 rc
  shift 2
  if [ "$SANITIZED" = 1 ]; then
    mkdir -p "$dir/proc"
    unshare --mount --pid --fork --mount-proc="$dir/proc" chroot --userspec="$user" "$dir" "$@"
    rc=$?
    rmdir "$dir/proc"
    return $rc
  fi
  chroot --userspec="$user" "$dir" "$@"
}
# check_rootfs LABEL DIR: the root filesystem of csi-provisioner
check_rootfs() {
  local label=$1 dir=$2 out
  out=$(chroot_run "$dir" 0:0 /usr/bin/$IMG --version 2>&1)
  check "$label: --version runs in the image's root filesystem (chroot, root)" "$IMG $("$B/bin/$IMG" --version | cut -d' ' -f2-)" "$out"
  out=$(chroot_run "$dir" 65532:65532 /usr/bin/$IMG --version 2>&1)
  contains "$label: --version runs as the image's user 65532" "$IMG " "$out"
  check "$label: the non-root user is in /etc/passwd" "nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin" \
    "$(grep 65532 "$dir/etc/passwd" 2>&1)"
  # Exactly the binary, passwd, group and what ldd names: nothing else.
  local want have
  want=$( { printf '%s\n' "$LDD" | awk '$2 == "=>" && $3 ~ /^\// { print $3; next } $1 ~ /^\// { print $1 }'
    echo /usr/bin/$IMG; echo /etc/passwd; echo /etc/group; } | sort -u)
  have=$(cd "$dir" && find . -type f -o -type l | sed 's/^\.//' | sort)
  local extra missing
  extra=$(comm -13 <(printf '%s\n' "$want") <(printf '%s\n' "$have"))
  missing=$(comm -23 <(printf '%s\n' "$want") <(printf '%s\n' "$have"))
  check "$label: no file beyond the binary, its libraries and passwd/group" "" "$extra"
  check "$label: every library ldd names is there" "" "$missing"
  check "$label: the binary is stripped (no symbol table, no debug sections)" "" \
    "$(readelf -S "$dir/usr/bin/$IMG" 2>&1 | grep -o '\.symtab\|\.debug_[a-z]*' | sort -u)"
}

if [ "$(id -u)" != 0 ]; then
  bad "chroot needs root (CI runs as root)"
  finish
fi

# ---- the rootfs from the Containerfiles, no podman ----------------------------------------------
out=$("$ROOT/hack/images/build.sh" --rootfs "$WORK/rootfs" $IMG "$B" 2>&1)
check "hack/images/build.sh --rootfs assembles $IMG" "$WORK/rootfs" "$out"
check_rootfs "rootfs" "$WORK/rootfs"

# Every other image's root filesystem runs its binary too (the same base).
for other in csi-resizer csi-snapshotter livenessprobe; do
  out=$("$ROOT/hack/images/build.sh" --rootfs "$WORK/rootfs-$other" $other "$B" 2>&1)
  check "hack/images/build.sh --rootfs assembles $other" "$WORK/rootfs-$other" "$out"
  contains "$other: --version runs in its root filesystem as the image's user 65532" "$other " \
    "$(chroot_run "$WORK/rootfs-$other" 65532:65532 /usr/bin/$other --version 2>&1)"
done

# ---- podman, where it works ---------------------------------------------------------------------
if [ "$SANITIZED" = 1 ]; then
  echo "skip podman: a sanitizer build goes into no image"
elif ! command -v podman >/dev/null; then
  echo "skip podman: not installed (hack/install-deps.sh installs it)"
else
  out=$(IMAGES=$IMG IMAGE_TAG=test PODMAN_OPTS="--root $WORK/storage --runroot $WORK/runroot" \
    "$ROOT/hack/images/build.sh" "$B" 2>&1)
  if [ $? -ne 0 ]; then
    bad "podman builds the base and $IMG images" "$out"
  else
    ok "podman builds the base and $IMG images"
    printf '%s\n' "$out"
    cfg=$("${PODMAN[@]}" image inspect --format '{{.Config.User}} {{json .Config.Entrypoint}}' localhost/csi-sidecars/$IMG:test 2>&1)
    check "$IMG image: user 65532, entrypoint the binary" "65532:65532 [\"/usr/bin/$IMG\"]" "$cfg"
    layers=$("${PODMAN[@]}" image inspect --format '{{len .RootFS.Layers}}' localhost/csi-sidecars/$IMG:test 2>&1)
    check "$IMG image: two layers (shared libraries, binary)" 2 "$layers"
    base0=$("${PODMAN[@]}" image inspect --format '{{index .RootFS.Layers 0}}' localhost/csi-sidecars/base:test 2>&1)
    img0=$("${PODMAN[@]}" image inspect --format '{{index .RootFS.Layers 0}}' localhost/csi-sidecars/$IMG:test 2>&1)
    check "$IMG image: its first layer is the base's" "$base0" "$img0"
    ctr=$("${PODMAN[@]}" create localhost/csi-sidecars/$IMG:test 2>&1 | tail -n 1)
    mkdir -p "$WORK/exported"
    if "${PODMAN[@]}" export "$ctr" | tar -x -C "$WORK/exported" 2>"$WORK/tar.err"; then
      ok "podman export of a $IMG container"
      check_rootfs "podman image" "$WORK/exported"
    else
      bad "podman export of a $IMG container" "$(cat "$WORK/tar.err")"
    fi
  fi
fi

finish
