#!/usr/bin/env bash
# Holds Verdict's GGUF reader to files made by llama.cpp's own converter
# (convert_hf_to_gguf.py with the gguf-py package of the same source) and
# quantiser (llama-quantize): synthetic Gemma 3n checkpoints are written as
# safetensors, converted to F32/F16/BF16/Q8_0 GGUF, quantised (Q8_0, Q4_0,
# Q6_K, Q4_K_M, Q4_K_S, --pure Q4_K, ...), and `verdict verify-gguf` compares
# every file's logits with the checkpoint's. Runs offline. The steps can run
# on different machines (Go where verdict builds, Python and llama.cpp's
# tools elsewhere): each reads and writes the folder DIR.
#
#   bash build/gguf-check.sh checkpoints DIR   write DIR/ck-SET (needs verdict)
#   bash build/gguf-check.sh make DIR          tokenizer, convert, quantise: DIR/gguf (needs LLAMA_CPP, LLAMA_QUANTIZE)
#   bash build/gguf-check.sh verify DIR        DIR/report.txt (needs verdict)
#   bash build/gguf-check.sh all DIR           the three in turn
#
# Model sets (SETS, default "micro small"):
#   micro  hidden 64, 2 layers: k-quants only on the rows of 256 (the rest Q8_0)
#   small  hidden 256, 3 layers: every quantised matrix 256 wide, as in E2B
#   wide   Gemma's vocabulary, rows of 256 (a 550 MB checkpoint)
#   tiny   the repository's tiny fixture (rows of 64)
# micro and small get a small SentencePiece tokenizer trained on the spot
# (sentencepiece); wide and tiny need Gemma's tokenizer.model in
# GGUF_TOKENIZER_DIR.
#
# Inputs (environment):
#   LLAMA_CPP       a llama.cpp source folder or .tar.gz / .tar / .zip of one
#                   (convert_hf_to_gguf.py, its conversion/ package, gguf-py/)
#   LLAMA_QUANTIZE  a built llama-quantize of the same source (optional: without it
#                   only the converter's files are made)
#   PYTHON          python3 with torch, numpy, sentencepiece (and the converter's
#                   other imports: transformers, safetensors, yaml, tqdm)
#   VERDICT_BIN     a built verdict binary (default: go build)
# The report is DIR/report.txt: per file, a line of its logits (max |logit
# error|, the reference's largest |logit|, top-1 agreement, the file's tensor
# types) and one of its weights against the checkpoint's (verify-gguf
# -weights: per type, the largest RMS error over the bound of rounding to
# the type's levels). Exit status: 0 when every file was made and read, F32
# ones bit for bit, and every tensor within its type's bound.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
step=${1:-}
dir=${2:-}
case $step in checkpoints | make | verify | all) ;; *)
  echo "usage: bash build/gguf-check.sh checkpoints|make|verify|all DIR" >&2
  exit 2
  ;;
esac
[ -n "$dir" ] || {
  echo "gguf-check: name the working folder DIR" >&2
  exit 2
}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
sets=${SETS:-micro small}
log() { echo "gguf-check: $*" >&2; }
die() {
  log "$*"
  exit 1
}
for s in $sets; do
  case $s in micro | small | wide | tiny) ;; *) die "unknown model set '$s' (micro, small, wide, tiny)" ;; esac
done
work=$(mktemp -d "${TMPDIR:-/tmp}/gguf-check.XXXXXX")
trap 'rm -rf "$work"' EXIT

verdict_bin() {
  if [ -n "${VERDICT_BIN:-}" ]; then
    echo "$VERDICT_BIN"
    return
  fi
  command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || die "go is required to build verdict (or set VERDICT_BIN)"
  command -v go >/dev/null || export PATH=$PATH:/usr/local/go/bin
  log "building verdict"
  (cd "$root" && CGO_ENABLED=1 go build -o "$work/verdict" .)
  echo "$work/verdict"
}

# The token ids verify-gguf runs: below the per-layer vocabulary of each set.
ids_of() {
  case $1 in
  micro | small) echo 2,105,200,107,45,255,1,17 ;;
  *) echo 2,105,2364,107,6190,9999,1,262143 ;;
  esac
}

checkpoints() {
  local verdict
  verdict=$(verdict_bin)
  for s in $sets; do
    local from=synthetic-$s
    if [ "$s" = tiny ]; then
      mkdir -p "$work/tiny-src"
      tar -xzf "$root/testdata/gemma3n-synthetic-tiny.tar.gz" -C "$work/tiny-src"
      from=$work/tiny-src/gemma3n-synthetic-tiny
    fi
    rm -rf "$dir/ck-$s"
    "$verdict" verify-gguf -write-checkpoint "$dir/ck-$s" -from "$from" >&2
  done
}

make_files() {
  [ -n "${LLAMA_CPP:-}" ] || die "set LLAMA_CPP to a llama.cpp source folder or archive"
  local llama
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
  log "llama.cpp at $llama ($(cd "$llama" && (git describe --always 2>/dev/null || cat VERSION 2>/dev/null || echo 'version unknown')))"
  local py=${PYTHON:-python3} quantize=${LLAMA_QUANTIZE:-}
  $py -c 'import torch, numpy' 2>/dev/null || die "$py lacks torch or numpy"
  [ -z "$quantize" ] || [ -x "$quantize" ] || die "LLAMA_QUANTIZE=$quantize is not an executable"
  [ -n "$quantize" ] || log "no LLAMA_QUANTIZE: only the converter's files are made"
  export PYTHONPATH="$llama/gguf-py${PYTHONPATH:+:$PYTHONPATH}"
  mkdir -p "$dir/gguf" "$dir/logs"
  local status=0 pids=()
  for s in $sets; do
    local ck=$dir/ck-$s
    [ -f "$ck/config.json" ] || die "$ck: no checkpoint (run the checkpoints step first)"
    case $s in
    micro | small)
      # A 64-piece SentencePiece model with Gemma's special ids: the
      # converter pads the token list to the vocabulary with [PADn].
      $py - "$ck" <<'PY' || die "could not make the tokenizer (sentencepiece?)"
import random, sys
import sentencepiece as spm
random.seed(0)
words = "alpha beta gamma delta choice yes no ticket support billing score field value true false".split()
lines = [" ".join(random.choice(words) for _ in range(8)) for _ in range(400)]
spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=sys.argv[1] + "/tokenizer",
    vocab_size=64, model_type="bpe", hard_vocab_limit=False, pad_id=0, eos_id=1, bos_id=2, unk_id=3,
    minloglevel=2)
PY
      ;;
    *)
      local tokdir=${GGUF_TOKENIZER_DIR:-}
      [ -n "$tokdir" ] && [ -f "$tokdir/tokenizer.model" ] ||
        die "set $s needs GGUF_TOKENIZER_DIR with Gemma's tokenizer.model"
      for f in tokenizer.model tokenizer.json tokenizer_config.json special_tokens_map.json; do
        [ -f "$tokdir/$f" ] && cp "$tokdir/$f" "$ck/"
      done
      ;;
    esac
    for t in f32 f16 bf16 q8_0; do
      $py "$llama/convert_hf_to_gguf.py" "$ck" --outtype $t --outfile "$dir/gguf/$s-convert-${t^^}.gguf" \
        >"$dir/logs/$s-convert-$t.log" 2>&1 &
      pids+=($!)
    done
  done
  for p in "${pids[@]}"; do wait "$p" || {
    log "a conversion failed (see $dir/logs)"
    status=1
  }; done
  [ -n "$quantize" ] || return $status
  qz() { # set name type [options...]
    local s=$1 n=$2 t=$3
    shift 3
    local src=$dir/gguf/$s-convert-F32.gguf
    [ -f "$src" ] || return 0
    "$quantize" "$@" "$src" "$dir/gguf/$s-quantize-$n.gguf" "$t" >"$dir/logs/$s-quantize-$n.log" 2>&1 || {
      log "llama-quantize $s $n failed (see $dir/logs/$s-quantize-$n.log)"
      status=1
    }
  }
  for s in $sets; do
    case $s in
    micro)
      # Rows of 64 would fall back from Q4_K to Q5_0, which Verdict does not
      # read: they are Q8_0 here, Q4_K where rows are 256 wide.
      qz micro Q8_0 Q8_0
      qz micro pure-Q4_0 Q4_0 --pure
      qz micro pure-Q6_K Q6_K --pure
      qz micro Q4_K-Q8_0 Q4_K_M --pure --tensor-type 'attn_[qkv]\.=q8_0' --tensor-type 'ffn_(gate|up)\.=q8_0' \
        --tensor-type 'inp_gate\.=q8_0' --tensor-type '^token_embd\.=q8_0'
      ;;
    *)
      for q in Q8_0 Q4_0 Q6_K Q4_K_M Q4_K_S; do qz "$s" $q $q; done
      qz "$s" pure-Q4_K Q4_K_M --pure
      ;;
    esac
  done
  return $status
}

verify() {
  local verdict status=0
  verdict=$(verdict_bin)
  : >"$dir/report.txt"
  for s in $sets; do
    local files=("$dir"/gguf/"$s"-*.gguf)
    [ -e "${files[0]}" ] || {
      log "$s: no GGUF files in $dir/gguf"
      status=1
      continue
    }
    echo "== $s (reference: its safetensors checkpoint, float32) ==" >>"$dir/report.txt"
    "$verdict" verify-gguf -weights -ids "$(ids_of "$s")" -ref "$dir/ck-$s" "${files[@]}" | tee -a "$dir/report.txt" || status=1
  done
  log "report: $dir/report.txt"
  return $status
}

case $step in
checkpoints) checkpoints ;;
make) make_files ;;
verify) verify ;;
all)
  checkpoints
  st=0
  make_files || st=1
  verify || st=1
  exit $st
  ;;
esac
