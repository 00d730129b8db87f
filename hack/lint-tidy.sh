#!/usr/bin/env bash
# clang-tidy over the given C files, two at a time, skipping a file whose
# exact input was found clean before.
#
#   hack/lint-tidy.sh CACHE FILE... -- COMPILER-FLAGS...
#
# Run from the top of the clone (.clang-tidy is read from there). The input
# of a check is the file's preprocessed text with its comments (every header
# it includes, generated ones too, NOLINTs included), its path, .clang-tidy,
# clang-tidy's version, how it is called and the compiler flags: the key is
# their SHA-256. A file found clean has its key recorded in CACHE
# (committed: hack/lint-tidy.cache; `make lint` passes every file, so the
# cache holds exactly the files clean now), so a fresh clone re-checks only
# what changed since the last clean run; the result for an unchanged key
# could only be the same. Nothing in a key depends on where the clone is
# (paths below it are written relative to it, in the flags as in the text)
# or on the machine beyond what reaches clang-tidy: its version output
# without the "Host CPU" line (a report of the build machine, not an input).
# Findings go to stdout; exit 1 when there are any.
set -uo pipefail
export LC_ALL=C # one byte order for the cache's lines, whatever the machine's locale

cache=$1
shift
files=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  files+=("$1")
  shift
done
[ "${1:-}" = "--" ] && shift

# The clone's top, as the shell and as the kernel spell it: written as
# relative paths wherever they show.
ROOTS=("$PWD" "$(pwd -P)")
# rel ARG...: each argument (a path, or an option with a path: -I/top/build/gen) with
# "<top>/" left out and a bare "<top>" written "."
rel() {
  local a r
  for a in "$@"; do
    for r in "${ROOTS[@]}"; do
      a=${a//"$r"\//}
      [[ "$a" == "$r" || ("$a" == -*"$r" && "${a%"$r"}" != */*) ]] && a="${a%"$r"}."
    done
    printf '%s\n' "$a"
  done
}
flags=()
mapfile -t flags < <(rel "$@")
TIDY_OPTS=(--quiet)
# sed expression that drops "<top>/" from the preprocessed text (__FILE__ of
# a header found through an absolute -I, say)
SED_ROOTS=""
for r in "${ROOTS[@]}"; do
  SED_ROOTS+="s/$(printf '%s/' "$r" | sed 's/[][\\.*^$/]/\\&/g')//g;"
done

stamp=$( (clang-tidy --version | grep -v '^ *Host CPU:'; cat .clang-tidy; printf '%s\n' "${TIDY_OPTS[@]}" -- "${flags[@]}") |
  sha256sum | cut -c1-64)
[ -f "$cache" ] || : >"$cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

FLAGS_Q=$(printf '%q ' "${flags[@]}")
TIDY_Q=$(printf '%q ' "${TIDY_OPTS[@]}")
export stamp FLAGS_Q TIDY_Q SED_ROOTS

# one FILE: prints "FILE KEY" to the clean list, or the findings
one() {
  local f k
  f=$(rel "$1")
  eval "flags=($FLAGS_Q)"
  eval "tidy=($TIDY_Q)"
  # comments kept (-C): a NOLINT is part of the input; no line markers
  # (-P): they would name the build directory of the generated headers
  k=$({ echo "$stamp $f"; clang -E -P -C "${flags[@]}" "$f" 2>&1 | sed "$SED_ROOTS"; } | sha256sum | cut -c1-64)
  if grep -qx "$f $k" "$CACHE"; then
    echo "$f $k" >>"$WORK/clean.$$"
    return 0
  fi
  local out
  echo "$f" >>"$WORK/checked.$$"
  out=$(clang-tidy "${tidy[@]}" "$f" -- "${flags[@]}" 2>&1)
  if printf '%s\n' "$out" | grep -Eq 'error:|warning:'; then
    printf '%s\n' "$out" | grep -E -A3 'error:|warning:'
  else
    echo "$f $k" >>"$WORK/clean.$$"
  fi
}
ROOTS_Q=$(printf '%q ' "${ROOTS[@]}")
export -f one rel
export CACHE=$cache WORK=$work ROOTS_Q

printf '%s\n' "${files[@]}" | xargs -P2 -I{} bash -c 'eval "ROOTS=($ROOTS_Q)"; one "$1"' _ {} >"$work/findings"
cat "$work/findings"
checked=$(cat "$work"/checked.* 2>/dev/null | wc -l)
echo "clang-tidy: ${#files[@]} files, $checked checked, $((${#files[@]} - checked)) unchanged since a clean run" >&2
# The cache keeps one line per file that is clean now (old keys dropped):
# those of this run, and those of files this run was not given that still
# exist (a run over a few files leaves the others' lines alone).
cat "$work"/clean.* 2>/dev/null | sort -u >"$work/clean"
printf '%s\n' "${files[@]}" | while IFS= read -r f; do rel "$f"; done | sort -u >"$work/given"
while read -r f k; do
  [ -f "$f" ] && printf '%s %s\n' "$f" "$k"
done <"$cache" | sort -u | join -v 1 - "$work/given" | cat - "$work/clean" | sort -u >"$work/cache.new"
if ! cmp -s "$work/cache.new" "$cache"; then
  cp "$work/cache.new" "$cache"
fi
[ ! -s "$work/findings" ]
