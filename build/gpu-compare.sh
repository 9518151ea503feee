#!/usr/bin/env bash
# build/gpu-compare.sh: verdict's GPU figures and llama.cpp's, side by side,
# in one call of the GPU machine (nvcc, CMake, Python; no Go), with each
# figure's share of the card's limits and an ablation of the decode step.
#
#   CARRY=carry-cuda LLAMA_SRC=carry-cuda/llama.cpp.tar.xz OUT=$OUT bash build/gpu-compare.sh
#
# CARRY holds what gpu-check.sh's does (verdict.xz: the stripped binary,
# xz-compressed; tokenizer.json.xz; the shared libraries it links).
# LLAMA_SRC is a .tar.xz of llama.cpp's source (build/llamacpp-peer.sh;
# its pack step makes one small enough to carry beside the tree), and
# CARRY's shared libraries may be xz-compressed (name.so.N.xz).
# Steps, about 450 s on an H200 machine of 16 cores (241 s on an H100 with
# the packed source, 2026-12-06):
#  1. llama.cpp's CUDA build (llamacpp-peer.sh build) and verdict's library
#     (build/cuda.sh), at the same time;
#  2. verdict bench --device cuda on synthetic-e2b (q4; the card's read
#     bandwidth and FMA peak measured in the same run): prefill of 512
#     tokens, decode at batch 1 and 8, a scorer request, the towers;
#  3. the ablation: prefill and decode at batch 1 and 8 again with each of
#     ABLATE's switches turned, each turning one thing off
#     (VERDICT_LAYER_STEPS=0, VERDICT_LINEARS=0, VERDICT_Q4_PAIR=0,
#     VERDICT_Q4_MIXED=0, VERDICT_PRE_PARTS=0, VERDICT_ATTN_DEC=0,
#     VERDICT_Q4_ONE=0, VERDICT_Q4_SPLIT_WIDE=0, VERDICT_Q4_STAGED=0,
#     VERDICT_ATTN_TILE=0, VERDICT_GRAPHS=0);
#     the towers alone again with each of TOWER_ABLATE's
#     (VERDICT_TOWER_MMA=0: their products on the float cores);
#  4. llama.cpp on the same synthetic weights as Q4_0 (llamacpp-peer.sh
#     bench, MODELS=e2b TYPES=q4_0);
#  5. one table (summary.md under OUT): each figure, llama.cpp's, the
#     ratio, the goal of issue 25, and the share of its limit.
# SKIP_LLAMA=1 leaves llama.cpp out (its columns then say so).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
OUT=${OUT:-/tmp/gpu-compare}
CARRY=$(cd "${CARRY:-carry-cuda}" && pwd)
MODEL=${MODEL:-synthetic-e2b}
ABLATE=${ABLATE:-"VERDICT_LAYER_STEPS=0 VERDICT_LINEARS=0 VERDICT_Q4_PAIR=0 VERDICT_Q4_MIXED=0 VERDICT_PRE_PARTS=0 VERDICT_ATTN_DEC=0 VERDICT_Q4_ONE=0 VERDICT_Q4_SPLIT_WIDE=0 VERDICT_Q4_STAGED=0 VERDICT_ATTN_TILE=0 VERDICT_GRAPHS=0"}
TOWER_ABLATE=${TOWER_ABLATE:-"VERDICT_TOWER_MMA=0"}
mkdir -p "$OUT"
log=$OUT/log.txt
: >"$log"
say() { echo "$*" | tee -a "$log"; }
t0=$(date +%s)

lib=/tmp/verdict-cuda
llama_ok=0
if [ "${SKIP_LLAMA:-0}" != 1 ]; then
	OUT=$OUT bash build/llamacpp-peer.sh build >"$OUT/llama-build.txt" 2>&1 &
	llama_pid=$!
fi
if ! HARNESS=0 CUDA_ARCH=${CUDA_ARCH:-90} bash build/cuda.sh "$lib" >"$OUT/build.log" 2>&1; then
	say "verdict's library: BUILD FAILED"
	grep -E "error" "$OUT/build.log" | head -20 | tee -a "$log"
	exit 1
fi
say "verdict's library built at $(($(date +%s) - t0)) s"
nvcc -O3 -arch=sm_"${CUDA_ARCH:-90}" -std=c++17 -I native/cuda -o /tmp/chain-floor native/cuda/bench/chain_floor.cu \
	>"$OUT/chain-build.log" 2>&1 || say "chain_floor: BUILD FAILED (chain-build.log)"

. build/gpu-carry.sh
carry_bin "$lib"

# The llama.cpp build uses every core; verdict's timings wait for it so
# that the host side of a launch does not share the CPU.
if [ "${SKIP_LLAMA:-0}" != 1 ]; then
	if wait "$llama_pid"; then
		llama_ok=1
		say "llama.cpp built at $(($(date +%s) - t0)) s"
	else
		say "llama.cpp: BUILD FAILED (its log: llama-build.txt)"
		tail -5 "$OUT/llama-build.txt" | tee -a "$log"
	fi
fi

# The chain's floor (what a kernel of a chain of dependent ones costs
# on this card), after the build, for the table's kernels line.
[ -x /tmp/chain-floor ] && timeout 120 /tmp/chain-floor >"$OUT/chain.txt" 2>&1

b=(bench --device cuda --model "$MODEL" --json)
say "== verdict bench ($MODEL, q4, limits measured)"
VERDICT_GRAPH_KERNELS=1 timeout 300 "$bin/verdict" "${b[@]}" >"$OUT/verdict.json" 2>"$OUT/verdict.err" ||
	{ say "verdict bench failed"; tail -5 "$OUT/verdict.err" | tee -a "$log"; }
for sw in $ABLATE; do
	say "== verdict bench with $sw"
	env "$sw" timeout 200 "$bin/verdict" "${b[@]}" --limits=false --scorer=false --towers=false \
		>"$OUT/ablate-$sw.json" 2>>"$OUT/verdict.err" || say "bench with $sw failed"
done
for sw in $TOWER_ABLATE; do
	say "== verdict bench, towers only, with $sw"
	env "$sw" timeout 200 "$bin/verdict" "${b[@]}" --limits=false --scorer=false --prompt-tokens 8 --decode-tokens 1 \
		--batch 0 >"$OUT/tower-ablate-$sw.json" 2>>"$OUT/verdict.err" || say "towers with $sw failed"
done

if [ "$llama_ok" = 1 ]; then
	say "== llama.cpp bench (e2b, Q4_0)"
	OUT=$OUT MODELS=e2b TYPES=q4_0 VERDICT_BIN=$bin/verdict TOKENIZER=/tmp/tokenizer.json \
		timeout 300 bash build/llamacpp-peer.sh bench >"$OUT/llama-bench.txt" 2>&1 ||
		{ say "llama.cpp bench failed"; tail -5 "$OUT/llama-bench.txt" | tee -a "$log"; }
fi
python3 build/gpu_compare.py "$OUT" | tee "$OUT/summary.md" | tee -a "$log"
say "total $(($(date +%s) - t0)) s"
