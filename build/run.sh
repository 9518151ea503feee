#!/usr/bin/env bash
# Builds Verdict (the frontend, then the binary with its desktop window) and
# runs it: `bash build/run.sh` opens the window on the built-in model (or, with
# no display, serves the same app to a browser); `bash build/run.sh COMMAND ...`
# runs any verdict command, e.g. `bash build/run.sh serve --addr 127.0.0.1:8177`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/build/setup.sh" >&2
VERDICT_APP_SETUP=run source "$root/build/setup-app.sh" >&2
cd "$root"
export VERDICT_TOKENIZER="${VERDICT_TOKENIZER:-$root/.cache/tokenizer/gemma3/tokenizer.json}"
# A copy of the tokenizer (setup.sh fetched it) in the user cache too, where
# the binary looks wherever it is started from (Go's os.UserCacheDir).
case "$(uname -s)" in
  Darwin) user_cache="$HOME/Library/Caches" ;;
  *) user_cache="${XDG_CACHE_HOME:-$HOME/.cache}" ;;
esac
bash "$root/build/fetch-tokenizer.sh" "$user_cache/verdict/tokenizer.json" >&2 ||
  echo "run: no tokenizer copy in $user_cache/verdict (the binary still finds the one beside it)" >&2
(cd frontend && npm run build --silent) >&2
go build -tags desktop,production,webkit2_41 -o verdict .
# The CUDA backend, next to the binary, where nvcc is: built when missing or
# older than its sources (the binary itself needs no CUDA).
if command -v nvcc >/dev/null 2>&1; then
  if [ ! -f libverdict_cuda.so ] || [ -n "$(find native/cuda native/backend*.h -newer libverdict_cuda.so -print -quit)" ]; then
    echo "run: building the CUDA backend (nvcc is here)" >&2
    HARNESS=0 bash build/cuda.sh . >&2 || echo "run: the CUDA backend did not build; the CPU runs everything" >&2
  fi
fi
if [ $# -eq 0 ]; then
  if [ -n "${DISPLAY:-}" ] || [ -n "${WAYLAND_DISPLAY:-}" ]; then
    set -- window --model builtin
  else
    echo "run: no display here; serving the app to a browser instead (open the address below)" >&2
    set -- serve --model builtin
  fi
fi
exec ./verdict "$@"
