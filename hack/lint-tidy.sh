#!/usr/bin/env bash
# clang-tidy over the given C files, two at a time, skipping a file whose
# exact input was found clean before.
#
#   hack/lint-tidy.sh CACHE FILE... -- COMPILER-FLAGS...
#
# The input of a check is the file's preprocessed text with its comments
# (every header it includes, generated ones too, NOLINTs included), .clang-tidy and clang-tidy's version: the
# key is their SHA-256. A file found clean has its key recorded in CACHE
# (committed: hack/lint-tidy.cache; `make lint` passes every file, so the
# cache holds exactly the files clean now), so a fresh clone re-checks only what
# changed since the last clean run; the result for an unchanged key could
# only be the same. Findings go to stdout; exit 1 when there are any.
set -uo pipefail

cache=$1
shift
files=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  files+=("$1")
  shift
done
[ "${1:-}" = "--" ] && shift
flags=("$@")

stamp=$( (clang-tidy --version; cat .clang-tidy) | sha256sum | cut -c1-64)
[ -f "$cache" ] || : >"$cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

FLAGS_Q=$(printf '%q ' "${flags[@]}")
export stamp FLAGS_Q

# one FILE: prints "FILE KEY" to the clean list, or the findings
one() {
  local f=$1 k
  eval "flags=($FLAGS_Q)"
  # comments kept (-C): a NOLINT is part of the input; no line markers
  # (-P): they would name the build directory of the generated headers
  k=$({ echo "$stamp $f"; clang -E -P -C "${flags[@]}" "$f" 2>&1; } | sha256sum | cut -c1-64)
  if grep -qx "$f $k" "$CACHE"; then
    echo "$f $k" >>"$WORK/clean.$$"
    return 0
  fi
  local out
  echo "$f" >>"$WORK/checked.$$"
  out=$(clang-tidy --quiet "$f" -- "${flags[@]}" 2>&1)
  if printf '%s\n' "$out" | grep -Eq 'error:|warning:'; then
    printf '%s\n' "$out" | grep -E -A3 'error:|warning:'
  else
    echo "$f $k" >>"$WORK/clean.$$"
  fi
}
export -f one
export CACHE=$cache WORK=$work

printf '%s\n' "${files[@]}" | xargs -P2 -I{} bash -c 'one "$1"' _ {} >"$work/findings"
cat "$work/findings"
checked=$(cat "$work"/checked.* 2>/dev/null | wc -l)
echo "clang-tidy: ${#files[@]} files, $checked checked, $((${#files[@]} - checked)) unchanged since a clean run" >&2
# The cache keeps one line per file that is clean now (old keys dropped).
cat "$work"/clean.* 2>/dev/null | sort -u >"$work/cache.new"
if ! cmp -s "$work/cache.new" "$cache"; then
  cp "$work/cache.new" "$cache"
fi
[ ! -s "$work/findings" ]
