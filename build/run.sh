#!/usr/bin/env bash
# Builds Verdict and runs it: `bash build/run.sh` runs the built-in model;
# `bash build/run.sh COMMAND ...` runs any verdict command.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/build/setup.sh" >&2
cd "$root"
export VERDICT_TOKENIZER="${VERDICT_TOKENIZER:-$root/.cache/tokenizer/gemma3/tokenizer.json}"
go build -o verdict .
if [ $# -eq 0 ]; then
  set -- generate --model builtin --prompt "Is this ticket urgent? The server is down." --max-tokens 24
fi
exec ./verdict "$@"
