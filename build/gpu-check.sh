#!/usr/bin/env bash
# build/gpu-check.sh: the CUDA backend's check on a GPU machine (nvcc, no
# Go). Builds libverdict_cuda.so and the harnesses (build/cuda.sh), runs
# them (ops_check, catalog_check), then the carried verdict binary:
# verify-fixture on the synthetic and micro fixtures with --device cuda and cpu, and bench synthetic-e2b
# with --device cuda and cpu. Everything goes under $OUT (default
# /tmp/gpu-check). CARRY names the folder holding verdict.xz,
# tokenizer.json.xz and libasound.so.2 (default carry-cuda).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
OUT=${OUT:-/tmp/gpu-check}
CARRY=$(cd "${CARRY:-carry-cuda}" && pwd)
mkdir -p "$OUT"
log=$OUT/summary.txt
: >"$log"
say() { echo "$*" | tee -a "$log"; }
lib=/tmp/verdict-cuda
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$log"
nvcc --version | tail -2 | tee -a "$log"
t0=$(date +%s)
if ! bash build/cuda.sh "$lib" >"$OUT/build.log" 2>&1; then
	say "BUILD FAILED"
	grep -E "error|warning" "$OUT/build.log" | head -40 | tee -a "$log"
	exit 1
fi
say "build: $(($(date +%s) - t0)) s"
"$lib/ops_check" >"$OUT/ops_check.txt" 2>&1
say "ops_check exit $?"
grep -E "FAIL|ERROR|failure" "$OUT/ops_check.txt" | tee -a "$log"
"$lib/catalog_check" >"$OUT/catalog_check.txt" 2>&1
say "catalog_check exit $?"
grep -E "FAIL|ERROR|failure" "$OUT/catalog_check.txt" | tee -a "$log"

bin=/tmp/verdict-bin
mkdir -p "$bin"
xz -dc "$CARRY/verdict.xz" >"$bin/verdict" && chmod +x "$bin/verdict"
cp "$lib/libverdict_cuda.so" "$bin/"
xz -dc "$CARRY/tokenizer.json.xz" >/tmp/tokenizer.json
export VERDICT_TOKENIZER=/tmp/tokenizer.json
export LD_LIBRARY_PATH=$CARRY${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export VERDICT_PACKED_CACHE=/tmp/verdict-packed
for fx in testdata/gemma3n-synthetic-tiny.tar.gz testdata/gemma3n-micro-bf16.tar.gz; do
	for dev in cuda cpu; do
		say "== verify-fixture --device $dev $(basename "$fx")"
		timeout 120 "$bin/verdict" verify-fixture --device "$dev" "$fx" 2>&1 | tee -a "$log" "$OUT/fixtures.txt" | tail -3
		say "exit ${PIPESTATUS[0]}"
	done
done
for dev in cuda cpu; do
	say "== bench --device $dev --model synthetic-e2b --json"
	t0=$(date +%s)
	timeout "${BENCH_TIMEOUT:-200}" "$bin/verdict" bench --device "$dev" --model synthetic-e2b --json \
		>"$OUT/bench-$dev.json" 2>"$OUT/bench-$dev.err"
	say "exit $? in $(($(date +%s) - t0)) s"
	tail -5 "$OUT/bench-$dev.err" | tee -a "$log"
done
echo "---- ops_check ----"
cat "$OUT/ops_check.txt"
echo "---- catalog_check ----"
cat "$OUT/catalog_check.txt"
echo "---- summary ----"
cat "$log"
