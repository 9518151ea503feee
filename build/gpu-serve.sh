#!/usr/bin/env bash
# build/gpu-serve.sh: serving on a GPU machine (nvcc, no Go). Builds
# libverdict_cuda.so, then runs the carried verdict binary's `bench serve`
# (the scheduler's check of the same bits alone and batched first, then
# score-file's rate on generated support tickets at several concurrencies,
# the prefix cache's hits and the mixed client load) with --device cuda,
# transformers on the same card scoring the same records' token rows
# (build/peer_score_hf.py), and a shorter `bench serve` on the CPU cores.
# Results under $OUT (default /tmp/gpu-serve); CARRY as for gpu-check.sh.
# MODEL (synthetic-e2b), RECORDS (1000), CLIENTS (50), DURATION (60s),
# LAYOUT (input-first), PEER_N (records the peer scores, 128), CPU_RECORDS
# (48; 0 skips the CPU).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
OUT=${OUT:-/tmp/gpu-serve}
CARRY=$(cd "${CARRY:-carry-cuda}" && pwd)
MODEL=${MODEL:-synthetic-e2b}
mkdir -p "$OUT"
log=$OUT/summary.txt
: >"$log"
say() { echo "$*" | tee -a "$log"; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>&1 | tee -a "$log"
lib=/tmp/verdict-cuda
t0=$(date +%s)
if ! HARNESS=0 CUDA_ARCH=${CUDA_ARCH:-90} bash build/cuda.sh "$lib" >"$OUT/build.log" 2>&1; then
	say "BUILD FAILED"
	grep -E "error" "$OUT/build.log" | head -20 | tee -a "$log"
	exit 1
fi
say "build: $(($(date +%s) - t0)) s"
. build/gpu-carry.sh
carry_bin "$lib"

say "== bench serve --device cuda $MODEL"
t0=$(date +%s)
timeout "${SERVE_TIMEOUT:-330}" "$bin/verdict" bench serve --device cuda --model "$MODEL" --records "${RECORDS:-1000}" \
	--concurrency "${LEVELS:-1,8,32,64}" --clients "${CLIENTS:-50}" --duration "${DURATION:-60s}" --layout "${LAYOUT:-input-first}" \
	--dump-rows "$OUT/rows.jsonl" >"$OUT/serve-cuda.txt" 2>"$OUT/serve-cuda.err"
say "exit $? in $(($(date +%s) - t0)) s"
grep -v ALSA "$OUT/serve-cuda.err" | tail -5 | tee -a "$log"
tee -a "$log" <"$OUT/serve-cuda.txt"

if [ -s "$OUT/rows.jsonl" ]; then
	say "== transformers on the same records' rows"
	ROWS=$OUT/rows.jsonl N=${PEER_N:-128} timeout "${PEER_TIMEOUT:-150}" python3 build/peer_score_hf.py >"$OUT/peer.txt" 2>"$OUT/peer.err"
	say "exit $?"
	grep RESULT "$OUT/peer.txt" | tee -a "$log" || { tail -n 2 "$OUT/peer.txt"; tail -n 3 "$OUT/peer.err"; } | tee -a "$log"
fi

if [ "${CPU_RECORDS:-48}" != 0 ]; then
	say "== bench serve --device cpu $MODEL ($(nproc) cores)"
	t0=$(date +%s)
	timeout "${CPU_TIMEOUT:-150}" "$bin/verdict" bench serve --device cpu --model "$MODEL" --records "${CPU_RECORDS:-48}" \
		--concurrency "${CPU_LEVELS:-1,8,32}" --clients 0 --check 8 >"$OUT/serve-cpu.txt" 2>"$OUT/serve-cpu.err"
	say "exit $? in $(($(date +%s) - t0)) s"
	grep -v ALSA "$OUT/serve-cpu.err" | tail -3 | tee -a "$log"
	tee -a "$log" <"$OUT/serve-cpu.txt"
fi
