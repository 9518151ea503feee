#!/usr/bin/env bash
# Installs what building and testing Verdict needs when it is missing: a C
# compiler for the native kernels, curl, Go modules and the Gemma tokenizer.
# Sourced by run.sh and test.sh.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

need_apt=()
command -v gcc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
command -v curl >/dev/null 2>&1 || need_apt+=(curl ca-certificates)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}" >&2
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q "${need_apt[@]}"
fi
if ! command -v go >/dev/null 2>&1; then
  if [ -x /usr/local/go/bin/go ]; then
    export PATH=$PATH:/usr/local/go/bin
  else
    echo "setup: Go 1.26 or newer is required (https://go.dev/dl/)" >&2
    exit 1
  fi
fi
export CGO_ENABLED=1
(cd "$root" && go mod download)
bash "$root/build/fetch-tokenizer.sh" "$root/.cache/tokenizer/gemma3/tokenizer.json"
