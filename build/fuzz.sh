#!/usr/bin/env bash
# Runs every Go fuzz target of the repository (func FuzzXxx in a _test.go
# file: the GGUF, safetensors, checkpoint index, recipe and config.json
# parsers, the tokenizer's round trip) for a short time each, one worker at
# a time: VERDICT_FUZZTIME per target (default 20s; any -fuzztime value,
# e.g. 2m or 5000x). `bash build/fuzz.sh FuzzParseGGUF ...` runs only the
# targets named. An input that fails is written under the package's
# testdata/fuzz/FuzzXxx/ (keep it there: it becomes a regression test) and
# the script exits non-zero after trying every target. A target whose doc
# comment says "fuzz.sh: at most Nx" runs at most N inputs when
# VERDICT_FUZZTIME is a count.
#
# Each input that finds new code is minimised for VERDICT_FUZZMINIMIZE
# (default 500x: runs, not Go's 60 s) so that a short run keeps fuzzing
# rather than shrinking the few multi-KB inputs it found first; Go's
# progress lines show "0/sec" while it minimises (golang/go#51484).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
  export PATH=$PATH:/usr/local/go/bin
fi
export CGO_ENABLED=1
export VERDICT_TOKENIZER="${VERDICT_TOKENIZER:-$root/.cache/tokenizer/gemma3/tokenizer.json}"
fuzztime="${VERDICT_FUZZTIME:-20s}"
minimize="${VERDICT_FUZZMINIMIZE:-500x}"

# package directory and target name of each fuzz target, sorted
targets=$(git ls-files '*_test.go' | xargs grep -H '^func Fuzz[A-Z0-9_][A-Za-z0-9_]*(f \*testing.F)' |
  sed -E 's#^(.*)/[^/]*_test.go:func (Fuzz[A-Za-z0-9_]*)\(.*#\1 \2#' | sort)
if [ $# -gt 0 ]; then
  want=" $* "
  targets=$(echo "$targets" | while read -r dir name; do
    case "$want" in *" $name "*) echo "$dir $name" ;; esac
  done)
fi
[ -n "$targets" ] || { echo "fuzz: no fuzz targets${*:+ named $*}" >&2; exit 1; }

# corpus_count DIR NAME: the inputs kept under DIR/testdata/fuzz/NAME.
corpus_count() {
  if [ -d "$1/testdata/fuzz/$2" ]; then find "$1/testdata/fuzz/$2" -type f | wc -l; else echo 0; fi
}

failed=()
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# cap_count DIR NAME TIME: TIME, or fewer runs where the target's doc
# comment says "fuzz.sh: at most Nx" (a target whose every run decodes a
# whole model file) and TIME is a count over N.
cap_count() {
  local n
  n=$(grep -h -B12 "^func $2(f \*testing.F)" "$1"/*_test.go | sed -nE 's#^// .*fuzz\.sh: at most ([0-9]+)x.*#\1#p' | head -1)
  if [ -n "$n" ] && [[ $3 =~ ^([0-9]+)x$ ]] && [ "${BASH_REMATCH[1]}" -gt "$n" ]; then
    echo "${n}x"
  else
    echo "$3"
  fi
}

while read -r dir name; do
  ft=$(cap_count "$dir" "$name" "$fuzztime")
  echo "fuzz: $name in ./$dir for $ft" >&2
  before=$(corpus_count "$dir" "$name")
  if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$ft" -fuzzminimizetime "$minimize" -parallel 1 "./$dir" </dev/null 2>&1 | tee "$out"; then
    # Go's coordinator can report its own -fuzztime deadline as a failure
    # ("context deadline exceeded", no input written: golang/go#75804,
    # fixed in Go 1.27): that is no finding. A real one writes its input.
    if [ "$(corpus_count "$dir" "$name")" = "$before" ] && grep -q '^    context deadline exceeded$' "$out"; then
      echo "fuzz: $name: Go's -fuzztime deadline race (golang/go#75804), no failing input: not a finding" >&2
    else
      failed+=("$dir $name")
    fi
  fi
done <<<"$targets"
if [ ${#failed[@]} -gt 0 ]; then
  printf 'fuzz: failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "fuzz: every target ran $fuzztime without a failure" >&2
