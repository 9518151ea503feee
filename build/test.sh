#!/usr/bin/env bash
# Runs every test of Verdict, installing what the tests need first.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/build/setup.sh"
VERDICT_APP_SETUP=test source "$root/build/setup-app.sh"
cd "$root"
export VERDICT_TOKENIZER="$root/.cache/tokenizer/gemma3/tokenizer.json"
export VERDICT_REQUIRE_TOKENIZER=1
export VERDICT_REQUIRE_MEDIA_TOOLS=1 # media/ tests fail, not skip, without ffmpeg, espeak-ng, cwebp

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt needed on: $unformatted" >&2
  exit 1
fi
# The frontend: type check, build (embedded by go build) and unit tests.
(cd frontend && npm run build --silent && npx vitest run)
go vet ./...
go vet -tags desktop,production,webkit2_41 ./app/desktop/
go build -o verdict .
go test -count=1 -timeout 45m ./...
# The parsers of untrusted files (GGUF, safetensors headers and indexes,
# recipes, configs, tokenizers) fuzzed for a short time each; a crasher is
# kept under testdata/fuzz/ as a test (build/fuzz.sh).
# A count, not a duration: a duration's deadline can fail a target with no
# finding in Go 1.26 (golang/go#75804; build/fuzz.sh says so when it does).
VERDICT_FUZZTIME="${VERDICT_FUZZTIME:-60000x}" bash build/fuzz.sh
./verdict verify-fixture testdata/gemma3n-synthetic-tiny.tar.gz
./verdict verify-fixture testdata/gemma3n-micro-bf16.tar.gz
# The CUDA sources without nvcc or a GPU: compiled by g++ against the stub
# runtime, the harnesses linked, and the towers' and the tensor-core q4
# product's kernels run on the host emulation against their references.
bash build/cuda-syntax.sh run
# The app end to end: verdict serve in headless Chromium, then the real window
# under Xvfb (screenshots in build/bin/test/).
mkdir -p build/bin/test
(cd frontend && VERDICT_BIN="$root/verdict" E2E_OUT="$root/build/bin/test" node --test e2e/)
# The OpenAI-compatible routes through OpenAI's openai package and the Vercel AI SDK (and docs/api.md's examples).
(cd build/clients/openai && VERDICT_BIN="$root/verdict" node --test openai.test.mjs)
# The MCP server through the official MCP TypeScript SDK: verdict mcp over stdio, serve's /mcp over HTTP.
(cd build/clients/mcp && VERDICT_BIN="$root/verdict" node --test mcp.test.mjs)
bash build/desktop-check.sh
echo "all tests passed"
