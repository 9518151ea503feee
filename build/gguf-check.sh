#!/usr/bin/env bash
# Holds Verdict's GGUF reader to files made by llama.cpp's own converter
# (convert_hf_to_gguf.py with the gguf-py package of the same source) and
# quantiser (llama-quantize): synthetic Gemma 3n checkpoints are written as
# safetensors, converted to F32/F16/BF16/Q8_0 GGUF, quantised to
# Q8_0/Q4_0/Q4_K_S/Q6_K, and `verdict verify-gguf` compares every file's
# logits with the checkpoint's. Runs offline.
#
#   LLAMA_CPP=/path/llama.cpp.tar.gz GGUF_TOKENIZER_DIR=/path/tok bash build/gguf-check.sh [tiny|wide|all]
#
# tiny: the repository's tiny fixture (rows of 64: llama-quantize falls back
#       from the k-quants on every matrix, the log shows the types it used).
# wide: a synthetic model with rows of 256, where Q4_K and Q6_K apply
#       (a 550 MB checkpoint). all (the default): both.
#
# Inputs (environment):
#   LLAMA_CPP           a llama.cpp source folder or .tar.gz / .tar / .zip of one (required)
#   GGUF_TOKENIZER_DIR  Gemma's tokenizer.model (the converter reads it with
#                       sentencepiece) and/or tokenizer.json + tokenizer_config.json;
#                       default: the folder of $VERDICT_TOKENIZER
#   GGUF_WHEELS         optional folder of Python wheels installed offline
#                       (pip --no-index) when torch, numpy, sentencepiece,
#                       safetensors or transformers are missing
#   OUT                 where the GGUF files and the report go (default build/bin/gguf-check)
#   VERDICT_BIN         a built verdict binary (default: go build)
#   JOBS                parallel build jobs (default: nproc)
# The report is $OUT/report.txt: one line per file (max |logit error|, the
# reference's largest |logit|, top-1 agreement, the file's tensor types).
# Exit status: 0 when every file was made and read, F32 ones bit for bit.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
which=${1:-all}
case $which in tiny | wide | all) ;; *)
  echo "gguf-check: unknown model set '$which' (tiny, wide or all)" >&2
  exit 2
  ;;
esac
out=${OUT:-$root/build/bin/gguf-check}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/gguf-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
log() { echo "gguf-check: $*" >&2; }
die() {
  log "$*"
  exit 1
}

# llama.cpp's source.
[ -n "${LLAMA_CPP:-}" ] || die "set LLAMA_CPP to a llama.cpp source folder or archive"
if [ -d "$LLAMA_CPP" ]; then
  llama=$(cd "$LLAMA_CPP" && pwd)
else
  [ -f "$LLAMA_CPP" ] || die "LLAMA_CPP=$LLAMA_CPP: no such file or folder"
  mkdir -p "$work/src"
  case $LLAMA_CPP in
  *.zip) (cd "$work/src" && unzip -q "$LLAMA_CPP") ;;
  *) tar -xf "$LLAMA_CPP" -C "$work/src" ;;
  esac
  llama=$(dirname "$(find "$work/src" -maxdepth 3 -name convert_hf_to_gguf.py | head -1)")
fi
[ -f "$llama/convert_hf_to_gguf.py" ] || die "$llama has no convert_hf_to_gguf.py"
[ -d "$llama/gguf-py/gguf" ] || die "$llama has no gguf-py/gguf"
log "llama.cpp at $llama ($(cd "$llama" && (git describe --always 2>/dev/null || cat .git-version 2>/dev/null || echo 'version unknown')))"

# Python: the converter with the gguf-py of the same source.
py=python3
command -v $py >/dev/null || die "python3 is required"
export PYTHONPATH="$llama/gguf-py${PYTHONPATH:+:$PYTHONPATH}"
# torch and numpy are required; the others are needed by some converter
# versions (an import error then shows in the conversion's log).
missing() {
  $py - "$@" <<'PY'
import importlib.util, sys
print(" ".join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))
PY
}
modules="torch numpy sentencepiece safetensors transformers yaml tqdm"
# shellcheck disable=SC2086
miss=$(missing $modules)
if [ -n "$miss" ] && [ -n "${GGUF_WHEELS:-}" ]; then
  log "installing $miss from $GGUF_WHEELS"
  $py -m venv --system-site-packages "$work/venv"
  py="$work/venv/bin/python"
  # shellcheck disable=SC2086
  $py -m pip install --quiet --no-index --find-links "$GGUF_WHEELS" ${miss/yaml/pyyaml} || log "pip could not install all of: $miss"
  # shellcheck disable=SC2086
  miss=$(missing $modules)
fi
required=$(missing torch numpy)
[ -z "$required" ] || die "Python modules missing: $required (install them, or give GGUF_WHEELS a folder of wheels)"
[ -z "$miss" ] || log "warning: Python modules missing: $miss (the converter may need them; see its logs)"

# The tokenizer the converter writes into the GGUF's metadata.
tokdir=${GGUF_TOKENIZER_DIR:-}
if [ -z "$tokdir" ] && [ -n "${VERDICT_TOKENIZER:-}" ]; then
  tokdir=$(dirname "$VERDICT_TOKENIZER")
fi
[ -n "$tokdir" ] && { [ -f "$tokdir/tokenizer.model" ] || [ -f "$tokdir/tokenizer.json" ]; } ||
  die "no tokenizer: set GGUF_TOKENIZER_DIR to a folder with Gemma's tokenizer.model (or tokenizer.json)"

# verdict.
verdict=${VERDICT_BIN:-}
if [ -z "$verdict" ]; then
  command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || die "go is required to build verdict (or set VERDICT_BIN)"
  command -v go >/dev/null || export PATH=$PATH:/usr/local/go/bin
  log "building verdict"
  (cd "$root" && CGO_ENABLED=1 go build -o "$work/verdict" .)
  verdict=$work/verdict
fi

# llama-quantize (CPU only).
jobs=${JOBS:-$(nproc)}
log "building llama-quantize"
cmake -S "$llama" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF -DGGML_METAL=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
  >"$out/cmake.log" 2>&1 || die "cmake failed: see $out/cmake.log"
cmake --build "$work/build" --target llama-quantize -j "$jobs" >>"$out/cmake.log" 2>&1 ||
  die "building llama-quantize failed: see $out/cmake.log"
quantize=$(find "$work/build" -type f -name llama-quantize -perm -u+x | head -1)
[ -n "$quantize" ] || die "llama-quantize not found after the build"

# One model: checkpoint, conversions, quantisations, verification.
status=0
check() {
  local name=$1 from=$2
  local ck=$work/$name
  log "$name: writing the checkpoint"
  "$verdict" verify-gguf -write-checkpoint "$ck" -from "$from" >&2
  for f in tokenizer.model tokenizer.json tokenizer_config.json special_tokens_map.json; do
    [ -f "$tokdir/$f" ] && cp "$tokdir/$f" "$ck/"
  done
  local files=()
  for t in f32 f16 bf16 q8_0; do
    local f=$out/$name-${t^^}.gguf
    log "$name: convert_hf_to_gguf.py --outtype $t"
    if $py "$llama/convert_hf_to_gguf.py" "$ck" --outtype "$t" --outfile "$f" >"$out/$name-convert-$t.log" 2>&1; then
      files+=("$f")
    else
      log "$name: the converter failed for $t (see $out/$name-convert-$t.log)"
      status=1
    fi
  done
  local src=$out/$name-F32.gguf
  if [ -f "$src" ]; then
    for q in Q8_0 Q4_0 Q4_K_S Q6_K; do
      local f=$out/$name-llama-quantize-$q.gguf
      log "$name: llama-quantize $q"
      if "$quantize" "$src" "$f" "$q" >"$out/$name-quantize-$q.log" 2>&1; then
        files+=("$f")
      else
        log "$name: llama-quantize $q failed (see $out/$name-quantize-$q.log)"
        status=1
      fi
    done
  fi
  [ ${#files[@]} -gt 0 ] || return 0
  log "$name: verify-gguf"
  echo "== $name (reference: its safetensors checkpoint, float32) ==" >>"$out/report.txt"
  "$verdict" verify-gguf -ref "$ck" "${files[@]}" | tee -a "$out/report.txt" || status=1
}

: >"$out/report.txt"
if [ "$which" != wide ]; then
  mkdir -p "$work/tiny-src"
  tar -xzf "$root/testdata/gemma3n-synthetic-tiny.tar.gz" -C "$work/tiny-src"
  check tiny "$work/tiny-src/gemma3n-synthetic-tiny"
fi
if [ "$which" != tiny ]; then
  check wide synthetic-wide
fi
log "report: $out/report.txt"
exit $status
