#!/usr/bin/env bash
# Runs every test of Verdict, installing what the tests need first.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/build/setup.sh"
cd "$root"
export VERDICT_TOKENIZER="$root/.cache/tokenizer/gemma3/tokenizer.json"
export VERDICT_REQUIRE_TOKENIZER=1
export VERDICT_REQUIRE_MEDIA_TOOLS=1 # media/ tests fail, not skip, without ffmpeg, espeak-ng, cwebp

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt needed on: $unformatted" >&2
  exit 1
fi
go vet ./...
go build -o verdict .
go test -count=1 -timeout 45m ./...
./verdict verify-fixture testdata/gemma3n-synthetic-tiny.tar.gz
./verdict verify-fixture testdata/gemma3n-micro-bf16.tar.gz
echo "all tests passed"
